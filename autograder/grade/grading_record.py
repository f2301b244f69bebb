"""What grading one notebook leaves behind: no line of the hidden tests or graders (``remove_secrets``), the
events record for the instructor (``record``, ``autograder.verdict.events``' schema) and the student's notes on
what happened while grading (``add_grading_notes``, in the notebook's "Grading notes" cell)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List

from autograder.verdict import secrets as secret_text
from autograder.verdict.events import NOT_LISTED_FOR_STUDENTS, EventKind, describe, event
from autograder.verdict.scoring import add_notes
from autograder.verdict.student_text import for_student, language_of

if TYPE_CHECKING:
    from autograder.grade.notebook_run import NotebookRun

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_message(lines) -> str:
    """A verdict's message as the student's feedback shows it, without colours (for ``insight``), kept short."""
    return ANSI.sub("", "\n".join(lines))[:1500]


def remove_secrets(source: Path, cells, verdicts: Dict[str, Any], events: List[dict]) -> None:
    """No line of the hidden tests or graders leaves grading (``autograder.verdict.secrets``): not in a cell's
    outputs (the feedback, a platform's results), a verdict's message or an event (the instructor's log)."""
    secrets = secret_text.secret_lines(source)
    removed = secret_text.scrub_outputs(cells, secrets)
    for verdict in verdicts.values():
        verdict.lines = [secret_text.scrub(line, secrets) for line in verdict.lines]
    for logged in events:
        logged["detail"] = secret_text.scrub(str(logged.get("detail", "")), secrets)
    if removed:
        events.append(
            event("notebook", EventKind.SECRET_REMOVED, f"{removed} line(s) of the hidden tests or graders in outputs")
        )


def record(resources, run: "NotebookRun", isolation: str, seconds: float, spare_kernels: int) -> Dict[str, Any]:
    """The events record of one graded notebook (who, from ``resources``; from ``run``: in which language, where the
    time went, the events and each graded cell's verdict; how isolated, how long, how many spare kernels it used)."""
    nbgrader = (resources or {}).get("nbgrader", {})
    return {
        "student": nbgrader.get("student"),
        "assignment": nbgrader.get("assignment"),
        "language": run.language,
        "isolation": isolation,
        "seconds": round(seconds, 2),
        "events": run.events,
        "spare_kernels": spare_kernels,
        "phases": run.phases.rounded(),
        "verdicts": {
            g: {
                "passed": v.passed,
                "kind": v.kind.value,
                "seconds": round(v.seconds, 2),
                "requests": v.requests,
                "message": plain_message(v.lines),
            }
            for g, v in run.verdicts.items()
        },
    }


def add_grading_notes(nb, events: List[dict], language: str = "") -> None:
    """Tell the student, in the notebook's "Grading notes", what cost points for integrity and what the grader did
    (each graded cell's events, and the other cells' kinds of event in one line), in ``language`` (by default the
    notebook's, ``language_of``)."""
    language = language or language_of(nb)
    integrity = [e for e in events if e["kind"] == EventKind.INTEGRITY]
    if integrity:
        add_notes(
            nb,
            [for_student("No points for code that is not your own (the tests it affects score 0):", language)]
            + [f"- {e['detail']}" for e in integrity],
            language,
        )
    shown = [e for e in events if e["kind"] not in NOT_LISTED_FOR_STUDENTS]
    if shown:
        lines = [f"- {e['cell']}: {describe(e, language=language)}" for e in shown if e["graded"]]
        others = [e for e in shown if not e["graded"]]
        if others:
            count, kinds = len(others), "; ".join(sorted({describe(e, False, language) for e in others}))
            lines.append("- " + for_student(f"{count} cell(s) that are not tests: {kinds}", language))
        add_notes(nb, [for_student("While grading:", language)] + lines, language)
