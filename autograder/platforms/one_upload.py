"""Grade one student's upload the way ``make collect`` + ``make grade`` grade a class: the core that the
Gradescope and PrairieLearn adapters share (each only reads the platform's folders and writes its format).

``grade_upload(lab, folder)`` reads the files of ``folder`` (the platform's copy of the upload) as
``make collect`` reads a student's entry (regular files only, never through a link, within its limits),
picks the lab's notebook (the expected name, "Copy of ...", "... (1)", the only notebook there), repairs it
from the release, grades it with ``autograder.grade.grade`` (the same trusted grader and box) and
returns an ``Outcome``: one ``CellResult`` per graded cell (its points, its score and the message the
feedback shows for it, never hidden-test source), the Grading notes (repairs, limits, provenance findings)
and what the instructor should know (box level, seconds), from the upload's result (``autograder.verdict.result``,
as ``make grade`` renders it). An upload with no notebook to grade (none, several unrelated ones, not valid JSON)
is not graded: every test scores 0 and ``problem`` says what to upload. A grading the isolation check refused is
no grade at all: ``refused`` says why (for the instructor), and each platform reports an autograder failure, never
a score.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

STUDENT = "student"
NOT_GRADED = ("no-notebook", "invalid-json", "several-notebooks")
# How the Grading notes of those kinds begin (``collect``, ``repair``): ``problem`` says it already.
SAID_BY_THE_PROBLEM = (
    "No notebook of this lab",
    "Your submission holds",
    "Your file is not a valid notebook",
    "Your file is JSON but not a notebook",
)


@dataclass
class CellResult:
    """One graded cell: its id, a name a student can read (the lab's section and the cell), points."""

    grade_id: str
    name: str
    score: float
    max_score: float
    output: str
    hidden: bool


@dataclass
class Outcome:
    """What grading one upload gave (``problem``: why nothing could be graded, else empty)."""

    lab: str
    tests: List[CellResult]
    notes: List[str] = field(default_factory=list)  # the Grading notes, as the student's feedback words them
    problem: str = ""
    seconds: float = 0.0
    isolation: str = ""
    file: str = ""
    log: List[str] = field(default_factory=list)  # the instructor's lines (``kind: detail``): stdout, never results
    gradable: bool = True  # False: the upload held nothing to grade (it should not cost the student an attempt)
    refused: str = ""  # the isolation check refused to grade (why, for the instructor): no score at all

    @property
    def graded(self) -> bool:
        """Whether this is a grade: not when grading was refused (each platform reports an autograder failure)."""
        return not self.refused

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tests), 4)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_score for t in self.tests), 4)

    def message(self) -> str:
        """What the student reads about the whole upload: the problem, if any, then the Grading notes."""
        lines = [self.problem] if self.problem else []
        if self.notes:
            lines += ["Grading notes:"] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) or "Graded: see each test below."


def _gather(folder: Path, scratch: Path):
    """The upload's files as one student's ``collect.Submission`` (read as ``make collect`` reads an entry)."""
    from autograder.collect import gather
    from autograder.collect.entries import Budget, open_folder, walk

    submission = gather.Submission(student=STUDENT, name=STUDENT)
    top = open_folder(str(folder))
    try:
        gather._stage(walk(top, Budget()), scratch / "upload", submission, "")
    finally:
        os.close(top)
    return submission


def _what_to_upload(notebook: str, repairs: List[list]) -> str:
    kinds = {kind: detail for kind, detail in repairs}
    if "several-notebooks" in kinds:
        return (
            f"Your upload holds several notebooks of this lab ({kinds['several-notebooks'][:300]}), so none was "
            f"graded: upload one, the lab's notebook file `{notebook}`, alone."
        )
    if "no-notebook" in kinds:
        return (
            f"No notebook to grade was found in your upload ({kinds['no-notebook']}). Upload the lab's notebook "
            f"file, `{notebook}`, alone (File > Download in JupyterLab or Colab), not a zip of a folder with "
            "several notebooks, a PDF or a link."
        )
    return (
        f"Your notebook is not a notebook file that can be read ({kinds['invalid-json'][:300]}). Download it again "
        f"from JupyterLab or Colab (File > Download, `{notebook}`) and upload that file unchanged."
    )


