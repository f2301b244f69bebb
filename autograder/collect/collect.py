"""Collect a lab's submissions from a folder or a zip, as an LMS exports them, into nbgrader's layout.

``python -m autograder.collect.collect LAB SOURCE`` (``make collect LAB=... FROM=...``) accepts:

- a folder or a zip with one entry per student: a sub-folder, a zip, or a notebook;
- Canvas's "Download Submissions" zip: ``<name>[_LATE]_<user id>_<attachment id>_<file name>``;
- Moodle's "Download all submissions" zip, with or without a folder per student:
  ``<Full Name>_<participant id>_assignsubmission_file[_][/]<file name>``.

The export is read into each student's files by ``autograder.collect.gather``; whose each entry is, is read by
``autograder.collect.entry_names`` (a name in any script gets an id of its own, ``ZhangSan-1d84``, and is kept as
written in the roster): two entries that give the same
student id and are not one student's (``alice/`` and ``@alice/``; two Moodle folders of participant 42
with different names) are both refused, never merged: neither is graded, the student's Grading notes say
so, and the instructor sees both named (``id-collision`` in the repairs and log.csv, a WARNING on the
terminal). An entry whose name holds two LMS ids is refused alone.

For every student it picks the lab's notebook (the expected name, then "Copy of …", "… (1)" and
other renamed copies, then the only notebook there is), repairs it (``autograder.collect.repair``) against the
release in the notebook's language (``autograder.course.languages``: its prose stays the student's), writes it to
``submitted/<student>/<LAB>/<notebook>`` and keeps the original beside the work folder. Each student's
repairs go to ``reports/<LAB>/repairs.csv``; students are listed in ``reports/<LAB>/roster.csv`` with what the
LMS's download says of each (``entry_names``): which LMS, its id for the student (Canvas's user id, Moodle's
participant id), the full name where the download carries one (Moodle's; Canvas writes only a slug of the
name, kept in ``name``) and whether the submission is late (Canvas marks it ``LATE``: yes or no; Moodle's
download does not say: empty). Nothing is guessed: what the download does not carry is left empty.

Every name below ``SOURCE`` is a student's, and is read with ``autograder.collect.entries``: only regular
files, never through a link, within limits per entry and per student. An entry that is not one (a link,
a FIFO, a device, a zip entry that leaves its folder or is too large) is refused alone: its student's
other files and every other student are collected, and it is named with its reason in the repairs, the
student's Grading notes and on the terminal.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import nbformat

from autograder.course.languages import submitted_language, translated_releases
from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.collect.entries import MAX_ENTRY, Refused, read_file
from autograder.collect.entry_names import safe_id
from autograder.collect.gather import Submission, gather, submission_for  # noqa: F401 (read from here too)
from autograder.collect.repair import Repaired, add_note, repair


def pick_notebook(files: List[Path], expected: str) -> Tuple[Optional[Path], List[str]]:
    """The file to grade as ``expected`` and what was skipped."""
    notebooks = [
        f for f in files if f.suffix == ".ipynb" and ".ipynb_checkpoints" not in f.parts and "__MACOSX" not in f.parts
    ]
    stem = expected[: -len(".ipynb")]
    by_rank = sorted(notebooks, key=lambda f: (_rank(f.name, stem), len(f.name), str(f)))
    if not by_rank:
        return None, [f.name for f in files]
    chosen = by_rank[0]
    if _rank(chosen.name, stem) == 3 and len(notebooks) > 1:
        return None, [f.name for f in notebooks]  # several unrelated notebooks: nothing to choose by
    return chosen, [f.name for f in notebooks if f is not chosen]


def notebooks_of_the_lab(files: List[Path], grade_ids: Iterable[str]) -> List[Path]:
    """Of ``files``, the notebooks whose content is this lab's: valid JSON whose cells carry one of the lab's
    ``grade_ids`` in their nbgrader metadata, read as collection reads (``read_file``: plain files, in limits)."""
    wanted = set(grade_ids)
    found = []
    for path in files:
        if path.suffix != ".ipynb" or ".ipynb_checkpoints" in path.parts or "__MACOSX" in path.parts:
            continue
        try:
            cells = json.loads(read_file(path).decode("utf-8-sig", errors="replace")).get("cells", [])
            ids = {nbgrader_meta(c).get("grade_id") for c in cells if isinstance(c, dict)}
        except (Refused, ValueError, AttributeError, OSError):
            continue
        if ids & wanted:
            found.append(path)
    return found


def _nothing_to_grade(release, kind: str, detail: str, note: str) -> Repaired:
    """The release, graded in place of a submission that gave no one notebook of the lab, with why."""
    result = Repaired(notebook=copy.deepcopy(release))
    add_note(result, kind, detail, note)
    return result


def _rank(name: str, stem: str) -> int:
    if name == f"{stem}.ipynb":
        return 0
    plain = re.sub(r"^(copy of |copie de |kopie von )", "", name.lower())
    plain = re.sub(r"(\s*\(\d+\)|-\d+|_\d+|\s+copy(\s*\d+)?|-checkpoint)(?=\.ipynb$)", "", plain)
    if plain == f"{stem.lower()}.ipynb":
        return 1
    return 2 if stem.lower() in name.lower() else 3


def collect(lab: str, source: Path, course_root: Path, release_dir: Path, notebook: str) -> List[dict]:
    """Write every student's repaired notebook; return one record per student."""
    with tempfile.TemporaryDirectory() as scratch:
        return write_submissions(lab, gather(source, Path(scratch)), course_root, release_dir, notebook)


