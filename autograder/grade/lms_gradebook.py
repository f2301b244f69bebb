"""Grades out of the gradebook: ``reports/grades.csv`` with names and late flags, and the files an LMS imports.

``write_grades_csv(work, target)`` writes ``grades.csv`` (``make grade`` calls it, in place of ``nbgrader
export``): one row per lab and student of the gradebook, nbgrader's export's columns and values (a student
with no submission of a lab scores 0), then ``status`` (``graded``; ``refused`` when the isolation check refused
to grade, ``failed`` when grading failed: those have no score, the score columns stay empty, never 0), then
what the lab's collection read from the LMS's download
(``reports/<lab>/collected.json``; ``autograder.collect.entry_names``): ``full_name`` (Moodle's full name;
empty where the download carries none: Canvas writes only a slug of the name, which is ``download_name``),
``download_name``, ``lms``, ``lms_id`` (Canvas's user id, Moodle's participant id) and ``late`` ("yes" or
"no" where the download says, as Canvas's does; empty where it does not). ``first_name``, ``last_name`` and
``email`` are the gradebook's (``nbgrader db student import``); collection never writes them, since no
download gives a first and a last name. Unlike nbgrader's export, every field is quoted as CSV needs
(``Doe, Jane`` stays one field).

``python -m autograder.grade.lms_gradebook LAB --lms canvas|moodle`` (``make gradebook``) writes one
lab's grades in the file its LMS imports, ``reports/<LAB>/canvas-gradebook.csv`` or
``reports/<LAB>/moodle-grading-worksheet.csv``. Only students collected from that LMS's download are
written, by the id the download gave; every other student of the lab is left out with its reason
(``reports/<LAB>/<lms>-left-out.csv`` and a WARNING line): collected from elsewhere, an id several entries
gave (``id-collision``), no LMS id in the download (Canvas's anonymous grading), not graded yet, or its
grading failed or was refused (those have no grade yet: ``make gradebook`` writes the others, says who is
missing and exits non-zero). No id is ever made up. Every row is built from the students' results
(``autograder.verdict.lab_results``). ``--points N`` scales each score to an assignment out of N (the
LMS's maximum); without it the scores are the lab's points, and the LMS's assignment must be out of the
lab's maximum (the file says which).

Canvas's import, as ``lib/gradebook_importer.rb`` of instructure/canvas-lms reads it (and as Canvas's guide
"How do I import grades in the Gradebook?" describes the columns): a header whose first columns are
``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section`` (``update_column_count``: with both SIS
columns the fifth, ``Section``, ends the student columns), then one column per assignment named
``<title> (<assignment id>)`` (``Assignment.title_and_id``: ``/\\A(.*)\\s\\((\\d+)\\)\\z/``; a column without
an id whose title matches no assignment makes a new one). A student is found by ``ID`` (Canvas's user id,
the one in the download's file names) before the SIS ids and the name, so the SIS columns and ``Section``
stay empty (the download gives none of them). No ``Points Possible`` row: the importer sets each
assignment's points possible from it (``process_pp``). The assignment id is the number after
``/assignments/`` in the assignment's address; it is required (the download does not carry it).

Moodle's offline grading worksheet, as ``mod/assign`` of moodle/moodle writes and reads it
(``gradingtable.php`` for the download's columns, ``feedback/offline/importgradeslib.php`` and
``locallib.php`` for the upload; English strings of ``mod/assign/lang/en/assign.php``): ``Identifier``
(``Participant `` and the participant id, the number Moodle writes in the download's folder names:
``get_uniqueid_for_user``), ``Full name``, ``Email address``, ``Status``, ``Grade``, ``Maximum Grade``,
``Grade can be changed``, ``Last modified (submission)``, ``Last modified (grade)``. The upload needs
``Identifier``, ``Grade`` and ``Last modified (grade)`` (matched by these exact English headers) and skips a
row whose grade Moodle changed more than 60 s after its ``Last modified (grade)`` (unless "Allow updating
records that have been modified more recently in Moodle than in the spreadsheet" is ticked): that column
holds the time the worksheet is written (ISO 8601, UTC, which PHP's ``strtotime`` reads). The columns the
download gives no value for (``Email address``, ``Status``, ``Grade can be changed``, ``Last modified
(submission)``) stay empty; the upload reads none of them. There is no ``Feedback comments`` column: the
upload replaces each student's comments by that column's text whenever they differ, so an empty one would
erase comments already written in Moodle.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from autograder.grade import gradebook_file
from autograder.verdict import lab_results
from autograder.verdict.result import GradingResult, Status, Student

LMSES = ("canvas", "moodle")
NBGRADER_COLUMNS = [
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
]  # nbgrader export's, in order
LMS_COLUMNS = ["full_name", "download_name", "lms", "lms_id", "late"]
GRADES_COLUMNS = (
    NBGRADER_COLUMNS + ["status"] + LMS_COLUMNS
)  # status: graded, refused, failed ("" without a submission)
CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_COLUMNS = [
    "Identifier",
    "Full name",
    "Email address",
    "Status",
    "Grade",
    "Maximum Grade",
    "Grade can be changed",
    "Last modified (submission)",
    "Last modified (grade)",
]
MOODLE_PARTICIPANT = "Participant "  # mod/assign's 'hiddenuser' string: the Identifier is it and the id
FILES = {"canvas": "canvas-gradebook.csv", "moodle": "moodle-grading-worksheet.csv"}


def _open_gradebook(work: Path, lab: str = ""):
    """nbgrader's Gradebook of ``work/gradebook.db``, checked first (``gradebook_file.check``)."""
    from nbgrader.api import Gradebook

    db = work / "gradebook.db"
    if not db.exists():
        raise ValueError(f"there is no gradebook at {db}: run make grade LAB={lab or '<lab>'} first")
    problem = gradebook_file.check(db, lab, wait=5)
    if problem:
        raise ValueError(problem)
    return Gradebook(f"sqlite:///{db}")