def grade_upload(lab: str, folder: Path) -> Outcome:
    """Grade the upload in ``folder`` as ``make grade`` grades a student of ``lab`` (see the module doc)."""
    from autograder.collect import collect
    from autograder.course.layout import LABS, RELEASE_DIR, ROOT, SOURCE_DIR
    from autograder.course.notebook import lab_cells
    from autograder.grade import grade
    from autograder.verdict import lab_results
    from autograder.verdict.result import Status

    if lab not in LABS:
        raise ValueError(f"unknown lab {lab!r}; the labs are {', '.join(sorted(LABS))}")
    if not Path(folder).is_dir():
        raise ValueError(f"{folder} is not a folder: give the folder the platform put the upload in")
    started = time.monotonic()
    notebook = LABS[lab]
    cells = lab_cells(SOURCE_DIR / lab / notebook)
    with tempfile.TemporaryDirectory() as scratch:
        submission = _gather(Path(folder), Path(scratch))
        record = collect.write_submissions(lab, {STUDENT: submission}, ROOT, RELEASE_DIR, notebook)[0]
    repairs = [list(r) for r in record["repairs"]]
    log = [f"{kind}: {detail}" for kind, detail in repairs if kind != "added-cells"]
    kinds = {kind for kind, _ in repairs}
    work = ROOT / "autograder" / "work"
    if kinds & set(NOT_GRADED):
        tests = [_test(c, 0.0, "not graded: see the message above") for c in cells]
        notes = [
            n
            for n in student_notes(work / "submitted" / STUDENT / lab / notebook)
            if not n.startswith(SAID_BY_THE_PROBLEM)
        ]  # (the problem says it, with what to upload)
        return Outcome(
            lab,
            tests,
            notes,
            _what_to_upload(notebook, repairs),
            round(time.monotonic() - started, 1),
            file=record["file"],
            log=log,
            gradable=False,
        )
    summary = grade.grade(lab, [STUDENT], one_upload=True)  # its WARNINGs go to the instructor's stdout
    result = lab_results.read(work, lab, SOURCE_DIR / lab / notebook).get(STUDENT)
    if result is None:
        raise RuntimeError(f"grading {lab} left no result for the upload (summary: {summary.get('students')})")
    log += [f"{event.cell}: {event.kind}: {event.detail}" for event in result.events]
    if result.refused:  # nothing ran: no score, not a 0 (each platform reports an autograder failure)
        return Outcome(
            lab,
            [_test(c, 0.0, "not graded: the grader refused to run on this machine") for c in cells],
            [],
            "",
            round(time.monotonic() - started, 1),
            summary.get("isolation", ""),
            record["file"],
            log=log,
            refused=result.why or "the grading box could not be trusted on this machine",
        )
    declared = {c["grade_id"] for c in cells}
    tests = []
    for cell in (c for c in result.cells if c.grade_id in declared):
        score = float(cell.score or 0.0)
        if score >= cell.points - 1e-9:
            output = "passed"
        elif cell.passed:
            output = "its checks passed here, but the cell failed when your notebook ran it: see your feedback"
        else:
            output = (cell.message or "failed").strip()
        tests.append(
            CellResult(
                cell.grade_id,
                _name(vars(cell)),
                round(score, 4),
                cell.points,
                output[:4000],
                cell.hidden,
            )
        )
    # The student reads what their feedback page says (the Grading notes, in sentences); the instructor's codes
    # and flags (similar-to-reference, why the box could not be trusted) go to stdout, which only staff read.
    notes = student_notes(work / "autograded" / STUDENT / lab / notebook) or student_notes(
        work / "submitted" / STUDENT / lab / notebook
    )
    if result.status is not Status.GRADED:
        notes.append("Grading this notebook failed; your instructor has the log.")
    return Outcome(
        lab,
        tests,
        notes,
        "",
        round(time.monotonic() - started, 1),
        summary.get("isolation", ""),
        record["file"],
        log=log,
    )


