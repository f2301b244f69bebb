"""Grade a lab for a whole class, headless: ``python -m autograder.grade.grade LAB`` (``make grade LAB=...``).

0. checks the gradebook file (``autograder.grade.gradebook_file``): one that is not a database, or that
   another program holds locked, stops it with one line that names the file and what to do;
1. says which isolation the grading kernels get here (``autograder.box.sandbox``; as root it installs bubblewrap
   with apt when it is missing), loudly when it is weak; where the box cannot be trusted each notebook's grading
   is refused (``autograder.grade.lab_boxes.refuse``): nothing runs, and that student's result is ``refused``;
2. makes sure the gradebook knows the lab (``nbgrader generate_assignment`` into the work folder);
3. adds every student of ``submitted/*/LAB`` to the gradebook, one at a time;
4. runs ``nbgrader autograde`` for the students in parallel, one worker process per core, each
   reusing its loaded nbgrader for student after student (sqlite waits for its lock: see db_url);
   and ``nbgrader generate_feedback`` (without hidden tests) for each right after;
5. writes ``reports/grades.csv`` (``autograder.grade.lms_gradebook.write_grades_csv``: nbgrader export's
   columns, then what each lab's collection read from the LMS's download: full name, LMS and its id for the
   student, late);
6. writes ``reports/LAB/log.csv`` (repairs from collect + what happened while grading, per student) and
   ``reports/LAB/summary.json``, and prints a table: each student's result (``autograder.verdict.result``: id,
   name as written, late flag, score or ``refused`` / ``failed``, seconds, what grading noted);
7. writes what the class got wrong, ``reports/LAB/insight.html`` (``autograder.feedback.insight``).

It exits 1 when any student was not graded (grading refused or failed): a refused grading is no grade, and the
table ends with why and what to do.

Budgets come from ``nbgrader_config.py`` (environment overrides ``PAGED_KV_CELL_TIMEOUT``,
``PAGED_KV_NOTEBOOK_TIMEOUT``, ``PAGED_KV_MEMORY_MB``, ``PAGED_KV_ISOLATION``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from autograder.grade import gradebook_file

from autograder.box import undertaker
from autograder.course.layout import CONFIG_FILE

_API = None
# nbgrader runs alembic from PATH when it creates a gradebook: the environment's bin must come first.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def _load_api():
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    config.NbGraderAPI.log_level = "ERROR"
    return NbGraderAPI(config=config)


def _init_worker(budgets: Dict[str, str], parent: int) -> None:
    """Load nbgrader once in this worker, with ``budgets`` (``PAGED_KV_*`` overrides) in its environment.
    The worker dies with ``parent`` (the grading process): SIGKILL on its death, as its kernels die with it."""
    global _API
    import ctypes
    import logging
    import signal
    import warnings

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the undertaker still cleans up
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    os.environ.update(budgets)
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    _API = _load_api()


def _autograde(lab: str, student: str, feedback: bool = True) -> dict:
    """Runs in a worker: one student's ``nbgrader autograde`` then (with ``feedback``) ``generate_feedback``."""
    started = time.monotonic()
    result = _API.autograde(lab, student, force=True, create=False)
    if result.get("success") and feedback:
        feedback = _API.generate_feedback(lab, student)
        if not feedback.get("success"):
            result = {"success": False, "error": "generate_feedback failed:\n" + (feedback.get("error") or "")}
    return {
        "student": student,
        "success": bool(result.get("success")),
        "seconds": time.monotonic() - started,
        "log": (result.get("error") or "") + (result.get("log") or ""),
    }


