"""What grading one notebook leaves for the instructor: its events and verdicts, one JSON file per student and lab.

``HardenedExecute`` writes the *record* (``write_record``) at ``events_path(dir, lab, student)``; the result of one
student's grading (``autograder.verdict.result``), which ``make grade``, the platforms' one upload, the insight
report and the proof harness render, is built from it (``read_record``). Both sides check it against
``RECORD_SCHEMA``, so a reader never guesses at a field. An event's and a verdict's kind is one of ``EventKind`` /
``VerdictKind`` (``str`` enums: the file holds their values, and a kind prints as its value); every event kind
belongs to one ``EventGroup`` (what the instructor's views list it under).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Dict

from autograder.verdict.student_text import N_, for_student


class _Kind(str, Enum):
    """A ``str`` enum that prints as its value (``f"{kind}"`` is ``"timeout"``, as the record holds it)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class EventGroup(_Kind):
    """Where the instructor's views (the terminal table, the insight report) list an event kind."""

    FINDING = "finding"  # provenance and similarity: the code's, whom to look at
    LIMIT = "limit"  # a limit of the box was hit: time, memory, output, the kernel, exit()
    GRADING = "grading"  # what grading itself did: refused to grade, removed hidden-test text


class EventKind(_Kind):
    """Something that happened while a cell ran or was judged (the *Grading notes* say it in ``text``)."""

    TIMEOUT = "timeout"
    NOT_RUN = "not-run"
    KERNEL_DIED = "kernel-died"
    MEMORY = "memory"
    OUTPUT_CUT = "output-cut"
    EXIT_CALLED = "exit-called"
    INTEGRITY = "integrity"
    SIMILAR = "similar-to-reference"
    REACHED_STUB = "reached-stub"
    ISOLATION = "isolation"
    SECRET_REMOVED = "secret-removed"
    NOT_TRITON = "not-triton"
    LAUNCH_NOT_BUILT = "launch-not-built"

    @property
    def text(self) -> str:
        return _TEXT[self]

    @property
    def group(self) -> EventGroup:
        return _GROUP[self]


_TEXT = {
    EventKind.TIMEOUT: N_("stopped by the time limit"),
    EventKind.NOT_RUN: N_("not run (the notebook's grading time was spent)"),
    EventKind.KERNEL_DIED: N_("the kernel died"),
    EventKind.MEMORY: N_("hit the memory limit"),
    EventKind.OUTPUT_CUT: N_("too much output, cut"),
    EventKind.EXIT_CALLED: N_("called sys.exit()"),
    EventKind.INTEGRITY: N_("no points: code that is not the student's own"),
    EventKind.SIMILAR: N_("nearly the reference's code (review)"),
    EventKind.REACHED_STUB: N_("called an implementation the grading box leaves out (it earns nothing)"),
    EventKind.ISOLATION: N_("not graded: the grading box could not be trusted on this machine"),
    EventKind.SECRET_REMOVED: N_("text of the hidden tests removed from an output"),
    EventKind.NOT_TRITON: N_(
        "a kernel that is not all Triton (the interpreter would run what the GPU build leaves out)"
    ),
    EventKind.LAUNCH_NOT_BUILT: N_("a graded launch of this kernel does not compile for the GPU, though another does"),
}

_GROUP = {
    EventKind.TIMEOUT: EventGroup.LIMIT,
    EventKind.NOT_RUN: EventGroup.LIMIT,
    EventKind.KERNEL_DIED: EventGroup.LIMIT,
    EventKind.MEMORY: EventGroup.LIMIT,
    EventKind.OUTPUT_CUT: EventGroup.LIMIT,
    EventKind.EXIT_CALLED: EventGroup.LIMIT,
    EventKind.INTEGRITY: EventGroup.FINDING,
    EventKind.SIMILAR: EventGroup.FINDING,
    EventKind.REACHED_STUB: EventGroup.FINDING,
    EventKind.NOT_TRITON: EventGroup.FINDING,
    EventKind.LAUNCH_NOT_BUILT: EventGroup.FINDING,
    EventKind.ISOLATION: EventGroup.GRADING,
    EventKind.SECRET_REMOVED: EventGroup.GRADING,
}


