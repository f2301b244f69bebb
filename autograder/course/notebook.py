"""Reading a lab's notebook: the one place that knows what a cell is to grading.

A cell is either a plain dict (JSON) or an ``nbformat`` node; ``cell_text`` and ``nbgrader`` read both.
A *graded* cell has ``nbgrader.grade``; a *hidden test* is a graded cell with a region between ``BEGIN`` and
``END`` (what nbgrader strips from a release); ``without_hidden`` and ``hidden_regions`` split its text.
A hidden test cell imports its lab's checks as ``from autograder.labs.<package> import checks as grader``
(the package is the lab's folder under ``autograder/labs/``); ``checks_modules`` finds every such import in
a cell's code, whatever form it takes, so the grading box, the secrets filter and the reports read the same
list; ``grader_files`` the files such an import stands for.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Dict, List, Set, Union

PACKAGE = "autograder.labs"
BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def cell_text(cell_or_source: Any) -> str:
    """A cell's source as one string (a cell, or its ``source``: a string or a list of lines)."""
    source = cell_or_source.get("source", "") if isinstance(cell_or_source, dict) else cell_or_source
    return "".join(source) if isinstance(source, list) else str(source or "")


def nbgrader(cell: Dict[str, Any]) -> Dict[str, Any]:
    """The cell's nbgrader metadata (``{}`` when it has none)."""
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell: Dict[str, Any]) -> str:
    return nbgrader(cell).get("grade_id", "") or ""


def is_graded(cell: Dict[str, Any]) -> bool:
    """A test cell nbgrader gives points to."""
    return bool(nbgrader(cell).get("grade"))


def is_hidden_test(cell: Dict[str, Any]) -> bool:
    """A graded cell that holds hidden tests (a ``BEGIN``/``END`` region)."""
    return is_graded(cell) and BEGIN in cell_text(cell)


def normalized(source: str) -> str:
    """Text for comparing cells: hidden-test regions and trailing blanks removed."""
    kept, hidden = [], False
    for line in cell_text(source).strip().splitlines():
        if BEGIN in line:
            hidden = True
        elif END in line:
            hidden = False
        elif not hidden:
            kept.append(line.rstrip())
    return "\n".join(kept).strip()


def hidden_regions(text: str) -> List[str]:
    """The text between each ``BEGIN`` and its ``END`` (an unclosed one runs to the end)."""
    regions = []
    while BEGIN in text:
        text = text.split(BEGIN, 1)[1]
        region, _, text = text.partition(END)
        regions.append(region)
    return regions


def without_hidden(text: str) -> str:
    """``text`` without its hidden-test regions (the marker lines included)."""
    out, rest = [], text
    while BEGIN in rest:
        head, _, rest = rest.partition(BEGIN)
        out.append(head)
        rest = rest.partition(END)[2]
    return "".join(out + [rest])


def _is_checks(module: str) -> bool:
    parts = module.split(".")
    return len(parts) == 4 and ".".join(parts[:2]) == PACKAGE and parts[3] == "checks"


def checks_modules(code: Union[str, ast.AST, None]) -> Set[str]:
    """Dotted names of the labs' ``checks`` modules ``code`` imports (``autograder.labs.lab02_atomic_prefill.checks``);
    code that does not parse imports none."""
    if code is None:
        return set()
    if isinstance(code, str):
        try:
            code = ast.parse(code)
        except SyntaxError:
            return set()
    found: Set[str] = set()
    for node in ast.walk(code):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _is_checks(node.module):
                found.add(node.module)
            else:
                found |= {f"{node.module}.{a.name}" for a in node.names if _is_checks(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if _is_checks(a.name)}
    return found


def lab_cells(source) -> List[Dict[str, Any]]:
    """The graded cells of the lab notebook at ``source`` (a path), in order: ``grade_id``, ``points``,
    ``section`` (the last markdown heading above it) and ``hidden`` (whether it holds hidden tests). Every view
    of a result (the terminal, grades.csv, the platforms' tests, the insight report) lists cells from it."""
    import json
    from pathlib import Path

    notebook = json.loads(Path(source).read_text(encoding="utf-8"))
    section, cells = "", []
    for cell in notebook["cells"]:
        text = cell_text(cell)
        if cell.get("cell_type") == "markdown":
            headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
            section = headings[-1] if headings else section
            continue
        if is_graded(cell) and grade_id(cell):
            cells.append(
                {
                    "grade_id": grade_id(cell),
                    "points": float(nbgrader(cell).get("points", 0)),
                    "section": section,
                    "hidden": is_hidden_test(cell),
                }
            )
    return cells


def grader_files(checks_module: str) -> List[Path]:
    """The files of the grader a ``checks`` module stands for: it and the other modules of its lab's folder (what
    it imports from there, as lab 08's ``traces.py``), not the lab's declaration (``__init__.py``) nor its
    ``tests/``. No line of their code may reach a student (``autograder.verdict.secrets``)."""
    import importlib

    folder = Path(importlib.import_module(checks_module).__file__).parent
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
