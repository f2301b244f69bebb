"""Run a notebook's code in this process, up to and including its graded answer cell (test cells skipped)."""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any, Dict, List

import nbformat
from IPython.core.inputtransformer2 import TransformerManager


def graded_answer_index(cells: List) -> int:
    """Index of the lab's last graded answer cell: the last solution cell before the last test cell.

    Solution cells after every test (an optional stretch exercise) are not graded TODOs.
    """
    last_test = max(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade"))
    return max(i for i, c in enumerate(cells[:last_test]) if c.metadata.get("nbgrader", {}).get("solution"))


def namespace_after_answer(path: Path) -> Dict[str, Any]:
    """Execute every code cell up to the last graded answer cell (test cells skipped); return the globals."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    last_answer = graded_answer_index(cells)
    transform = TransformerManager().transform_cell
    namespace: Dict[str, Any] = {"__name__": "__notebook__"}
    for index, cell in enumerate(cells[: last_answer + 1]):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        source = transform(cell.source)
        filename = f"<{path.name} cell {index}>"
        # Registered like IPython does, so inspect.getsource works (Triton reads a kernel's source).
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


def answer_source(path: Path) -> str:
    """The source of a notebook's only answer cell (the TODO with its solution)."""
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    return cell.source


def answer_class(source: str, given: type, class_name: str, name: str = "", filename: str = "<answer>") -> type:
    """Run an answer cell's ``source`` the way the notebook does (``given``, the starter it subclasses, in scope);
    return its class ``class_name``, renamed ``name`` when given (a catalogue entry's name)."""
    namespace = {given.__name__: given, "__name__": "__notebook__"}
    exec(compile(source, filename, "exec"), namespace)
    cls = namespace[class_name]
    cls.__name__ = cls.__qualname__ = name or class_name
    return cls


def edited_answer(source: str, old: str, new: str, bug: str) -> tuple:
    """``source`` with ``old`` (there exactly once) replaced by ``new``, and the class name a catalogue gives the
    bug ``bug`` (its first four words, title-cased)."""
    if source.count(old) != 1:
        raise ValueError(f"bug {bug!r}: the solution text to edit is not there exactly once")
    return source.replace(old, new), "".join(w.title() for w in bug.split()[:4] if w.isalpha())


def run_visible_cell(lab: str, grade_id: str, imports: str, student: Dict[str, Any]) -> None:
    """Run lab ``lab``'s trace cell (``VISIBLE_TRACE = ...``) and its test cell ``grade_id`` in a fresh namespace
    holding ``imports`` (the setup cell's lines they need) and ``student`` (the names the answer cell defines)."""
    from autograder.course.layout import LABS, SOURCE_DIR

    cells = nbformat.read(SOURCE_DIR / lab / LABS[lab], as_version=4).cells
    trace = next(c.source for c in cells if c.cell_type == "code" and c.source.startswith("VISIBLE_TRACE ="))
    visible = next(c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    namespace: Dict[str, Any] = {"__name__": "__notebook__"}
    exec(imports, namespace)
    exec(trace, namespace)
    namespace.update(student)
    exec(visible, namespace)