def _test(cell: dict, score: float, output: str) -> CellResult:
    return CellResult(cell["grade_id"], _name(cell), score, cell["points"], output, cell["hidden"])


def student_notes(path: Path) -> List[str]:
    """The lines of the *Grading notes* cell of the notebook at ``path`` as plain text (the sentences the student's
    feedback shows, markup references undone); [] when it has none or cannot be read."""
    import html

    import nbformat

    from autograder.feedback.inert_cells import NOTES_CELL_ID

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - a notebook that cannot be read has no notes to show
        return []
    cell = next((c for c in nb.cells if c.get("id") == NOTES_CELL_ID), None)
    if cell is None:
        return []
    lines = [line.strip() for line in cell.source.splitlines()[1:] if line.strip()]
    lines = [line for line in lines if not line.startswith("The autograder changed or noticed")]
    return [html.unescape(line[2:] if line.startswith("- ") else line) for line in lines]


def _name(cell: dict) -> str:
    kind = "hidden tests" if cell["hidden"] else "visible tests"
    return f"{cell['section']}: {kind} ({cell['grade_id']})" if cell["section"] else f"{cell['grade_id']} ({kind})"


def grader_version() -> str:
    """The course package's version (pyproject) and, when known, the commit the autograder was built from."""
    from importlib import metadata

    try:
        version = metadata.version("paged-kv-course")
    except metadata.PackageNotFoundError:
        version = "unknown"
    built = Path(__file__).resolve().parents[1] / "BUILT_FROM"
    return version + (f" ({built.read_text().strip()})" if built.exists() else "")


def grade_or_failure(lab: str, folder: Path) -> Outcome:
    """``grade_upload``, or when the grader itself fails, a 0 that says so (its traceback on stdout, which only
    the instructor sees): a platform must always get a result to show."""
    import sys
    import traceback

    from autograder.platforms import bundle

    try:
        return grade_upload(lab, folder)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the student gets a result, the instructor the trace
        # (grade() stops with SystemExit for what the instructor must fix: a damaged gradebook, no assignment)
        traceback.print_exc(file=sys.stdout)
        return failure(lab, error, bundle.cells_of(lab))


def print_for_instructor(outcome: Outcome, target: Path) -> None:
    """The platform job's stdout, which only the course's staff read: the score, the box level, where the results
    went, and the instructor's log lines (repairs and grading events, flags such as ``similar-to-reference``); for
    a refused grading, why and what to do (docs/instructors.md, "What grading needs")."""
    if outcome.refused:
        print(
            f"REFUSED: {outcome.lab}: nothing was graded, so this upload has no score: {outcome.refused}. Fix the "
            "grading image (docs/instructors.md, 'What grading needs'; python -m autograder.box.sandbox --probe "
            f"in it says what is wrong), then grade the upload again; box level '{outcome.isolation or '-'}'"
        )
    else:
        print(
            f"{outcome.lab}: {outcome.score:g} / {outcome.max_score:g} in {outcome.seconds:.1f} s; box level "
            f"'{outcome.isolation or '-'}'; results: {target}"
        )
    for line in outcome.log:
        print(f"  log: {line}")


def write_results(target: Path, data: dict) -> None:
    """A platform's results.json at ``target`` (its folder made if needed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1))


def failure(lab: str, error: BaseException, cells: Optional[list] = None) -> Outcome:
    """An ``Outcome`` for an upload the autograder could not grade at all (its own fault): 0, and why."""
    tests = [CellResult(c["grade_id"], _name(c), 0.0, c["points"], "not graded", c["hidden"]) for c in cells or []]
    # A SystemExit is the grader's own stop for the instructor (a damaged gradebook): its text is theirs (stdout).
    why = (
        "its setup needs your instructor's attention"
        if isinstance(error, SystemExit)
        else f"{type(error).__name__}: {str(error)[:300]}"
    )
    return Outcome(
        lab, tests, [], f"The autograder could not grade this upload ({why}). Tell your instructor; they have the log."
    )