def kinds_of(group: EventGroup) -> tuple:
    """Every ``EventKind`` of ``group``, in declaration order."""
    return tuple(kind for kind in EventKind if kind.group is group)


#: Events the instructor reads but the student's *Grading notes* do not list one by one.
NOT_LISTED_FOR_STUDENTS = (EventKind.INTEGRITY, EventKind.SIMILAR, EventKind.ISOLATION)


class VerdictKind(_Kind):
    """How the trusted process decided a graded cell (``autograder.verdict.cells.Verdict.kind``)."""

    PASS = "pass"
    CHECK = "check"  # a check failed: the student's code answered wrongly
    TODO = "todo"  # the TODO is not written (reached a stub)
    ERROR = "error"  # the cell raised something else
    TIMEOUT = "timeout"
    KERNEL = "kernel"  # the kernel died
    CHANNEL = "channel"  # the kernel's answers could not be read
    EXIT = "exit"  # the cell called sys.exit()
    INTEGRITY = "integrity"  # provenance: code that is not the student's own


_EVENT = {
    "type": "object",
    "required": ["cell", "kind", "graded"],
    "properties": {
        "cell": {"type": "string"},
        "kind": {"enum": [k.value for k in EventKind]},
        "detail": {"type": "string"},
        "graded": {"type": "boolean"},
    },
}
_VERDICT = {
    "type": "object",
    "required": ["passed", "kind"],
    "properties": {
        "passed": {"type": "boolean"},
        "kind": {"enum": [k.value for k in VerdictKind]},
        "seconds": {"type": "number"},
        "requests": {"type": "integer"},
        "message": {"type": "string"},
    },
}
RECORD_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "required": ["student", "assignment", "isolation", "seconds", "events", "verdicts"],
    "properties": {
        "student": {"type": ["string", "null"]},
        "assignment": {"type": ["string", "null"]},
        "language": {"type": "string"},  # the notebook's (autograder.course.languages): what its student read
        "isolation": {"type": ["string", "null"]},
        "seconds": {"type": "number"},
        "events": {"type": "array", "items": _EVENT},
        "spare_kernels": {"type": "integer"},
        "phases": {"type": "object", "additionalProperties": {"type": "number"}},
        "verdicts": {"type": "object", "additionalProperties": _VERDICT},
    },
}


def event(cell: str, kind: EventKind, detail: str = "", graded: bool = False) -> Dict[str, Any]:
    """One event as the record holds it."""
    if not isinstance(kind, EventKind):
        raise TypeError(f"an event's kind must be an EventKind, got {kind!r}: add it to EventKind first")
    return {"cell": str(cell), "kind": kind.value, "detail": str(detail), "graded": bool(graded)}


def describe(item: Dict[str, Any], detail: bool = True, language: str = "en") -> str:
    """An event as one line of the *Grading notes*: what happened, and its detail where it helps, in ``language``
    (a detail the catalog lacks as the grader wrote it)."""
    kind = item["kind"]
    known = kind in EventKind._value2member_map_
    text = for_student(EventKind(kind).text, language) if known else str(kind)
    quiet = (EventKind.NOT_RUN.value, EventKind.INTEGRITY.value)
    shown = detail and item.get("detail") and kind not in quiet
    return text + (f" ({for_student(str(item['detail']), language)})" if shown else "")


def events_path(events_dir, assignment: str, student: str) -> Path:
    """Where the record of ``student``'s ``assignment`` lives below ``events_dir``."""
    return Path(events_dir) / assignment / f"{student}.json"


def check_record(record: Any) -> Dict[str, Any]:
    """``record`` if it matches ``RECORD_SCHEMA``; ValueError naming the first field that does not."""
    import jsonschema

    try:
        jsonschema.validate(record, RECORD_SCHEMA)
    except jsonschema.ValidationError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "the record"
        raise ValueError(f"grading record: {where}: {error.message}") from None
    return record


def write_record(path: Path, record: Dict[str, Any]) -> None:
    check_record(record)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))


def read_record(path: Path) -> Dict[str, Any]:
    """The record at ``path``; ValueError (saying which file) when it is not JSON or not a record."""
    try:
        record = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error}); grade the lab again to rewrite it") from None
    try:
        return check_record(record)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