def _text(value) -> str:
    return "" if value is None else str(value)


def _grade_columns(result: Optional[GradingResult]) -> Dict[str, str]:
    """grades.csv's score columns and ``status`` for ``result`` (None: no submission, 0 as nbgrader's export
    writes it); a result that is no grade (refused, failed) has no score at all: the columns stay empty."""
    if result is None or result.status is Status.NOT_GRADED:
        return {"timestamp": "", "raw_score": "0.0", "late_submission_penalty": "0.0", "score": "0.0", "status": ""}
    graded = result.status is Status.GRADED and result.score is not None
    return {
        "timestamp": result.timestamp,
        "raw_score": _text(result.raw_score) if graded else "",
        "late_submission_penalty": _text(result.penalty) if graded else "",
        "score": _text(result.score) if graded else "",
        "status": result.status.value,
    }


def write_grades_csv(work: Path, target: Path) -> int:
    """Write ``target`` (grades.csv) from the gradebook of the work folder ``work`` and each lab's results
    (``autograder.verdict.lab_results``: the gradebook, the grading records, collection's records; the module
    doc); return how many rows it holds. A student whose grading was refused or failed has ``status`` refused or
    failed and no score."""
    if not isinstance(work, Path) or not isinstance(target, Path):
        raise ValueError(
            f"write_grades_csv takes the work folder and the file to write as Paths, got {work!r}, {target!r}"
        )
    rows: List[List[str]] = []
    with gradebook_file.errors(work / "gradebook.db"), _open_gradebook(work) as gb:
        assignments = [(a.name, _text(a.duedate), _text(a.max_score)) for a in gb.assignments]
        students = [(s.id, _text(s.last_name), _text(s.first_name), _text(s.email)) for s in gb.students]
    for name, duedate, max_score in assignments:
        with gradebook_file.errors(work / "gradebook.db", name):
            results = lab_results.read(work, name)
        for sid, last, first, email in students:
            result = results.get(sid)
            student = result.student if result is not None else Student(sid)
            row = {
                "assignment": name,
                "duedate": duedate,
                "student_id": sid,
                "last_name": last,
                "first_name": first,
                "email": email,
                "max_score": max_score,
                **_grade_columns(result),
                "full_name": student.full_name,
                "download_name": student.name,
                "lms": student.lms,
                "lms_id": student.lms_id,
                "late": student.late_word,
            }
            rows.append([row[column] for column in GRADES_COLUMNS])
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with open(partial, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(GRADES_COLUMNS)
        writer.writerows(rows)
    partial.replace(target)
    return len(rows)


def _failed_in_summary(work: Path, lab: str) -> Dict[str, str]:
    """``{student: why}`` of the rows of ``reports/<lab>/summary.json`` (the last make grade) that are not a grade."""
    summary = work / "reports" / lab / "summary.json"
    if not summary.exists():
        return {}
    try:
        return {
            row["student"]: str(summary)
            for row in json.loads(summary.read_text(encoding="utf-8")).get("students", [])
            if isinstance(row, dict) and not row.get("ok", True)
        }
    except (ValueError, AttributeError, KeyError, TypeError):
        raise ValueError(f"{summary} is not make grade's summary: run make grade LAB={lab} again") from None


def graded_students(work: Path, lab: str) -> List[GradingResult]:
    """The result of every student of ``lab`` that was collected or has a submission in the gradebook, by id
    (``autograder.verdict.lab_results``); a grading that failed in the last make grade (its summary) or left an
    error log is ``failed``."""
    if not isinstance(work, Path) or not isinstance(lab, str) or not lab:
        raise ValueError(f"graded_students takes the work folder (a Path) and a lab, got {work!r}, {lab!r}")
    from nbgrader.api import MissingEntry

    lab_results.collected(work, lab)  # a broken collected.json is said before anything else
    failed = {**_failed_in_summary(work, lab), **lab_results.failed_logs(work, lab)}
    with gradebook_file.errors(work / "gradebook.db", lab), _open_gradebook(work, lab) as gb:
        try:
            gb.find_assignment(lab)
        except MissingEntry:
            raise ValueError(f"the gradebook has no {lab}: run make grade LAB={lab} first") from None
    with gradebook_file.errors(work / "gradebook.db", lab):
        return list(lab_results.read(work, lab, failed=failed).values())


def _collided(result: GradingResult) -> bool:
    return any(kind == "id-collision" for kind, _ in result.repairs)


#: Why a student is left out, for the students whose left-out makes ``make gradebook`` exit non-zero: they
#: have no grade yet (refused, failed), and the file would otherwise look complete.
NOT_A_GRADE = ("refused", "failed")


def _why_left_out(result: GradingResult, lms: str, lab: str, collected: bool) -> Tuple[str, str]:
    """``(reason kind, why)`` ``result``'s student cannot go into ``lms``'s file, or ``("", "")`` when it can."""
    label = lms.capitalize()
    student = result.student
    if not collected:
        return "lms", (
            f"not collected with make collect (not in reports/{lab}/collected.json), so {label}'s id for "
            "the student is not known"
        )
    if _collided(result):
        return "lms", "several entries of the download gave this id (id-collision), so whose it is is not known"
    if student.lms != lms:
        source = f"{student.lms.capitalize()}'s download" if student.lms else "a folder or zip named after the student"
        return "lms", f"collected from {source}, not {label}'s: {label}'s id for the student is not known"
    if not student.lms_id:
        why = " (Canvas's download of an anonymously graded assignment names no user)" if lms == "canvas" else ""
        return "lms", f"the download gave no {label} id for the student{why}"
    if result.status is Status.REFUSED:
        return "refused", (
            f"its grading was refused: the grading box could not be trusted on the grading machine ({result.why}), "
            f"so nothing was graded and it has no score: fix the isolation and run make grade LAB={lab} again"
        )
    if result.status is Status.FAILED:
        return "failed", (
            f"its grading failed (reports/{lab}/error-{student.id}.log): grade it again (python -m "
            f"autograder.grade.grade {lab} --student {student.id}) before uploading"
        )
    if result.score is None:
        return "lms", f"not graded yet: run make grade LAB={lab}"
    return "", ""


def _points(score: float, max_score: float, points: Optional[float]) -> str:
    """``score`` (out of ``max_score``) out of ``points`` when given, rounded to 2 decimals as Canvas shows it."""
    value = score if points is None else (score * points / max_score if max_score > 0 else 0.0)
    text = f"{round(value, 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _check_points(points: Optional[float]) -> None:
    if points is not None and (
        isinstance(points, bool) or not isinstance(points, (int, float)) or not math.isfinite(points) or points <= 0
    ):
        raise ValueError(f"points is the LMS assignment's maximum, a number above 0, got {points!r}")


def canvas_gradebook(
    work: Path, lab: str, assignment_id: str, title: str = "", points: Optional[float] = None
) -> Tuple[List[List[str]], List[Tuple[str, str]]]:
    """The rows (header first) of Canvas's gradebook CSV for ``lab``, the assignment Canvas numbers
    ``assignment_id`` (its column ``<title> (<id>)``, the title the lab's unless given), scores out of
    ``points`` when given; and ``(student id, why)`` for each student left out (the module doc)."""
    if not isinstance(assignment_id, str) or not re.fullmatch(r"[1-9][0-9]*", assignment_id):
        raise ValueError(
            "Canvas needs the assignment's id, the number after /assignments/ in the assignment's "
            f"address (https://<canvas>/courses/<course>/assignments/<id>), got {assignment_id!r}"
        )
    if not isinstance(title, str) or "\n" in title or "\r" in title:
        raise ValueError(f"the Canvas column's title is one line of text, got {title!r}")
    _check_points(points)
    rows = [CANVAS_STUDENT_COLUMNS + [f"{title.strip() or lab} ({assignment_id})"]]
    results, left_out = _going_in(work, lab, "canvas")
    for result in results:
        student = result.student
        rows.append([student.name, student.lms_id, "", "", "", _points(result.score, result.max_score, points)])
    return rows, left_out


def _going_in(work: Path, lab: str, lms: str) -> Tuple[List[GradingResult], List[Tuple[str, str]]]:
    """The results that can go into ``lms``'s file, and ``(student id, why)`` for each one that cannot."""
    collected = lab_results.collected(work, lab)
    going, left_out = [], []
    for result in graded_students(work, lab):
        _, why = _why_left_out(result, lms, lab, result.student.id in collected)
        if why:
            left_out.append((result.student.id, why))
        else:
            going.append(result)
    return going, left_out


def not_a_grade(work: Path, lab: str) -> Dict[str, str]:
    """``{student id: status}`` of the students of ``lab`` whose grading was refused or failed: they have no
    score, and a file that leaves them out is incomplete (``make gradebook`` says so and exits non-zero)."""
    return {r.student.id: r.status.value for r in graded_students(work, lab) if r.status.value in NOT_A_GRADE}


def moodle_worksheet(
    work: Path, lab: str, points: Optional[float] = None, now: Optional[datetime] = None
) -> Tuple[List[List[str]], List[Tuple[str, str]]]:
    """The rows (header first) of Moodle's grading worksheet for ``lab``, scores out of ``points`` when given
    (else the lab's maximum), ``Last modified (grade)`` ``now`` (an aware datetime; the current time by
    default); and ``(student id, why)`` for each student left out (the module doc)."""
    _check_points(points)
    if now is None:
        now = datetime.now(timezone.utc)
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise ValueError(f"now is a datetime with its time zone, got {now!r}")
    stamp = now.astimezone(timezone.utc).replace(microsecond=0).isoformat()
    rows = [list(MOODLE_COLUMNS)]
    results, left_out = _going_in(work, lab, "moodle")
    for result in results:
        maximum = _points(result.max_score, result.max_score, points)
        rows.append(
            [
                MOODLE_PARTICIPANT + result.student.lms_id,
                result.student.full_name,
                "",
                "",
                _points(result.score, result.max_score, points),
                maximum,
                "",
                "",
                stamp,
            ]
        )
    return rows, left_out


def write(
    work: Path,
    lab: str,
    lms: str,
    assignment_id: Optional[str] = None,
    title: str = "",
    points: Optional[float] = None,
    now: Optional[datetime] = None,
) -> Tuple[Path, List[Tuple[str, str]]]:
    """Write ``reports/<lab>/`` ``canvas-gradebook.csv`` or ``moodle-grading-worksheet.csv`` and
    ``<lms>-left-out.csv``; return the file and who was left out. ValueError when no student can go in it
    (nothing is written then) or an argument is wrong."""
    if lms not in LMSES:
        raise ValueError(f"lms is one of {', '.join(LMSES)}, got {lms!r}")
    if lms == "canvas":
        if assignment_id is None:
            raise ValueError(
                "Canvas needs the assignment's id, which its download does not carry: give "
                "ASSIGNMENT_ID=<the number after /assignments/ in the assignment's address>"
            )
        rows, left_out = canvas_gradebook(work, lab, assignment_id, title, points)
    else:
        if assignment_id is not None or title:
            raise ValueError("Moodle's worksheet is the assignment's own: it takes no assignment id or title")
        rows, left_out = moodle_worksheet(work, lab, points, now)
    folder = work / "reports" / lab
    if len(rows) == 1:
        reasons = "; ".join(f"{sid}: {why}" for sid, why in left_out[:5]) or "no student was collected"
        raise ValueError(f"no student of {lab} can go into {lms.capitalize()}'s file ({reasons})")
    target = folder / FILES[lms]
    with open(target, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    with open(folder / f"{lms}-left-out.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "reason"])
        writer.writerows(left_out)
    return target, left_out


def main(argv=None) -> int:
    from autograder.course.layout import LABS, ROOT

    parser = argparse.ArgumentParser(description="Write one lab's grades in the file Canvas or Moodle imports.")
    parser.add_argument("lab", choices=sorted(LABS))
    parser.add_argument("--lms", required=True, choices=LMSES)
    parser.add_argument(
        "--assignment-id", help="Canvas: the assignment's id (the number after /assignments/ in its address)"
    )
    parser.add_argument("--title", default="", help="Canvas: the column's title (default: the lab's name)")
    parser.add_argument(
        "--points",
        type=float,
        help="the LMS assignment's maximum: scores are scaled to it (default: the lab's own points)",
    )
    args = parser.parse_args(argv)
    work = Path(ROOT) / "autograder" / "work"
    try:
        target, left_out = write(work, args.lab, args.lms, args.assignment_id, args.title, args.points)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for sid, why in left_out:
        print(f"WARNING: left out of {target.name}: {sid}: {why}", file=sys.stderr)
    with open(target, newline="", encoding="utf-8") as handle:
        count = sum(1 for _ in csv.reader(handle)) - 1
    print(
        f"{args.lab}: {count} student(s) in {target.resolve()}, {len(left_out)} left out"
        + (f" ({target.with_name(args.lms + '-left-out.csv').resolve()})" if left_out else "")
    )
    if args.points is None:
        print(
            f"{args.lab}: scores are out of the lab's own points: the {args.lms.capitalize()} assignment must "
            "be out of the same maximum, or give POINTS=<its maximum>"
        )
    unfinished = not_a_grade(work, args.lab)
    missing = [sid for sid, _ in left_out if sid in unfinished]
    if missing:
        print(
            f"error: {len(missing)} student(s) left out of {target.name} have no grade yet (their grading was "
            f"{' or '.join(sorted(set(unfinished[s] for s in missing)))}: {', '.join(missing[:10])}): the file "
            f"holds the others only. Grade them (make grade LAB={args.lab}) and run make gradebook again before "
            "uploading, or upload this file knowing they are missing from it.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
