"""Run a notebook's code in this process, up to and including its answer cell (test cells skipped)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import nbformat
from IPython.core.inputtransformer2 import TransformerManager


def namespace_after_answer(path: Path) -> Dict[str, Any]:
    """Execute every code cell before the last answer cell, and that cell; return the globals."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    last_answer = max(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("solution"))
    transform = TransformerManager().transform_cell
    namespace: Dict[str, Any] = {"__name__": "__notebook__"}
    for cell in cells[:last_answer + 1]:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        exec(compile(transform(cell.source), f"<{path.name}>", "exec"), namespace)
    return namespace


def answer_source(path: Path) -> str:
    """The source of a notebook's only answer cell (the TODO with its solution)."""
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    return cell.source