def nbgrader_cli(*args: str, root: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR", f"--NbGrader.config_file={CONFIG_FILE}"]
    return subprocess.run(command, cwd=root, capture_output=True, text=True)


def ensure_assignment(lab: str, root: Path, work: Path) -> None:
    """Load the lab's source cells into the gradebook (into the work folder, leaving course/ as it is)."""
    from nbgrader.api import Gradebook, MissingEntry

    db = work / "gradebook.db"
    if db.exists():
        with Gradebook(f"sqlite:///{db}") as gb:
            try:
                if gb.find_assignment(lab).notebooks:
                    return
            except MissingEntry:
                pass
    done = nbgrader_cli(
        "generate_assignment",
        lab,
        "--force",
        f"--CourseDirectory.release_directory={work.relative_to(root) / 'release'}",
        root=root,
    )
    if done.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment {lab} failed:\n{done.stderr[-3000:]}")


def add_students(students: List[str], roster: Dict[str, Dict[str, str]], db: Path) -> None:
    """Add each of ``students`` to the gradebook ``db``; a student the roster says came from Canvas gets its
    Canvas user id as nbgrader's ``lms_user_id``. Names are never written: no download gives a first and a
    last name (Canvas's is a slug, Moodle's a full name: both are in roster.csv and grades.csv), so
    ``first_name`` and ``last_name`` stay what the instructor set (``nbgrader db student import``). A Moodle
    participant id is the assignment's, not the student's, so it is not an ``lms_user_id`` either."""
    from nbgrader.api import Gradebook

    if not (
        isinstance(students, list)
        and all(isinstance(s, str) and s for s in students)
        and isinstance(roster, dict)
        and isinstance(db, Path)
    ):
        raise ValueError(
            f"add_students takes a list of student ids, read_roster's rows and the gradebook's Path, "
            f"got {students!r}, {type(roster).__name__}, {db!r}"
        )
    with Gradebook(f"sqlite:///{db}") as gb:
        gb.db.execute(__import__("sqlalchemy").text("PRAGMA journal_mode=WAL"))
        for student in students:
            row = roster.get(student, {})
            known = {"lms_user_id": row["lms_id"]} if row.get("lms") == "canvas" and row.get("lms_id") else {}
            gb.update_or_create_student(student, **known)


def read_roster(folder: Path) -> Dict[str, Dict[str, str]]:
    """``{student id: roster.csv's row}`` of the lab's reports ``folder`` (``{}`` without a roster)."""
    roster = folder / "roster.csv"
    if not roster.exists():
        return {}
    with open(roster, newline="") as handle:
        return {row["student_id"]: dict(row) for row in csv.DictReader(handle)}


BUDGET_KEYS = (
    "PAGED_KV_CELL_TIMEOUT",
    "PAGED_KV_NOTEBOOK_TIMEOUT",
    "PAGED_KV_MEMORY_MB",
    "PAGED_KV_RAM_MB",
    "PAGED_KV_FINDINGS_COST",
)


def parse_groups(text: str) -> List[Tuple[List[str], Dict[str, str]]]:
    """``--groups`` JSON, ``[{"students": [...], "budgets": {"PAGED_KV_CELL_TIMEOUT": "5"}}, ...]``, checked."""
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise SystemExit(f"--groups is not JSON ({error})")
    if not isinstance(raw, list) or not all(isinstance(g, dict) and set(g) <= {"students", "budgets"} for g in raw):
        raise SystemExit('--groups must be a list of {"students": [ids], "budgets": {name: value}}')
    groups = []
    for g in raw:
        students, budgets = g.get("students"), g.get("budgets") or {}
        if not (isinstance(students, list) and students and all(isinstance(x, str) for x in students)):
            raise SystemExit("--groups: each group needs a non-empty list of student ids")
        bad = sorted(set(budgets) - set(BUDGET_KEYS))
        if bad or not all(isinstance(v, str) and v.isdigit() for v in budgets.values()):
            raise SystemExit(
                f"--groups: budgets may only set {', '.join(BUDGET_KEYS)} to whole numbers (got {budgets})"
            )
        groups.append((students, dict(budgets)))
    return groups


def grade(
    lab: str,
    students: Optional[List[str]] = None,
    workers: Optional[int] = None,
    quiet: bool = False,
    groups: Optional[List[Tuple[List[str], Dict[str, str]]]] = None,
    one_upload: bool = False,
) -> dict:
    """Grade ``students`` (default: all submitted) of ``lab``; return the summary written to reports/.

    ``groups`` (instead of ``students``): lists of students graded one list after the other, each with its
    own budget overrides; the next list starts when the last student of the one before is done (so the
    class simulation grades its harm attacks beside their bystanders only), in one process and one export.

    ``one_upload``: one student graded for a platform (``autograder.platforms``), which shows its own
    results: in this process (no worker to start), without feedback HTML, grades.csv or the insight report;
    the gradebook, events, log and summary are the same."""
    from autograder.box import sandbox
    from autograder.course.layout import LABS, ROOT

    from autograder.box import limits, place_walk

    say = (lambda *a: None) if quiet else print
    work = ROOT / "autograder" / "work"
    notebook = LABS[lab]
    problem = gradebook_file.check(work / "gradebook.db", lab)
    if problem:
        raise SystemExit(f"error: {problem}")
    if os.environ.get("PAGED_KV_ISOLATION", "auto") == "auto":
        sandbox.ensure_bubblewrap(say)
    level, warning = (
        sandbox.probe()
        if os.environ.get("PAGED_KV_ISOLATION", "auto") == "auto"
        else (os.environ["PAGED_KV_ISOLATION"], "isolation chosen by PAGED_KV_ISOLATION")
    )
    say(f"grading kernels: isolation '{level}'" + (f"\nWARNING: {warning}" if warning else ""))
    place_walk.start(level)  # below bubblewrap: where a box may write, found while the gradebook is built
    found, warnings = limits.probe()
    say(f"grading kernels: cgroups {found['cgroups']}, scratch {found['scratch']}")
    for line in warnings:
        say(f"WARNING: {line}")
    limits.sweep_stale_cgroups()
    submitted = work / "submitted"
    if groups:
        students = [s for group, _ in groups for s in group]
    if students is None:
        students = (
            sorted(p.name for p in submitted.iterdir() if (p / lab / notebook).exists()) if submitted.exists() else []
        )
    if not students:
        raise SystemExit(f"no submissions for {lab} in {submitted} (run `make collect LAB={lab} FROM=...`)")
    reports = work / "reports" / lab
    reports.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = before.ru_utime + before.ru_stime
    with gradebook_file.errors(work / "gradebook.db", lab):
        ensure_assignment(lab, ROOT, work)
        add_students(students, read_roster(reports), work / "gradebook.db")
    workers = max(1, min(workers or os.cpu_count() or 1, len(students)))
    say(f"{lab}: grading {len(students)} students with {workers} worker(s)")
    results: Dict[str, dict] = {}
    pools: Dict[tuple, ProcessPoolExecutor] = {}
    grave = undertaker.start()  # if this process dies, its workers, kernels and cgroups go with it
    told: set = set()

    def keep(outcome: dict) -> None:
        results[outcome["student"]] = outcome
        log = reports / f"error-{outcome['student']}.log"
        if not outcome["success"]:
            log.write_text(outcome["log"], encoding="utf-8")
            say(f"  ERROR {outcome['student']}: see {log}")
        elif log.exists():  # graded now: the failure of an earlier run is over
            log.unlink()

    try:
        if one_upload:
            if len(students) != 1 or groups:
                raise ValueError("one_upload grades exactly one student, without groups")
            global _API
            _API = _API or _load_api()
            keep(_autograde(lab, students[0], feedback=False))
        for group, budgets in [] if one_upload else groups or [(students, {})]:
            key = tuple(sorted(budgets.items()))
            if key not in pools:  # a pool per set of budgets, reused by later groups with the same
                pools[key] = ProcessPoolExecutor(
                    max_workers=workers,
                    mp_context=get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(budgets, os.getpid()),
                )
            futures = [pools[key].submit(_autograde, lab, student) for student in group]
            for pid in set(getattr(pools[key], "_processes", None) or ()) - told:
                undertaker.tell(grave, f"worker {pid}")
                told.add(pid)
            for future in as_completed(futures):
                keep(future.result())
    finally:
        for pool in pools.values():
            pool.shutdown()
        undertaker.finish(grave)
    graded_seconds = time.monotonic() - started
    exported = False
    if not one_upload:
        from autograder.grade.lms_gradebook import write_grades_csv

        try:
            write_grades_csv(work, work / "reports" / "grades.csv")
            exported = True
        except (ValueError, OSError, SystemExit) as error:
            say(f"WARNING: grades.csv could not be written: {error}")
    summary = summarize(lab, students, results, work, reports)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary.update(
        seconds=round(time.monotonic() - started, 1),
        autograde_seconds=round(graded_seconds, 1),
        cpu_seconds=round(usage.ru_utime + usage.ru_stime - cpu_before, 1),
        workers=workers,
        isolation=level,
        work=str(work),
        exported=exported,
    )
    (reports / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    say(table(summary))
    if one_upload:
        return summary
    try:  # what the class got wrong: built from what grading wrote; a report that fails never fails grading
        from autograder.feedback import insight
        from autograder.course.layout import SOURCE_DIR

        say(f"insight: {insight.write(lab, work, SOURCE_DIR / lab / notebook).resolve()}")
    except Exception as error:  # noqa: BLE001
        say(f"WARNING: the insight report could not be written ({type(error).__name__}: {error})")
    return summary


def summarize(lab: str, students: List[str], results: Dict[str, dict], work: Path, reports: Path) -> dict:
    """The summary of grading ``students`` of ``lab`` (``reports/<lab>/summary.json``): one row per student from
    their result (``autograder.verdict.lab_results``: the gradebook, the grading record, collection's record), with
    the seconds grading them took (``results``); and ``log.csv`` rewritten (repairs and grading events, per
    student; the lines of students not graded in this run kept)."""
    from autograder.course.layout import LABS, SOURCE_DIR
    from autograder.verdict import lab_results
    from autograder.verdict.result import Student, build

    with gradebook_file.errors(work / "gradebook.db", lab):
        found = lab_results.read(work, lab, SOURCE_DIR / lab / LABS[lab])
    rows, log_rows = [], []
    for student in students:
        result = found.get(student) or build(lab, Student(student))  # nothing of it anywhere: not graded
        for kind, detail in result.repairs:
            log_rows.append([student, "repair", kind, detail])
        for event in result.events:
            log_rows.append([student, "run", event.kind.value, f"{event.cell}: {event.detail}"])
        rows.append(lab_results.summary_row(result, results.get(student, {}).get("seconds")))
    log = reports / "log.csv"
    if log.exists():  # keep the lines of students not graded in this run
        with open(log, newline="", encoding="utf-8") as handle:
            kept = [row for row in csv.reader(handle)][1:]
        log_rows = [row for row in kept if row and row[0] not in set(students)] + log_rows
    with open(log, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "stage", "kind", "detail"])
        writer.writerows(log_rows)
    return {"lab": lab, "students": rows}


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal (a CJK character takes two)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns (cut with ``…``), padded to them."""
    if _width(text) > width:
        while text and _width(text) > width - 1:
            text = text[:-1]
        text += "…"
    return text + " " * (width - _width(text))


def table(summary: dict) -> str:
    """The terminal's table of a grading: each student's id, name as written, late flag (``late`` where the
    download says so), score (``refused``: the isolation check graded nothing; ``failed``: grading failed), seconds
    and what grading noted; then where the reports are, and what to do about students not graded."""
    rows = summary["students"]
    name_width = min(24, max([4] + [_width(r.get("name") or "") for r in rows]))
    lines = [f"{'student':>18}  {_cut('name', name_width)}  {'late':<4}  {'score':>7}  {'s':>5}  notes"]
    for row in rows:
        score = row["score_text"]  # the points, or refused / failed: never a 0 for a student not graded
        late = "late" if row.get("late") == "yes" else ""
        notes = ", ".join(row.get("repairs", []) + row.get("events", []))
        lines.append(
            f"{row['student']:>18}  {_cut(row.get('name') or '', name_width)}  {late:<4}  {score:>7}  "
            f"{row.get('seconds', 0.0):5.1f}  {notes}"
        )
    count = len(rows)
    reports = Path(summary["work"]).resolve() / "reports"  # absolute: make hub-grade's course folder is not its cwd
    lines.append(
        f"{count} students in {summary['seconds']} s ({summary['seconds'] / max(count, 1):.1f} s per "
        f"student, {summary['workers']} workers, {summary['cpu_seconds']} CPU s in all); "
        + (f"grades: {reports / 'grades.csv'}, " if summary.get("exported", True) else "")
        + f"log: {reports / summary['lab'] / 'log.csv'}"
    )
    refused = [r for r in rows if r.get("status") == "refused"]
    failed = [r for r in rows if r.get("status") == "failed"]
    if refused:
        lines.append(
            f"REFUSED: {len(refused)} of {count} students were not graded: the grading box could not be trusted on "
            f"this machine ({refused[0].get('why') or 'see the WARNING above'}). They have no score (grades.csv "
            "says refused; make gradebook leaves them out). Fix the isolation (python -m autograder.box.sandbox "
            "--probe says what is wrong; docs/instructors.md, 'What grading needs') and run make grade again."
        )
    if failed:
        lines.append(
            f"FAILED: grading failed for {len(failed)} student(s): {', '.join(r['student'] for r in failed[:10])} "
            f"(see {reports / summary['lab']}/error-<student>.log); grade them again before uploading grades."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    from autograder.course.layout import LABS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lab", choices=sorted(LABS))
    parser.add_argument("--workers", type=int, default=None, help="parallel graders (default: one per core)")
    parser.add_argument("--student", action="append", help="grade only this student (repeatable)")
    parser.add_argument(
        "--groups",
        help='JSON [{"students": [ids], "budgets": {"PAGED_KV_CELL_TIMEOUT": "5"}}]: '
        "lists graded one after the other, each with its own budgets",
    )
    args = parser.parse_args(argv)
    if args.groups and args.student:
        parser.error("give --student or --groups, not both")
    summary = grade(args.lab, args.student, args.workers, groups=parse_groups(args.groups) if args.groups else None)
    return 0 if all(row["ok"] for row in summary["students"]) else 1  # refused or failed: not a grade


if __name__ == "__main__":
    sys.exit(main())
