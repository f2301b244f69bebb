"""Every student's ``GradingResult`` of one lab, read from a work folder (``autograder/work``) as grading and
collection left it: ``read(work, lab, source)``.

- the gradebook (``gradebook.db``, nbgrader's): each submission's points per graded cell, late penalty and time,
  and the lab's maximum;
- the grading records (``events/<lab>/<student>.json``, ``autograder.verdict.events``): verdicts, events, phases;
  a file that is not a record is no student's and is skipped (``skipped`` says which);
- collection's records (``reports/<lab>/collected.json``): the name as written, the LMS, its id, the late flag,
  the repairs;
- the logs of gradings that failed (``reports/<lab>/error-<student>.log``, which ``make grade`` writes, and removes
  when the student is graded again);
- the lab's source notebook, when given, for its graded cells in order (sections, points, hidden or not).

A student is in the result when any of these names them: a collected student not graded yet is ``not-graded``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from autograder.verdict.events import read_record
from autograder.verdict.result import GradingResult, Student, build


@dataclass
class Gradebook:
    """What the gradebook holds of one lab: its maximum (None when the gradebook does not know the lab) and, per
    student with a submission, ``(scores by grade id, late penalty, time)``."""

    max_score: Optional[float] = None
    submissions: Dict[str, Tuple[Dict[str, float], float, str]] = field(default_factory=dict)


def gradebook(work: Path, lab: str) -> Gradebook:
    """The lab's part of ``work/gradebook.db`` (empty when there is no gradebook or it does not know the lab)."""
    from nbgrader.api import Gradebook as NbgraderGradebook
    from nbgrader.api import MissingEntry

    database = Path(work) / "gradebook.db"
    found = Gradebook()
    if not database.exists():
        return found
    with NbgraderGradebook(f"sqlite:///{database}") as gb:
        try:
            assignment = gb.find_assignment(lab)
        except MissingEntry:
            return found
        found.max_score = float(assignment.max_score or 0.0)
        for submission in assignment.submissions:
            scores = {g.name: float(g.score or 0.0) for nb in submission.notebooks for g in nb.grades}
            stamp = "" if submission.timestamp is None else str(submission.timestamp)
            found.submissions[submission.student.id] = (scores, float(submission.late_submission_penalty or 0.0), stamp)
    return found


def collected(work: Path, lab: str) -> Dict[str, dict]:
    """``{student id: record}`` of ``reports/<lab>/collected.json`` (``{}`` when the lab was never collected);
    ValueError when the file is not collect's records."""
    path = Path(work) / "reports" / lab / "collected.json"
    if not path.exists():
        return {}
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is not JSON ({error}): run make collect LAB={lab} FROM=... again") from None
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("student"), str) for r in records
    ):
        raise ValueError(f"{path} does not hold collect's records: run make collect LAB={lab} FROM=... again")
    return {r["student"]: r for r in records}


def records(work: Path, lab: str) -> Tuple[Dict[str, dict], List[str]]:
    """``({student: grading record}, [files that are not records])`` of ``events/<lab>/``."""
    folder = Path(work) / "events" / lab
    found, skipped = {}, []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = read_record(path)
        except (OSError, ValueError):
            skipped.append(path.name)
            continue
        found[str(record.get("student") or path.stem)] = record
    return found, skipped


def failed_logs(work: Path, lab: str) -> Dict[str, str]:
    """``{student: the log of their failed grading}`` (``reports/<lab>/error-<student>.log``)."""
    folder = Path(work) / "reports" / lab
    logs = sorted(folder.glob("error-*.log")) if folder.is_dir() else []
    return {p.name[len("error-") : -len(".log")]: str(p) for p in logs}


def read(
    work: Path, lab: str, source: Optional[Path] = None, failed: Optional[Mapping[str, str]] = None
) -> Dict[str, GradingResult]:
    """``{student id: GradingResult}`` of ``lab`` in the work folder ``work``, sorted by id (the module doc);
    ``source``: the lab's source notebook (its graded cells in order); ``failed``: ``{student: why}`` of gradings
    that failed (default: the error logs)."""
    from autograder.course.notebook import lab_cells

    if not isinstance(lab, str) or not lab:
        raise ValueError(f"read takes the work folder and a lab, got {work!r}, {lab!r}")
    work = Path(work)
    cells = lab_cells(source) if source is not None and Path(source).exists() else []
    book = gradebook(work, lab)
    graded, _ = records(work, lab)
    people = collected(work, lab)
    failed = failed_logs(work, lab) if failed is None else dict(failed)
    students = sorted(set(book.submissions) | set(graded) | set(people) | set(failed))
    out = {}
    for sid in students:
        scores, penalty, stamp = book.submissions.get(sid, (None, 0.0, ""))
        record = people.get(sid) or {}
        out[sid] = build(
            lab,
            Student.from_collected(sid, record),
            cells,
            graded.get(sid),
            scores,
            record.get("repairs") or [],
            penalty,
            book.max_score,
            stamp,
            failed.get(sid, "") if (sid in graded or sid in book.submissions or sid in failed) else "",
        )
    return out


def summary_row(result: GradingResult, seconds: Optional[float] = None) -> Dict[str, Any]:
    """A result as ``reports/<lab>/summary.json``'s row (and what ``make grade``'s table shows)."""
    return {
        "student": result.student.id,
        "name": result.student.shown if result.student.shown != result.student.id else "",
        "late": result.student.late_word,
        "status": result.status.value,
        "score": result.score,
        "score_text": result.score_text(),
        "cells": {c.grade_id: c.score for c in result.cells if c.score is not None},
        "seconds": round(float(seconds if seconds is not None else result.seconds or 0.0), 2),
        "ok": result.status.value == "graded",
        "repairs": sorted({k for k, _ in result.repairs} - {"added-cells"}),
        "events": sorted({str(k) for k in result.kinds}),
        "why": result.why,
    }
