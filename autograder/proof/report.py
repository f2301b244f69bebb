"""Grade simulated classes through the real pipeline and report how the autograder held.

``python -m autograder.proof.report`` (``make grader-report``): for every graded lab in ``solutions/``, the
class of ``autograder.proof.classroom`` is exported as an LMS would, collected, graded (``autograder.grade.grade``,
hence ``nbgrader autograde`` and ``generate_feedback``) in a scratch course, and checked student by
student. It prints per lab: bugs caught, variants accepted, delegations refused, hostile and broken
submissions handled, seconds per student.

``python -m autograder.proof.report --bench N`` (``make grader-bench``): a class of N students per lab (the
solution and its correct variants, catalogued bugs, and one endless loop), default budgets; prints
seconds per student and the class's time. Results go to ``bench/results/grading.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import nbformat

from autograder.course import notebook as nbread
from autograder.course.layout import graded_labs  # noqa: F401 (read from here by the harness)
from autograder.proof import classroom
from autograder.box.limits import MEMORY_MB
from autograder.feedback.inert import live_markup
from autograder.verdict.result import GradingResult, Student, build

REPO = Path(__file__).resolve().parents[2]


def lab_memory_mb(lab: str, env: Dict[str, str]) -> int:
    """The grading kernel's memory limit for ``lab``, as nbgrader_config.py sets it."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course.layout import CONFIG_FILE

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config().HardenedExecute
    default = int(env.get("PAGED_KV_MEMORY_MB", config.get("memory_mb", 4096)))
    return int(dict(config.get("lab_limits", {})).get(lab, {}).get("memory_mb", default))


