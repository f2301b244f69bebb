"""One student's grading of one lab, as every view shows it: ``GradingResult``.

A result is built (``build``) from what grading and collection left, never by running anything: the grading
record (``autograder.verdict.events``: each graded cell's verdict, the events, the phases and seconds), the
gradebook's points per cell and late penalty, what collection read of the student (``Student``: the name as
written, the LMS and its id, the late flag) and the lab's graded cells (``autograder.course.notebook.lab_cells``).
The terminal table and ``grades.csv`` (``make grade``), the LMS files (``make gradebook``), the platforms' results
(Gradescope, PrairieLearn) and the insight report all render this one value (``autograder.verdict.lab_results``
reads a lab's results from a work folder).

Its ``status`` says whether it is a grade at all:

- ``graded``: grading ran; ``score`` is the gradebook's (less any late penalty);
- ``refused``: the isolation check refused to grade this machine (``autograder.grade.lab_boxes.refuse``, the
  record's ``isolation`` event): nothing ran, so there is **no score**, never a 0: the terminal, grades.csv and
  the insight report say ``refused``, the LMS files leave the student out and the platforms report an autograder
  failure;
- ``failed``: grading itself failed (its log is in ``reports/<lab>/error-<student>.log``): no score either;
- ``not-graded``: collected, not graded yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping, Optional, Tuple

from autograder.verdict.events import EventKind, VerdictKind


class Status(str, Enum):
    """What a result is (see the module doc); prints as its value."""

    GRADED = "graded"
    REFUSED = "refused"
    FAILED = "failed"
    NOT_GRADED = "not-graded"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass(frozen=True)
class Student:
    """Who a result is of: the student ``id`` (collection's), the ``name`` as the download or the folder wrote it
    (Canvas's slug, Moodle's full name, an entry's own name: any script), Moodle's ``full_name``, the ``lms`` and
    its id for the student, and ``late`` (True/False where the download says, None where it does not)."""

    id: str
    name: str = ""
    full_name: str = ""
    lms: str = ""
    lms_id: str = ""
    late: Optional[bool] = None

    @property
    def shown(self) -> str:
        """The name to show a person: the full name, else the name as written, else the id."""
        return self.full_name or self.name or self.id

    @property
    def late_word(self) -> str:
        """ "yes", "no", or "" where the download does not say (as roster.csv and grades.csv write it)."""
        return "" if self.late is None else ("yes" if self.late else "no")

    @classmethod
    def from_collected(cls, student: str, record: Optional[Mapping[str, Any]]) -> "Student":
        """The student ``student`` as collection's record (``reports/<lab>/collected.json``) has them."""
        record = record or {}
        late = record.get("late")
        return cls(
            student,
            str(record.get("name") or ""),
            str(record.get("full_name") or ""),
            str(record.get("lms") or ""),
            str(record.get("lms_id") or ""),
            late if isinstance(late, bool) else None,
        )


@dataclass(frozen=True)
class Event:
    """One event of the record: the cell's label, its ``EventKind``, the detail, whether the cell is graded."""

    cell: str
    kind: EventKind
    detail: str = ""
    graded: bool = False

    @classmethod
    def from_record(cls, item: Mapping[str, Any]) -> "Event":
        return cls(
            str(item.get("cell", "")), EventKind(item["kind"]), str(item.get("detail", "")), bool(item.get("graded"))
        )


@dataclass(frozen=True)
class CellResult:
    """One graded cell: its id, points (its maximum), section, whether it holds hidden tests, the gradebook's
    ``score`` (None where the gradebook has none), and the verdict's kind, pass and message (None/"" where the
    record has no verdict for it)."""

    grade_id: str
    points: float
    section: str = ""
    hidden: bool = False
    score: Optional[float] = None
    kind: Optional[VerdictKind] = None
    passed: Optional[bool] = None
    message: str = ""

    @property
    def full(self) -> bool:
        """Full points in the gradebook."""
        return self.score is not None and self.points > 0 and self.score >= self.points - 1e-9


@dataclass(frozen=True)
class GradingResult:
    """One student's grading of one lab (the module doc). ``score`` is None unless the status is ``graded``."""

    lab: str
    student: Student
    status: Status
    cells: Tuple[CellResult, ...] = ()
    events: Tuple[Event, ...] = ()
    repairs: Tuple[Tuple[str, str], ...] = ()
    penalty: float = 0.0
    max_score: float = 0.0
    timestamp: str = ""
    seconds: Optional[float] = None
    phases: Mapping[str, float] = field(default_factory=dict)
    isolation: Optional[str] = None
    spare_kernels: int = 0
    why: str = ""  # refused: what the isolation check found; failed: where the log is
    recorded: bool = False  # a grading record was found (the gradebook alone does not say what grading noted)

    @property
    def refused(self) -> bool:
        return self.status is Status.REFUSED

    @property
    def raw_score(self) -> Optional[float]:
        """The gradebook's points over every cell (before the late penalty); None when it has none."""
        scores = [c.score for c in self.cells if c.score is not None]
        return round(sum(scores), 6) if scores else None

    @property
    def score(self) -> Optional[float]:
        """The grade (points less the late penalty, at least 0): None unless graded and in the gradebook."""
        raw = self.raw_score
        if self.status is not Status.GRADED or raw is None:
            return None
        return max(0.0, raw - self.penalty)

    @property
    def kinds(self) -> frozenset:
        """The kinds of event grading noted."""
        return frozenset(e.kind for e in self.events)

    def score_text(self, digits: int = 1) -> str:
        """The score as a person reads it: the points, ``refused``, ``failed`` or ``-`` (not graded)."""
        if self.status is Status.GRADED:
            return "-" if self.score is None else f"{self.score:.{digits}f}"
        return {Status.REFUSED: "refused", Status.FAILED: "failed"}.get(self.status, "-")


def _cells(
    cells: Iterable[Mapping[str, Any]], scores: Optional[Mapping[str, float]], verdicts: Mapping[str, Any]
) -> Tuple[CellResult, ...]:
    """The lab's cells in order, with the gradebook's scores and the record's verdicts; a cell the gradebook or
    the record knows and the lab's notebook does not comes after them (a lab whose notebook changed)."""
    out, known = [], set()
    for cell in cells:
        grade_id = str(cell["grade_id"])
        known.add(grade_id)
        out.append(
            _cell(
                grade_id,
                float(cell.get("points", 0.0)),
                str(cell.get("section", "")),
                bool(cell.get("hidden")),
                scores,
                verdicts,
            )
        )
    for grade_id in sorted((set(scores or {}) | set(verdicts)) - known):
        out.append(_cell(grade_id, 0.0, "", False, scores, verdicts))
    return tuple(out)


def _cell(grade_id, points, section, hidden, scores, verdicts) -> CellResult:
    verdict = verdicts.get(grade_id) or {}
    score = (scores or {}).get(grade_id)
    return CellResult(
        grade_id,
        points,
        section,
        hidden,
        None if score is None else float(score),
        VerdictKind(verdict["kind"]) if verdict.get("kind") else None,
        bool(verdict["passed"]) if "passed" in verdict else None,
        str(verdict.get("message", "")),
    )


def build(
    lab: str,
    student: Student,
    cells: Iterable[Mapping[str, Any]] = (),
    record: Optional[Mapping[str, Any]] = None,
    scores: Optional[Mapping[str, float]] = None,
    repairs: Iterable[Iterable[str]] = (),
    penalty: float = 0.0,
    max_score: Optional[float] = None,
    timestamp: str = "",
    failed: str = "",
) -> GradingResult:
    """``student``'s result of ``lab`` from the lab's graded cells (``lab_cells``' dicts), the grading ``record``
    (``read_record``'s, None when there is none), the gradebook's ``scores`` by grade id (None when the gradebook
    has no submission), collection's ``repairs``, the late ``penalty``, the lab's ``max_score`` (the cells' points
    by default), the submission's ``timestamp`` and ``failed`` (where the log of a failed grading is, "" when it
    did not fail)."""
    if not isinstance(lab, str) or not lab or not isinstance(student, Student):
        raise ValueError(f"build takes a lab and a Student, got {lab!r}, {type(student).__name__}")
    cells = list(cells)
    record = dict(record or {})
    events = tuple(Event.from_record(item) for item in record.get("events", []))
    isolation = [e for e in events if e.kind is EventKind.ISOLATION]
    if isolation:
        status, why = Status.REFUSED, isolation[0].detail
    elif failed:
        status, why = Status.FAILED, failed
    elif record or scores is not None:
        status, why = Status.GRADED, ""
    else:
        status, why = Status.NOT_GRADED, ""
    return GradingResult(
        lab=lab,
        student=student,
        status=status,
        cells=_cells(cells, scores, record.get("verdicts") or {}),
        events=events,
        repairs=tuple((str(k), str(d)) for k, d in repairs),
        penalty=float(penalty or 0.0),
        max_score=float(sum(float(c.get("points", 0.0)) for c in cells) if max_score is None else max_score),
        timestamp=str(timestamp or ""),
        seconds=None if record.get("seconds") is None else float(record["seconds"]),
        phases={str(k): float(v) for k, v in (record.get("phases") or {}).items()},
        isolation=record.get("isolation"),
        spare_kernels=int(record.get("spare_kernels") or 0),
        why=why,
        recorded=bool(record),
    )
