"""How a graded cell's verdict becomes points, and what the notebook shows of it.

nbgrader gives a graded cell its points exactly when the cell shows no error output. So every verdict
(``autograder.verdict.cells.Verdict``), wherever it was decided (the main kernel, a part's box, a provenance
finding), reaches the gradebook through the cell's outputs written here: ``show_verdict`` (a verdict),
``error_output`` (a 0 with its reason), ``soften_errors`` (a part that passed in its own box), and the
*Grading notes* cell (``add_notes``) that says what grading changed or noticed. What they say to the student is in
the notebook's language (``autograder.verdict.student_text``).
"""

from __future__ import annotations

import re
from typing import List

from nbformat import NotebookNode, from_dict

from autograder.verdict.cells import Verdict
from autograder.verdict.plain_text import note_lines
from autograder.verdict.student_text import N_, for_student, language_of

NOTES_CELL_ID = "grading-notes"
NOTES_TITLE = N_("## Grading notes")
MAX_ERROR_TEXT = 4000  # characters of an error's message kept in a cell's output


def error_output(name: str, message: str) -> NotebookNode:
    """An error output: the cell scores 0 (nbgrader gives points to a graded cell without one)."""
    return from_dict(
        {"output_type": "error", "ename": name, "evalue": message, "traceback": [f"\x1b[0;31m{name}\x1b[0m: {message}"]}
    )


def note_output(message: str) -> NotebookNode:
    """A ``[grading]`` line on the cell's stderr: a note, never an error (it costs nothing)."""
    return from_dict({"output_type": "stream", "name": "stderr", "text": f"[grading] {message}\n"})


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    return text if len(text) <= limit else text[:limit] + " ... (cut)"


def verdict_output(verdict: Verdict) -> NotebookNode:
    """A failed verdict as the cell's error output (its message first, kept short)."""
    lines = [cap(line, MAX_ERROR_TEXT) for line in verdict.lines][:60] or [verdict.kind.value]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", lines[0])
    return from_dict(
        {"output_type": "error", "ename": verdict.ename or "TestFailed", "evalue": plain, "traceback": lines}
    )


def show_verdict(cell, verdict: Verdict, kernel_error: bool, visible: bool, language: str = "en") -> None:
    """The cell's outputs say what was decided: the kernel's run (a visible test) and the verdict.

    A graded cell earns its points exactly when it shows no error (nbgrader's rule), so the kernel's
    outputs are made neutral (no partial credit from a printed number, no stderr) and the verdict's
    failure, if any, is the cell's error."""
    kept = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "execute_result":
            output = from_dict(
                {"output_type": "display_data", "data": output.get("data", {}), "metadata": output.get("metadata", {})}
            )
        elif kind == "stream" and output.get("name") == "stderr":
            output = from_dict({"output_type": "stream", "name": "stdout", "text": output.get("text", "")})
        kept.append(output)
    if not verdict.passed and not kernel_error:  # a kernel error already says why (and scores 0)
        kept.append(verdict_output(verdict))
    elif verdict.passed and not kernel_error and not visible:
        passed = for_student("Hidden tests passed.", language)
        kept.append(from_dict({"output_type": "stream", "name": "stdout", "text": passed + "\n"}))
    cell.outputs = kept


def soften_errors(cell, part: str, language: str = "en") -> None:
    """A test of a part graded in its own box passed there, but raised in the main kernel (where the
    student's other parts ran): the error is shown as text, with why it costs nothing (in ``language``)."""
    kept = []
    for output in cell.get("outputs", []):
        if output.get("output_type") != "error":
            kept.append(output)
            continue
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", str(line)) for line in output.get("traceback", [])]
        text = "\n".join(lines) or f"{output.get('ename')}: {output.get('evalue')}"
        said = for_student("In your notebook this cell raised (there it runs your code for every part):", language)
        kept.append(from_dict({"output_type": "stream", "name": "stdout", "text": f"{said}\n{text}\n"}))
    kept.append(
        note_output(
            for_student(
                f"Graded with the reference's versions of the other parts (part {part!r} is yours), "
                "these tests passed: the error above comes from another part of your code, whose own "
                "tests say which.",
                language,
            )
        )
    )
    cell.outputs = kept


def notes_heading(language: str = "en") -> str:
    """The first lines of the "Grading notes" cell: its title and what it lists, in ``language``."""
    title = for_student(NOTES_TITLE, language)
    said = for_student("The autograder changed or noticed the following. Points were given for what ran.", language)
    return f"{title}\n\n{said}"


def add_notes(nb, lines: List[str], language: str = "") -> None:
    """Append lines to the notebook's "Grading notes" markdown cell (first cell; made if missing), as text:
    whatever a line quotes (a student's code) can neither close a code span nor open a tag (``plain_text``).
    A new cell's heading is in ``language`` (by default the notebook's, ``language_of``); ``lines`` are
    appended as given."""
    cell = next((c for c in nb.cells if c.get("id") == NOTES_CELL_ID), None)
    if cell is None:
        heading = notes_heading(language or language_of(nb))
        cell = from_dict({"cell_type": "markdown", "id": NOTES_CELL_ID, "metadata": {}, "source": heading})
        nb.cells.insert(0, cell)
    cell.source = cell.source.rstrip("\n") + "\n\n" + note_lines(lines)