def prepare_root(folder: Path) -> Path:
    """A scratch course: the solutions and the committed release (a test keeps them in step)."""
    for name in ("solutions", "course"):
        shutil.copytree(REPO / name, folder / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return folder


def _run(module: str, *args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1) or "Traceback" in done.stderr or "SystemExit" in done.stderr:
        raise RuntimeError(f"{module} {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


@dataclass
class LabResult:
    """One lab's simulated class, graded: each student's ``GradingResult`` (``autograder.verdict.lab_results``, by
    the simulation's label) and what checking it found (``problems``); ``scores`` are the results' points per
    cell, as the gradebook holds them."""

    lab: str
    students: List[classroom.Student]
    ids: Dict[str, str]
    results: Dict[str, GradingResult]
    maxima: Dict[str, float]
    problems: Dict[str, List[str]]
    summary: dict
    seconds: float
    output: str = ""
    feedback_leaks: List[str] = field(default_factory=list)

    @property
    def scores(self) -> Dict[str, Dict[str, float]]:
        """``{label: {grade id: points}}`` (``{}`` for a student the gradebook has no submission of)."""
        return {
            sid: {c.grade_id: float(c.score) for c in result.cells if c.score is not None}
            for sid, result in self.results.items()
        }


def run_lab(
    lab: str,
    root: Path,
    env: Dict[str, str],
    students: Optional[List[classroom.Student]] = None,
    workers: Optional[int] = None,
    loop_budget: Optional[Dict[str, str]] = None,
) -> LabResult:
    """Export, collect, grade and check one lab's class in the scratch course at ``root``.

    With ``loop_budget`` (environment overrides such as ``PAGED_KV_NOTEBOOK_TIMEOUT``), the students
    whose code never ends are graded in a second run under those budgets, the rest under ``env``'s.
    """
    from autograder.verdict import lab_results

    env = dict(
        env,
        PAGED_KV_COURSE_ROOT=str(root),
        PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    info = classroom.load_lab(lab, root / "solutions", root / "course")
    memory = lab_memory_mb(lab, env)
    students = students if students is not None else classroom.build_class(info, root, memory_mb=memory)
    export = root / "exports" / lab
    ids = classroom.write_export(students, export)
    started = time.monotonic()
    collected = _run("autograder.collect.collect", lab, str(export), env=env)
    work = root / "autograder" / "work"
    # Three groups, one after the other: everyone else; the students whose code never ends (short budgets,
    # when given); the harm attacks with their honest bystanders, so that each hog runs beside an honest one.
    groups = [
        [s for s in students if not (loop_budget and s.loops) and not s.beside and not s.findings_free],
        [s for s in students if s.findings_free and not (loop_budget and s.loops) and not s.beside],
        [s for s in students if loop_budget and s.loops and not s.beside],
        [s for s in students if s.beside],
    ]
    budgets = [{}, {"PAGED_KV_FINDINGS_COST": "0"}, dict(loop_budget or {}), {}]
    spec = [
        {"students": [ids[s.sid] for s in group], "budgets": extra} for group, extra in zip(groups, budgets) if group
    ]
    graded = _run(
        "autograder.grade.grade",
        lab,
        "--groups",
        json.dumps(spec),
        *(["--workers", str(workers)] if workers else []),
        env=env,
    )
    outputs = collected.stdout + graded.stdout
    path = work / "reports" / lab / "summary.json"
    if not path.exists():
        raise RuntimeError(f"grading {lab} wrote no summary:\n{outputs}\n{graded.stderr[-4000:]}")
    summary = json.loads(path.read_text())
    path.unlink()
    seconds = time.monotonic() - started
    level = summary.get("isolation")
    problems, leaks = {}, []
    hidden_lines = secret_lines(info)
    seconds_of = {row["student"]: row["seconds"] for row in summary.get("students", [])}
    honest = sorted(
        seconds_of.get(ids[s.sid], 0.0) for s in students if s.kind in ("solution", "variant") and not s.beside
    )
    normal = honest[len(honest) // 2] if honest else None
    graded_results = lab_results.read(work, lab, root / "solutions" / lab / info.notebook)
    graded_records, _ = lab_results.records(work, lab)
    results = {}
    for student in students:
        sid = ids[student.sid]
        result = results[student.sid] = graded_results.get(sid) or build(lab, Student(sid))
        scores = {c.grade_id: float(c.score) for c in result.cells if c.score is not None}
        repairs = {k for k, _ in result.repairs}
        events = {e.kind.value for e in result.events}
        graded_nb = work / "autograded" / sid / lab / info.notebook
        outputs = _outputs(graded_nb) if graded_nb.exists() else ""
        problems[student.sid] = classroom.check_outcome(
            student,
            scores,
            info.grade_cells,
            repairs,
            events,
            outputs,
            boxed=level == "bwrap",
            language=graded_records.get(sid, {}).get("language"),  # the language grading read it in
        )
        if student.kind == "untouched" and graded_nb.exists():
            problems[student.sid] += _errors_outside_tests(graded_nb)
        took = seconds_of.get(sid, 0.0)
        if student.kind == "bystander" and normal is not None and took > bystander_limit(normal):
            problems[student.sid].append(
                f"took {took:.1f} s beside a harm attack; an honest student takes "
                f"{normal:.1f} s (limit {bystander_limit(normal):.1f} s)"
            )
        html = work / "feedback" / sid / lab / info.notebook.replace(".ipynb", ".html")
        if not html.exists():
            problems[student.sid].append("no feedback HTML")
        elif any(line in html.read_text() for line in hidden_lines):
            leaks.append(student.sid)
        if html.exists():  # every student's feedback is inert, whatever the student is
            problems[student.sid] += [f"live markup in the feedback, {found}" for found in live_markup(html)]
    return LabResult(lab, students, ids, results, info.grade_cells, problems, summary, seconds, outputs, leaks)


def bystander_limit(normal: float) -> float:
    """How long an honest student graded beside a harm attack may take: three times the usual, plus 30 s.

    This catches a hog that escapes its box (it would hold the bystander's core for the whole attack), not
    a slow machine: on 2 cores, with one grading worker per core and the graders' own processes beside
    the kernels, a contained hog has slowed a bystander 3.6x (lab 01, 11.3 s -> 41.1 s, a clean run of
    2026-12-01). A speed goal belongs in a benchmark, not in ``make test``."""
    return 3 * normal + 30


def secret_lines(info: classroom.Lab) -> List[str]:
    """What no student may ever see of the lab: its hidden tests' lines and its graders' code."""
    return _hidden_lines(info) + _grader_lines(info)


def _grader_lines(info: classroom.Lab) -> List[str]:
    """Lines of code (not message text) of the lab's grader modules: none may reach the feedback."""
    from autograder.course.notebook import checks_modules, grader_files

    lines = []
    visible = "\n".join(nbread.cell_text(c) for c in info.source["cells"] + info.release["cells"])
    for cell in info.source["cells"]:
        text = nbread.cell_text(cell)
        if nbread.BEGIN not in text:
            continue
        for name in sorted(checks_modules(text)):
            for line in (row for path in grader_files(name) for row in path.read_text().splitlines()):
                code = line.strip()
                if (
                    len(code) >= 24
                    and '"' not in code
                    and "'" not in code
                    and not code.startswith(("#", "from ", "import "))
                    and code not in visible
                ):
                    lines.append(code)
    return sorted(set(lines))


def _outputs(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":  # the Grading notes are character references: read them as a student does
            parts.append(unescape(cell.source))
        for output in cell.get("outputs", []):
            parts += [
                output.get("text", ""),
                output.get("evalue", ""),
                str(output.get("data", {}).get("text/plain", "")),
            ]
    return "\n".join(parts)


def _errors_outside_tests(path: Path) -> List[str]:
    """The untouched release may fail only in its test cells: a given cell that fails there greets every
    student with an error before they write a line."""
    nb = nbformat.read(path, as_version=4)
    return [
        f"cell {n} (not a test) fails on the untouched release: {o.get('ename')}: {str(o.get('evalue'))[:120]}"
        for n, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and not nbread.is_graded(cell)
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def _hidden_lines(info: classroom.Lab) -> List[str]:
    """Distinctive lines of the hidden tests (those that call a grader): none may reach the feedback."""
    lines = []
    for cell in info.source["cells"]:
        for region in nbread.hidden_regions(nbread.cell_text(cell)):
            lines += [line.strip() for line in region.splitlines() if "check_" in line]
    return lines


def describe(result: LabResult) -> Dict[str, str]:
    """Counts for the report: how many of each kind were graded as expected."""
    counts: Dict[str, List[int]] = {}
    for student in result.students:
        ok = not result.problems[student.sid]
        tally = counts.setdefault(student.kind, [0, 0])
        tally[0] += ok
        tally[1] += 1
    rows = {kind: f"{ok}/{n}" for kind, (ok, n) in counts.items()}
    per_student = result.summary["seconds"] / max(len(result.students), 1)
    rows["s/student"] = f"{per_student:.1f}"
    rows["class s"] = f"{result.seconds:.0f}"
    rows["cpu s"] = f"{result.summary.get('cpu_seconds', 0):.0f}"
    return rows


COLUMNS = [
    ("bug", "bugs caught"),
    ("variant", "variants accepted"),
    ("delegation", "delegation refused"),
    ("hostile", "hostile handled"),
    ("broken", "broken handled"),
    ("attack", "attacks stopped"),
    ("leak", "leaks stopped"),
    ("xss", "feedback inert"),
    ("harm", "hogs contained"),
    ("bystander", "bystanders kept"),
    ("link", "links refused"),
    ("solution", "solution full"),
    ("translated", "translated same"),
    ("untouched", "release zero"),
    ("s/student", "s/student"),
    ("class s", "class s"),
    ("cpu s", "CPU s"),
]


def attack_table(results: List[LabResult]) -> str:
    """A row per attack class: for each lab, ``ok`` when the attack earned nothing it should not (and was
    logged), or ``FAIL``; harm attacks with their bystander's seconds."""
    labs = [r.lab for r in results]
    rows: Dict[str, Dict[str, str]] = {}
    for result in results:
        for student in result.students:
            if student.kind not in ("attack", "leak", "xss", "harm", "link"):
                continue
            cell = "ok" if not result.problems[student.sid] else "FAIL"
            rows.setdefault(f"{student.kind}: {student.label}", {})[result.lab] = cell
        bystanders = [s for s in result.students if s.kind == "bystander"]
        if bystanders:
            took = max(
                next((row["seconds"] for row in result.summary["students"] if row["student"] == result.ids[b.sid]), 0.0)
                for b in bystanders
            )
            fine = all(not result.problems[b.sid] for b in bystanders)
            rows.setdefault("bystanders beside the harm attacks (slowest)", {})[result.lab] = (
                f"{'ok' if fine else 'FAIL'} {took:.0f}s"
            )
    width = max([len(k) for k in rows] + [10])
    lines = [f"{'attack class':<{width}}" + "".join(f"{lab[:12]:>14}" for lab in labs)]
    for label, cells in rows.items():
        lines.append(f"{label:<{width}}" + "".join(f"{cells.get(lab, '-'):>14}" for lab in labs))
    return "\n".join(lines)


def print_report(results: List[LabResult]) -> str:
    header = f"{'lab':<28}" + "".join(f"{title:>19}" for _, title in COLUMNS)
    lines = [header]
    for result in results:
        row = describe(result)
        lines.append(f"{result.lab:<28}" + "".join(f"{row.get(key, '-'):>19}" for key, _ in COLUMNS))
    for result in results:
        for student in result.students:
            for problem in result.problems[student.sid]:
                lines.append(f"  {result.lab} {student.kind} '{student.label}': {problem}")
        if result.feedback_leaks:
            lines.append(f"  {result.lab}: hidden test or grader code in the feedback of {result.feedback_leaks}")
    lines += ["", "Red team (every attack on every lab):", attack_table(results)]
    return "\n".join(lines)


def bench_class(info: classroom.Lab, root: Path, size: int) -> List[classroom.Student]:
    """A class of ``size``: one endless loop, one student of every attack class (on the untouched
    release), the catalogue's bugs and variants, and solutions for the rest."""
    full = classroom.build_class(info, root)
    looper = next(s for s in full if s.label == "endless loop in the TODO")
    attacks = [s for s in full if s.kind in ("attack", "leak", "xss", "harm") and "(a catalogued bug)" not in s.label]
    others = [s for s in full if s.kind in ("bug", "variant")]
    solution = next(s for s in full if s.kind == "solution")
    chosen = [looper] + attacks + others
    chosen = chosen[: max(size, len(attacks) + 1)]
    while len(chosen) < size:
        copy = classroom.Student(
            f"solution-{len(chosen):02d}",
            "solution",
            "the solution",
            solution.file_name,
            solution.content,
            solution.expect,
        )
        chosen.append(copy)
    return chosen


# The attacks that every lab meets in ``make test``: one of each attack class of issue #14 (replacing the
# checks, silencing IPython twice over, making the reference agree, delegation in disguise twice over), and
# issue #25's three syntax families that reach the reference with no name a rule could list (every lab whose
# TODO is Python; a kernel lab's TODO is built from its text).
EVERY_LAB_ATTACKS = (
    "replaces the graders' checks",
    "an IPython AST transformer",
    "the kernel always replies ok",
    "points the reference at its own code",
    "exec of the reference's source",
    "the reference's bytecode",
    "a fake triton",
    "the kernel hands its work",
    "the lab's launchers replaced",
    # issue #35: kernels the GPU compiler and the interpreter read differently (lab 06)
    "interpreter-only kernels",
    "a kernel whose constexpr the build fixes",
    "kernels whose docstring",
    "builtins as values",
    "attribute names as data",
    "pattern matching through __globals__",
)


# Of the attacks every lab meets, those of the classes below take turns (``shared_class``): a lab meets one member of
# one class, the next lab the next member (of this class, then of the next), so that every member is graded in some
# lab (the class simulation's ``test_every_student_of_the_full_class_is_graded_in_some_lab``) and each lab's class
# stays small enough for ``make test``'s time. The replaced checks and lab 06's kernel attacks have no turns: every
# lab meets them.
TAKING_TURNS = (
    ("an IPython AST transformer", "the kernel always replies ok"),  # silencing IPython
    ("points the reference at its own code", "exec of the reference's source", "the reference's bytecode"),
    ("builtins as values", "attribute names as data", "pattern matching through __globals__"),  # #25's families
)
# A lab's catalogued bugs and correct variants in ``make test``'s class: the first ones of its catalogue.
# autograder/tests/test_graders.py grades every one of them with the lab's checks; make grader-report grades
# them all through the whole pipeline.
CLASS_BUGS, CLASS_VARIANTS = 1, 1


def _takes_turns(students: List[classroom.Student], turn_index: int) -> List[classroom.Student]:
    """The attacks of ``students`` this lab leaves to other labs: of the members of ``TAKING_TURNS`` present, all but
    the one whose turn it is (the ``turn_index``-th, counted over the classes in order); of the attacks on a catalogued
    bug, all but one (that member's, else one in turn)."""
    on_bugs = [s for s in students if "(a catalogued bug)" in s.label]
    untouched = [s for s in students if s not in on_bugs]
    members = [m for group in TAKING_TURNS for m in group if any(s.label.startswith(m) for s in untouched)]
    turn = members[turn_index % len(members)] if members else None
    every = tuple(m for group in TAKING_TURNS for m in group)
    left = [s for s in untouched if s.label.startswith(every) and not (turn and s.label.startswith(turn))]
    mine = [s for s in on_bugs if turn and s.label.startswith(turn)] or on_bugs[turn_index % max(1, len(on_bugs)) :]
    return left + [s for s in on_bugs if s not in mine[:1]]


def _dealt_once(items: list, place: int, places: int) -> list:
    """Of ``items`` dealt once each over ``places`` places spread evenly, those that fall to ``place``."""
    return [item for n, item in enumerate(items) if (n * places) // max(1, len(items)) == place]


def shared_class(
    info: classroom.Lab,
    root: Path,
    lab_index: int,
    labs: int,
    memory_mb: int = MEMORY_MB,
    share: Optional[Tuple[int, int]] = None,
    dealt: bool = True,
) -> List[classroom.Student]:
    """The class ``make test`` grades for the ``lab_index``-th of ``labs`` labs: the lab's own students
    (solution, untouched, its first ``CLASS_BUGS`` catalogued bugs and ``CLASS_VARIANTS`` variants, the translated
    releases' solution (and, every other lab, catalogued bug), delegations, the student who puts live markup in its
    feedback), the replaced checks and one attack that takes turns (on the untouched release: the members of
    ``TAKING_TURNS`` in turn over the labs; and one on a catalogued bug); and a share of the rest, each dealt once,
    spread evenly: each of the three leaks (over all labs); and, over the labs that take them (``share``: this lab's
    place among them, and how many; default ``(lab_index, labs)``; none with ``dealt`` false), each harm attack,
    graded beside one honest bystander, and each hostile or broken submission; one of every four other disguises of
    delegation (of four labs in a row, each disguise meets one: labs hold different ones); one submission that is a
    symbolic link (of two labs in a row, each meets one). A lab that takes no share (the
    kernel lab) meets the harm that takes memory, beside its bystander: its limits are raised. ``make grader-report``
    grades the whole class of every lab."""
    full = classroom.build_class(info, root, memory_mb=memory_mb)
    links = [s for s in full if s.link]
    full = [s for s in full if not s.link]
    own = (
        "solution",
        "untouched",
        "bug",
        "variant",
        "translated",
        "delegation",
        "xss",
    )  # xss: live markup in its feedback
    kept, pipeline, disguises = [], [], []
    place, places = share or (lab_index, labs)
    # The turns are counted over the labs that take a share (each member once where they are as many as the members);
    # a lab that takes none meets a member in turn too.
    later = {id(s) for s in _takes_turns([s for s in full if s.kind == "attack"], place if dealt else lab_index)}
    later |= {id(s) for s in [s for s in full if s.kind == "bug"][CLASS_BUGS:]}
    later |= {id(s) for s in [s for s in full if s.kind == "variant"][CLASS_VARIANTS:]}
    full = [s for s in full if id(s) not in later]
    leaks = _dealt_once([s for s in full if s.kind == "leak"], lab_index, labs)
    harms = [s for s in full if s.kind == "harm"]
    harms = _dealt_once(harms, place, places) if dealt else [s for s in harms if "memory" in s.expect.events][:1]
    bystanders = [s for s in full if s.kind == "bystander"][: 1 if harms else 0]
    for student in full:
        if student.kind in ("leak", "harm", "bystander"):
            continue
        if student.kind == "translated" and "bug" in student.label and lab_index % 2:
            continue  # a translated release's catalogued bug: every other lab (its solution: every lab)
        if student.kind in own or (
            student.kind == "attack"
            and ("(a catalogued bug)" in student.label or student.label.startswith(EVERY_LAB_ATTACKS))
        ):
            kept.append(student)
        else:
            (disguises if student.kind == "attack" else pipeline).append(student)
    # The bystander is graded second: with one worker per core it runs beside the first harm attack.
    beside = harms[:1] + bystanders + harms[1:]
    return (
        kept
        + leaks
        + beside
        + (
            [s for n, s in enumerate(pipeline) if n % places == place % places]
            + [s for n, s in enumerate(disguises) if n % 4 == place % 4]
            + [s for n, s in enumerate(links) if n % 2 == place % 2]
            if dealt
            else []
        )
    )


def _honest_seconds(result: LabResult) -> Optional[float]:
    """Median grading seconds of the honest students (solution, variants, bugs) in the class."""
    times = sorted(
        row["seconds"]
        for row in result.summary["students"]
        if any(
            result.ids[st.sid] == row["student"] and st.kind in ("solution", "variant", "bug") for st in result.students
        )
    )
    return round(times[len(times) // 2], 2) if times else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", action="append", help="only this lab (repeatable)")
    parser.add_argument("--bench", type=int, default=0, help="grade a class of N per lab instead")
    parser.add_argument("--cell-timeout", type=int, default=None)
    parser.add_argument("--notebook-timeout", type=int, default=None)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.cell_timeout:
        env["PAGED_KV_CELL_TIMEOUT"] = str(args.cell_timeout)
    if args.notebook_timeout:
        env["PAGED_KV_NOTEBOOK_TIMEOUT"] = str(args.notebook_timeout)
    labs = args.lab or graded_labs(REPO / "solutions")
    results = []
    with tempfile.TemporaryDirectory(prefix="pkv-class-") as scratch:
        for lab in labs:
            root = prepare_root(Path(scratch) / lab)
            students = None
            if args.bench:
                students = bench_class(classroom.load_lab(lab, root / "solutions", root / "course"), root, args.bench)
            result = run_lab(lab, root, env, students=students)
            results.append(result)
            print(f"{lab}: {len(result.students)} students in {result.seconds:.0f} s", flush=True)
    print(print_report(results))
    if args.bench:
        out = REPO / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        (out / "grading.json").write_text(
            json.dumps(
                [
                    {
                        "lab": r.lab,
                        "students": len(r.students),
                        "class_seconds": round(r.seconds, 1),
                        "seconds_per_student": round(r.summary["seconds"] / len(r.students), 2),
                        "honest_seconds_per_student": _honest_seconds(r),
                        "attacks_stopped": sum(
                            1
                            for st in r.students
                            if st.kind in ("attack", "leak", "xss", "harm") and not r.problems[st.sid]
                        ),
                        "attacks": sum(1 for st in r.students if st.kind in ("attack", "leak", "xss", "harm")),
                        "cpu_seconds": r.summary.get("cpu_seconds"),
                        "workers": r.summary.get("workers"),
                        "isolation": r.summary.get("isolation"),
                    }
                    for r in results
                ],
                indent=1,
            )
        )
    failed = any(any(r.problems.values()) or r.feedback_leaks for r in results)
    return 1 if failed and not args.bench else 0


if __name__ == "__main__":
    sys.exit(main())
