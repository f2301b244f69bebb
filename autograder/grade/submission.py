"""What was submitted, read against the lab's source notebook before any kernel starts: its cells classified
(``autograder.verdict.notebook``), the lab's rules, and the student's text read for routes to the reference
(``autograder.verdict.provenance``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.verdict import cells as verdicts
from autograder.verdict import given_names
from autograder.verdict import notebook as nbview
from autograder.verdict import provenance


def source_notebook(source_dir: str, resources: Optional[dict]) -> Optional[Path]:
    """The lab's source notebook (``source_dir/<assignment>/<notebook>.ipynb``, the trusted text of every test), or
    None when it is not there."""
    nbgrader = (resources or {}).get("nbgrader", {})
    assignment, notebook = nbgrader.get("assignment"), nbgrader.get("notebook")
    if not (source_dir and assignment and notebook):
        return None
    path = Path(source_dir) / assignment / f"{notebook}.ipynb"
    return path if path.exists() else None


@dataclass
class Submission:
    """A notebook read against its lab's source."""

    view: List[nbview.Cell]  # every cell, classified
    last_that_counts: int  # the last graded cell or cell the student wrote (below it, given cells only show)
    rules: Any  # the graded cells' rules (``verdicts.rules_for``)
    findings: List[provenance.Finding]  # where the student's text reaches the reference or the machinery
    similar: List[tuple]  # (TODO, reference, ratio): a TODO much like a reference, for the instructor


def read(nb, source: Path) -> Submission:
    """Classify the cells against the lab's source, read the student's text, find the lab's rules."""
    lab = nbview.LabSource.read(source)
    view = nbview.classify(nb, lab)
    last_that_counts = max((c.index for c in view if c.kind == nbview.GRADED or c.student), default=len(view))
    graded = [c for c in view if c.kind == nbview.GRADED]
    rules = verdicts.rules_for(graded)
    reference_objects = references(graded, view)
    todo_names: set = set()
    for cell in lab.cells:
        if nbgrader_meta(cell).get("solution") and cell.get("cell_type") == "code":
            tree = nbview.parse(nbview.cell_text(cell.get("source")))
            if tree is not None:
                todo_names |= {
                    n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                }
    names = given_names.lab_names(view, reference_objects, todo_names)
    findings = provenance.check_submission(view, names)
    similar = provenance.similar_to_reference(view, reference_objects)
    return Submission(view, last_that_counts, rules, findings, similar)


def references(graded, view) -> List[Any]:
    """The lab's reference implementations: what its graders' checks name (``@grades``) and the TODOs of
    the starter classes its given cells import."""
    import importlib

    from autograder.course.notebook import checks_modules
    from paged_kv.lab import starters

    refs: List[Any] = []
    modules = set()
    for cell in graded:
        modules |= checks_modules(cell.tree)
    for name in sorted(modules):
        module = importlib.import_module(name)
        for value in vars(module).values():
            refs += list(getattr(value, "__grades__", ()))
    for cell in view:
        if cell.kind != nbview.GIVEN or cell.tree is None:
            continue
        for node in ast.walk(cell.tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("paged_kv"):
                for alias in node.names:
                    obj = getattr(importlib.import_module(node.module), alias.name, None)
                    reference = getattr(obj, "__starter_of__", None)
                    for todo in getattr(obj, "__todo__", ()) if reference is not None else ():
                        refs.append(starters.todo_function(reference, todo))
    return refs
