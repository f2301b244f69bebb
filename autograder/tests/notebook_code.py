"""Run a notebook's code in this process, up to and including its answer cell (test cells skipped)."""
from __future__ import annotations

import linecache
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
    for index, cell in enumerate(cells[:last_answer + 1]):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        source = transform(cell.source)
        filename = f"<{path.name} cell {index}>"
        # Registered like IPython does, so inspect.getsource works (Triton reads a kernel's source).
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace
