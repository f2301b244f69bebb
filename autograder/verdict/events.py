"""What grading one notebook leaves for the instructor: its events and verdicts, one JSON file per student and lab.

``HardenedExecute`` writes the *record* (``write_record``) at ``events_path(dir, lab, student)``; ``make grade``,
the platforms' one upload, the insight report and the proof harness read it back (``read_record``). Both sides
check it against ``RECORD_SCHEMA``, so a reader never guesses at a field. An event's and a verdict's kind is one
of ``EventKind`` / ``VerdictKind`` (``str`` enums: the file holds their values).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Dict


class EventKind(str, Enum):
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


_TEXT = {
    EventKind.TIMEOUT: "stopped by the time limit",
    EventKind.NOT_RUN: "not run (the notebook's grading time was spent)",
    EventKind.KERNEL_DIED: "the kernel died",
    EventKind.MEMORY: "hit the memory limit",
    EventKind.OUTPUT_CUT: "too much output, cut",
    EventKind.EXIT_CALLED: "called sys.exit()",
    EventKind.INTEGRITY: "no points: code that is not the student's own",
    EventKind.SIMILAR: "nearly the reference's code (review)",
    EventKind.REACHED_STUB: "called an implementation the grading box leaves out (it earns nothing)",
    EventKind.ISOLATION: "not graded: the grading box could not be trusted on this machine",
    EventKind.SECRET_REMOVED: "text of the hidden tests removed from an output",
    EventKind.NOT_TRITON: "a kernel that is not all Triton (the interpreter would run what the GPU build leaves out)",
    EventKind.LAUNCH_NOT_BUILT: "a graded launch of this kernel does not compile for the GPU, though another does",
}

#: Events the instructor reads but the student's *Grading notes* do not list one by one.
NOT_LISTED_FOR_STUDENTS = (EventKind.INTEGRITY, EventKind.SIMILAR, EventKind.ISOLATION)


class VerdictKind(str, Enum):
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


def describe(item: Dict[str, Any], detail: bool = True) -> str:
    """An event as one line of the *Grading notes*: what happened, and its detail where it helps."""
    kind = item["kind"]
    known = kind in EventKind._value2member_map_
    text = EventKind(kind).text if known else str(kind)
    quiet = (EventKind.NOT_RUN.value, EventKind.INTEGRITY.value)
    return text + (f" ({item['detail']})" if detail and item.get("detail") and kind not in quiet else "")


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