def _note_superseded(repaired, submission: Submission) -> None:
    """Say which of several submissions was graded (the student's Grading notes, the instructor's log), and keep
    a ``superseded`` line for each earlier one."""
    graded = submission.submitted_at or "the latest"
    earlier = submission.superseded
    add_note(
        repaired,
        "graded-submission",
        f"{graded} (latest of {len(earlier) + 1})",
        f"You submitted {len(earlier) + 1} times: your latest submission, of {graded}, was graded. "
        f"{'Your earlier one' if len(earlier) == 1 else 'Your earlier ones'} ({', '.join(earlier)}) "
        f"{'was' if len(earlier) == 1 else 'were'} superseded by it and not graded.",
    )
    for when in earlier:
        repaired.log.append(("superseded", f"submission of {when} superseded by {graded}"))


def write_submissions(
    lab: str,
    submissions: Dict[str, Submission],
    course_root: Path,
    release_dir: Path,
    notebook: str,
    keep: Tuple[str, ...] = (),
) -> List[dict]:
    """Repair and write each student's notebook to ``submitted/<student>/<lab>/``; one record per student.

    ``keep``: names of other files of a submission copied beside the notebook as they are (nbgrader's
    exchange puts ``timestamp.txt`` and ``submission_secret.txt`` there: feedback is released with them).
    Files are read with ``entries.read_file`` (never through a link); every entry refused, in
    ``Submission.refused`` or here, is a ``refused-entry`` line of the student's repairs and a note in
    their Grading notes. A collided submission (``Submission.collided``) is written as the release with
    an ``id-collision`` line naming its entries and a note that says none was graded (its refused entries
    are the instructor's only: whose they are is not known). Bad arguments are refused before anything is
    written."""
    bad = [name for name in keep if not name or "/" in name or name.endswith(".ipynb")]
    if bad:
        raise ValueError(f"keep names plain non-notebook files, got {bad}")
    unsafe = sorted(sid for sid in submissions if safe_id(sid) != sid)
    if unsafe:
        raise ValueError(f"unsafe student id {unsafe[0]!r}")
    release = nbformat.read(release_dir / lab / notebook, as_version=4)
    releases = {
        language: nbformat.reads(json.dumps(data), as_version=4)
        for language, data in translated_releases(release_dir, lab, notebook).items()
    }
    grade_ids = [nbgrader_meta(c).get("grade_id") for c in release.cells if nbgrader_meta(c).get("grade")]
    work = course_root / "autograder" / "work"
    records = []
    for sid, submission in sorted(submissions.items()):
        collided = bool(submission.collided)
        chosen, skipped = (None, []) if collided else pick_notebook(submission.files, notebook)
        ours: List[Path] = []
        if chosen is None and not collided:  # no name to go by: the lab's notebooks are known by their cells
            ours = notebooks_of_the_lab(submission.files, grade_ids)
            if len(ours) == 1:
                chosen, skipped = ours[0], [name for name in skipped if name != ours[0].name]
        raw, refused = b"", list(submission.refused)
        if chosen is not None:
            try:
                raw = read_file(chosen)
            except Refused as why:
                refused.append((chosen.name, str(why)))
                chosen = None
        name = chosen.name if chosen is not None else "(none)"
        if collided:
            repaired = _collision(sid, submission.collided, release)
        elif chosen is None and len(ours) > 1:
            names = ", ".join(f"`{_shown(p.name)}`" for p in ours)
            repaired = _nothing_to_grade(
                release,
                "several-notebooks",
                ", ".join(p.name for p in ours),
                f"Your submission holds {len(ours)} notebooks of this lab ({names}), so none was graded: the "
                f"autograder cannot tell which one you want graded. Submit one notebook, `{notebook}`.",
            )
        elif chosen is None:
            repaired = _nothing_to_grade(
                release,
                "no-notebook",
                f"files: {', '.join(skipped) or 'none'}",
                f"No notebook of this lab was found in your submission, so nothing was graded. Submit the lab's "
                f"notebook, `{notebook}` (File > Download in JupyterLab or Colab).",
            )
        else:
            language = submitted_language(raw)  # repaired against its own language's release: its prose and notes
            repaired = repair(raw, releases.get(language, release), file_name=chosen.name, expected_name=notebook)
            if skipped:
                repaired.log.append(("skipped-files", ", ".join(skipped)))
        for entry, reason in refused:
            if collided:
                repaired.log.append(("refused-entry", f"{entry}: {reason}"))
                continue
            add_note(
                repaired,
                "refused-entry",
                f"{entry}: {reason}",
                f"Your file `{_shown(entry)}` was not collected: {reason}. Only plain files are collected (not "
                f"links to files elsewhere, pipes or devices), each of at most {MAX_ENTRY >> 20} MB: submit "
                "the notebook file itself.",
            )
        if submission.superseded and not collided:
            _note_superseded(repaired, submission)
        if submission.unmatched and not collided:  # the instructor's: the student's file is fine
            repaired.log.append(("not-lms-form", submission.unmatched))
        if submission.unlisted and not collided:
            add_note(
                repaired,
                "refused-entry",
                f"{submission.unlisted} more entries refused",
                f"{submission.unlisted} more of your files were not collected.",
            )
        target = work / "submitted" / sid / lab
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        nbformat.write(repaired.notebook, target / notebook)
        for kept in (f for f in submission.files if f.name in keep and ".ipynb_checkpoints" not in f.parts):
            try:
                (target / kept.name).write_bytes(read_file(kept))
            except Refused as why:
                repaired.log.append(("refused-entry", f"{kept.name}: {why}"))
        originals = work / "originals" / lab / sid
        if originals.exists():
            shutil.rmtree(originals)
        originals.mkdir(parents=True)
        if chosen is not None:
            (originals / chosen.name).write_bytes(raw)
        records.append(
            {
                "student": sid,
                "name": submission.name,
                "file": name,
                "repairs": repaired.log,
                "lms": submission.lms,
                "lms_id": submission.lms_id,
                "full_name": submission.full_name,
                "late": submission.late,
            }
        )
    kept = write_reports(work / "reports" / lab, records)
    if kept:
        print(
            f"{lab}: {len(records)} student(s) collected now, {kept} kept from an earlier collection "
            f"(roster.csv lists both)"
        )
    return records


