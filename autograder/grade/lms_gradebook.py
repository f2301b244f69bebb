"""Grades out of the gradebook: ``reports/grades.csv`` with names and late flags, and the files an LMS imports.

``write_grades_csv(work, target)`` writes ``grades.csv`` (``make grade`` calls it, in place of ``nbgrader
export``): one row per lab and student of the gradebook, nbgrader's export's columns and values (a student
with no submission of a lab scores 0) followed by what the lab's collection read from the LMS's download
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
grading failed. No id is ever made up. ``--points N`` scales each score to an assignment out of N (the
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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from autograder.grade import gradebook_file
from autograder.collect.collect import late_word

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
GRADES_COLUMNS = NBGRADER_COLUMNS + LMS_COLUMNS
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


@dataclass(frozen=True)
class Graded:
    """One collected student of a lab, as the LMS files need them: the collection's record (``collected.json``)
    and the gradebook's score (None when the student has no submission there), out of ``max_score``."""

    student: str
    lms: str
    lms_id: str
    name: str
    full_name: str
    late: Optional[bool]
    collided: bool
    score: Optional[float]
    max_score: float
    failed: bool


def _collected(work: Path, lab: str) -> Dict[str, dict]:
    """``{student id: record}`` of ``reports/<lab>/collected.json`` (``{}`` when the lab was never collected);
    ValueError when the file is not collect's records."""
    path = work / "reports" / lab / "collected.json"
    if not path.exists():
        return {}
    try:
        records = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path} is not JSON ({error}): run make collect LAB={lab} FROM=... again") from None
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("student"), str) for r in records
    ):
        raise ValueError(f"{path} does not hold collect's records: run make collect LAB={lab} FROM=... again")
    return {r["student"]: r for r in records}


def _lms_fields(record: Optional[dict]) -> Dict[str, str]:
    """The LMS columns of grades.csv for a collection ``record`` (all empty without one)."""
    record = record or {}
    late = record.get("late")
    return {
        "full_name": str(record.get("full_name") or ""),
        "download_name": str(record.get("name") or ""),
        "lms": str(record.get("lms") or ""),
        "lms_id": str(record.get("lms_id") or ""),
        "late": late_word(late if isinstance(late, bool) else None),
    }


def _text(value) -> str:
    return "" if value is None else str(value)


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


