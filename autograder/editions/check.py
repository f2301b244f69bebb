"""Run a lab as a student who finished it, on an edition of the package: what a class's handout must allow.

``finished_notebook(lab)`` is the lab's source notebook without its hidden tests (what a student who
wrote every TODO like the solution holds); ``run_on_edition(lab, edition)`` executes it top to bottom in
a fresh kernel that imports the edition's ``paged_kv`` (``build_edition(edition)``) and returns the errors
of its cells. ``python -m autograder.editions.check LAB [EDITION]`` prints them.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from autograder.editions.build import REPO, build_edition


@dataclass
class CellError:
    index: int
    grade_id: str
    ename: str
    evalue: str

    def __str__(self) -> str:
        where = f"cell {self.index}" + (f" ({self.grade_id})" if self.grade_id else "")
        return f"{where}: {self.ename}: {self.evalue.splitlines()[0][:300] if self.evalue else ''}"


def finished_notebook(lab: str, source_dir: Path = REPO / "solutions"):
    """The lab's source notebook with every hidden-test region removed (the answers stay)."""
    import nbformat

    from autograder.course.layout import discover_labs
    from autograder.course.notebook import BEGIN, normalized

    nb = nbformat.read(source_dir / lab / discover_labs(source_dir)[lab], as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and BEGIN in cell.source:
            cell.source = normalized(cell.source)
        cell.outputs = [] if cell.cell_type == "code" else cell.get("outputs", [])
    return nb


def run_on_edition(lab: str, edition: Optional[str], timeout_s: int = 300, nb=None) -> List[CellError]:
    """Execute ``nb`` (default: the finished ``lab``) on the edition of ``edition`` (None: the whole course);
    the errors its cells raised (a cell tagged ``raises-exception`` may raise)."""
    from autograder.course.notebook_client import NotebookClient

    nb = nb if nb is not None else finished_notebook(lab)
    folder = build_edition(edition)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]), MPLBACKEND="Agg")
    env.setdefault("TRITON_INTERPRET", "1")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = NotebookClient(
            nb,
            timeout=timeout_s,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(REPO / "solutions" / lab)}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    errors = []
    for index, cell in enumerate(nb.cells):
        if "raises-exception" in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(
                    CellError(
                        index,
                        cell.metadata.get("nbgrader", {}).get("grade_id", ""),
                        output.get("ename", ""),
                        output.get("evalue", ""),
                    )
                )
    return errors


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not 1 <= len(args) <= 2:
        print("usage: python -m autograder.editions.check LAB [EDITION_LAB|course]", file=sys.stderr)
        return 2
    lab, edition = args[0], (args[1] if len(args) == 2 else args[0])
    started = time.monotonic()
    errors = run_on_edition(lab, None if edition == "course" else edition)
    for error in errors:
        print(error)
    print(f"{lab} on the edition of {edition}: {len(errors)} cell(s) with errors, {time.monotonic() - started:.1f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
