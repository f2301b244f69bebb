"""The release notebooks as students get them, and what a student types into their answer cells.

A student's finished answer is the source notebook's answer cell without nbgrader's
``### BEGIN SOLUTION`` / ``### END SOLUTION`` marker lines: exactly the release cell with its
``# YOUR CODE HERE`` stub replaced by the solution. Labs are discovered, never listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List

import nbformat

from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from tools.sync_colab import COLAB_TEST

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def release_path(lab: str, language: str = "") -> Path:
    """The release notebook of ``lab``; with ``language`` (``zh_CN``), its translated release (``course/zh_CN/``)."""
    return RELEASE_DIR / language / lab / LABS[lab] if language else RELEASE_DIR / lab / LABS[lab]


def source_path(lab: str) -> Path:
    return SOURCE_DIR / lab / LABS[lab]


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_answer(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    return bool(nbgrader_meta(cell).get("grade")) and not is_answer(cell)


def is_read_only(cell) -> bool:
    """Locked by nbgrader (given code, prose, tests): JupyterLab must refuse edits and deletion."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("locked")) and not meta.get("solution")


def typed_answer(source_cell) -> str:
    """What a student with the right answer has in the cell: the source without marker lines."""
    if source_cell.cell_type == "markdown":
        return source_cell.source
    lines = source_cell.source.split("\n")
    return "\n".join(line for line in lines if line.strip() not in (BEGIN, END))


def answers(lab: str) -> Dict[str, str]:
    """``{grade_id: typed answer}`` for every answer cell of ``lab``, in notebook order."""
    source = nbformat.read(source_path(lab), as_version=4)
    return {nbgrader_meta(c)["grade_id"]: typed_answer(c) for c in source.cells if is_answer(c)}


def solved_release(lab: str, language: str = "") -> nbformat.NotebookNode:
    """The release notebook (in ``language``'s release, when given) with every answer cell holding the student's
    finished answer."""
    notebook = nbformat.read(release_path(lab, language), as_version=4)
    typed = answers(lab)
    for cell in notebook.cells:
        if is_answer(cell):
            cell.source = typed[nbgrader_meta(cell)["grade_id"]]
    return notebook


def code_cells(notebook) -> List:
    return [c for c in notebook.cells if c.cell_type == "code"]


def lab_code_cells(lab: str, setup: Callable[[str], str], solved: bool = True, language: str = "") -> List[str]:
    """The code cells of ``lab``'s release notebook (``language``'s release, when given; with the student's finished
    answers when ``solved``), its setup cell (the one with the platforms' install lines) rewritten by ``setup``: a
    test points its install address at a local stand-in for the platform's source of the course."""
    notebook = solved_release(lab, language) if solved else nbformat.read(release_path(lab, language), 4)
    return [setup(c.source) if COLAB_TEST in c.source else c.source for c in code_cells(notebook)]