def write_grades_csv(work: Path, target: Path) -> int:
    """Write ``target`` (grades.csv) from the gradebook of the work folder ``work`` and each lab's
    collection records (the module doc); return how many rows it holds."""
    from nbgrader.api import MissingEntry

    if not isinstance(work, Path) or not isinstance(target, Path):
        raise ValueError(
            f"write_grades_csv takes the work folder and the file to write as Paths, got {work!r}, {target!r}"
        )
    rows: List[List[str]] = []
    with gradebook_file.errors(work / "gradebook.db"), _open_gradebook(work) as gb:
        for assignment in gb.assignments:
            collected = _collected(work, assignment.name)
            for student in gb.students:
                row = {
                    "assignment": assignment.name,
                    "duedate": _text(assignment.duedate),
                    "student_id": student.id,
                    "last_name": _text(student.last_name),
                    "first_name": _text(student.first_name),
                    "email": _text(student.email),
                    "max_score": _text(assignment.max_score),
                }
                try:
                    submission = gb.find_submission(assignment.name, student.id)
                except MissingEntry:  # nothing submitted: 0, as nbgrader's export writes it
                    row.update(timestamp="", raw_score=str(0.0), late_submission_penalty=str(0.0), score=str(0.0))
                else:
                    penalty = submission.late_submission_penalty or 0.0
                    row.update(
                        timestamp=_text(submission.timestamp),
                        raw_score=_text(submission.score),
                        late_submission_penalty=_text(submission.late_submission_penalty),
                        score=str(max(0.0, (submission.score or 0.0) - penalty)),
                    )
                row.update(_lms_fields(collected.get(student.id)))
                rows.append([row[column] for column in GRADES_COLUMNS])
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with open(partial, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(GRADES_COLUMNS)
        writer.writerows(rows)
    partial.replace(target)
    return len(rows)


def graded_students(work: Path, lab: str) -> List[Graded]:
    """Every student of ``lab`` that was collected or has a submission in the gradebook, by id, with what
    collection read of them and their score (the gradebook's, less any late penalty, as grades.csv has it)."""
    from nbgrader.api import MissingEntry

    if not isinstance(work, Path) or not isinstance(lab, str) or not lab:
        raise ValueError(f"graded_students takes the work folder (a Path) and a lab, got {work!r}, {lab!r}")
    collected = _collected(work, lab)
    summary = work / "reports" / lab / "summary.json"
    failed = set()
    if summary.exists():
        try:
            failed = {
                row["student"]
                for row in json.loads(summary.read_text()).get("students", [])
                if isinstance(row, dict) and not row.get("ok", True)
            }
        except (ValueError, AttributeError, KeyError, TypeError):
            raise ValueError(f"{summary} is not make grade's summary: run make grade LAB={lab} again") from None
    found: List[Graded] = []
    with gradebook_file.errors(work / "gradebook.db", lab), _open_gradebook(work, lab) as gb:
        try:
            assignment = gb.find_assignment(lab)
        except MissingEntry:
            raise ValueError(f"the gradebook has no {lab}: run make grade LAB={lab} first") from None
        submitted = {s.student.id: s for s in assignment.submissions}
        for sid in sorted(set(collected) | set(submitted)):
            record, submission = collected.get(sid, {}), submitted.get(sid)
            score = None
            if submission is not None and submission.score is not None:
                score = max(0.0, submission.score - (submission.late_submission_penalty or 0.0))
            late = record.get("late")
            found.append(
                Graded(
                    student=sid,
                    lms=str(record.get("lms") or ""),
                    lms_id=str(record.get("lms_id") or ""),
                    name=str(record.get("name") or ""),
                    full_name=str(record.get("full_name") or ""),
                    late=late if isinstance(late, bool) else None,
                    collided=any(kind == "id-collision" for kind, _ in record.get("repairs", [])),
                    score=score,
                    max_score=float(assignment.max_score or 0.0),
                    failed=sid in failed,
                )
            )
    return found


def _why_left_out(student: Graded, lms: str, lab: str, collected: bool) -> str:
    """Why ``student`` cannot go into ``lms``'s file, or "" when it can."""
    label = lms.capitalize()
    if not collected:
        return (
            f"not collected with make collect (not in reports/{lab}/collected.json), so {label}'s id for "
            "the student is not known"
        )
    if student.collided:
        return "several entries of the download gave this id (id-collision), so whose it is is not known"
    if student.lms != lms:
        source = f"{student.lms.capitalize()}'s download" if student.lms else "a folder or zip named after the student"
        return f"collected from {source}, not {label}'s: {label}'s id for the student is not known"
    if not student.lms_id:
        why = " (Canvas's download of an anonymously graded assignment names no user)" if lms == "canvas" else ""
        return f"the download gave no {label} id for the student{why}"
    if student.failed:
        return (
            f"its grading failed (reports/{lab}/error-{student.student}.log): grade it again (python -m "
            f"autograder.grade.grade {lab} --student {student.student}) before uploading"
        )
    if student.score is None:
        return f"not graded yet: run make grade LAB={lab}"
    return ""


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
    collected = _collected(work, lab)
    rows = [CANVAS_STUDENT_COLUMNS + [f"{title.strip() or lab} ({assignment_id})"]]
    left_out = []
    for student in graded_students(work, lab):
        why = _why_left_out(student, "canvas", lab, student.student in collected)
        if why:
            left_out.append((student.student, why))
            continue
        rows.append([student.name, student.lms_id, "", "", "", _points(student.score, student.max_score, points)])
    return rows, left_out


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
    collected = _collected(work, lab)
    rows, left_out = [list(MOODLE_COLUMNS)], []
    for student in graded_students(work, lab):
        why = _why_left_out(student, "moodle", lab, student.student in collected)
        if why:
            left_out.append((student.student, why))
            continue
        maximum = _points(student.max_score, student.max_score, points)
        rows.append(
            [
                MOODLE_PARTICIPANT + student.lms_id,
                student.full_name,
                "",
                "",
                _points(student.score, student.max_score, points),
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
    with open(target, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    with open(folder / f"{lms}-left-out.csv", "w", newline="") as handle:
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
    with open(target, newline="") as handle:
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