def _collision(sid: str, entries: List[str], release) -> Repaired:
    """The release, to grade in place of a student whose id several entries gave, with the instructor's
    ``id-collision`` line (every entry named) and the student's note (no other entry named: another
    student's name is not theirs to read)."""
    result = Repaired(notebook=copy.deepcopy(release))
    add_note(
        result,
        "id-collision",
        f"{len(entries)} entries give the student id {sid}: {', '.join(repr(_shown(e)) for e in entries)}; "
        "none was graded: rename them in the export so that each names its own student, and collect again",
        f"Nothing was graded for you: {len(entries)} entries of the class's submissions were all read as "
        f"your student id, {sid}, and the autograder cannot tell which one is yours, so it graded none of "
        "them. Your instructor has their names and will sort it out.",
    )
    return result


def _shown(name: str) -> str:
    """A file name a student chose, fit to quote in a code span of the Grading notes: one line, no backtick."""
    plain = "".join(c if c.isprintable() else "?" for c in name).replace("`", "'")
    return plain if len(plain) <= 120 else plain[:117] + "..."


def write_reports(folder: Path, records: List[dict]) -> int:
    """Write ``roster.csv``, ``repairs.csv`` and ``collected.json`` for a lab: ``records`` merged with what an
    earlier collection of the lab wrote there (a student collected again is replaced, the others are kept: one
    late resubmission collected alone does not drop the class). Returns how many earlier students were kept."""
    folder.mkdir(parents=True, exist_ok=True)
    now = {r["student"] for r in records}
    kept = [r for r in _earlier_records(folder / "collected.json") if r.get("student") not in now]
    records = sorted(kept + list(records), key=lambda r: r["student"])
    with open(folder / "roster.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(ROSTER_COLUMNS)
        writer.writerows(
            [
                r["student"],
                r["name"],
                r["file"],
                r.get("lms", ""),
                r.get("lms_id", ""),
                r.get("full_name", ""),
                late_word(r.get("late")),
            ]
            for r in records
        )
    with open(folder / "repairs.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "kind", "detail"])
        for record in records:
            writer.writerows([record["student"], kind, detail] for kind, detail in record["repairs"])
    (folder / "collected.json").write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
    return len(kept)


ROSTER_COLUMNS = ["student_id", "name", "file", "lms", "lms_id", "full_name", "late"]


def late_word(late: Optional[bool]) -> str:
    """``late`` as roster.csv and grades.csv write it: "yes", "no", or "" where the download does not say."""
    if late is not None and not isinstance(late, bool):
        raise ValueError(f"late is True, False or None (not said), got {late!r}")
    return "" if late is None else ("yes" if late else "no")


def _earlier_records(path: Path) -> List[dict]:
    """The records an earlier collection wrote (``[]`` when there is none, or it cannot be read as records)."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(records, list):
        return []
    return [
        r
        for r in records
        if isinstance(r, dict) and isinstance(r.get("student"), str) and {"name", "file", "repairs"} <= set(r)
    ]


def main(argv=None) -> int:
    from autograder.course.layout import LABS, RELEASE_DIR, ROOT

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lab", choices=sorted(LABS))
    parser.add_argument("source", type=Path, help="a folder or a zip (Canvas, Moodle, or one entry per student)")
    args = parser.parse_args(argv)
    if not args.source.exists():
        parser.error(f"{args.source} does not exist")
    try:
        records = collect(args.lab, args.source, ROOT, RELEASE_DIR, LABS[args.lab])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    repaired = sum(1 for r in records if any(k not in ("added-cells",) for k, _ in r["repairs"]))
    reports = Path(ROOT).resolve() / 'autograder' / 'work' / 'reports' / args.lab
    print(f"{args.lab}: {len(records)} students collected, {repaired} with repairs (see {reports / 'repairs.csv'})")
    late = [r["student"] for r in records if r.get("late")]
    if late:
        print(
            f"{args.lab}: {len(late)} submission(s) the LMS marks late: {', '.join(late)} "
            f"(the late column of {reports / 'roster.csv'} and of grades.csv)"
        )
    for record in records:
        kinds = sorted({k for k, _ in record["repairs"]} - {"added-cells"})
        if kinds:
            print(f"  {record['student']:>16}  {record['file']}: {', '.join(kinds)}")
    print_refused(records)
    return 0


def print_refused(records: List[dict]) -> None:
    """A warning line on stderr for every entry refused, with its student and the reason, for every id that
    several entries gave (``id-collision``), with every entry, and for every entry whose name looks like an LMS's
    but is not in its form (``not-lms-form``: no LMS id, no late flag)."""
    for record in records:
        for kind, detail in record["repairs"]:
            if kind == "refused-entry":
                print(f"WARNING: refused for {record['student']}: {detail}", file=sys.stderr)
            elif kind == "id-collision":
                print(f"WARNING: id collision: {detail}", file=sys.stderr)
            elif kind == "not-lms-form":
                print(f"WARNING: {detail}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
