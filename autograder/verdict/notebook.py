"""Who wrote which cell of a submission, and what each cell's code binds and reads.

The grader reads a submission against the lab's source notebook (``solutions/``, the trusted text):

- a *graded* cell is run from the source's text for its ``grade_id`` (hidden tests included), never
  from the submission's;
- a *given* cell is one whose text is a non-answer cell of the source (read-only code, pictures,
  practice cells), in any form students are handed it (``autograder.course.handed_out``: a translation's or a
  class's setup cell): trusted text;
- every other code cell is *student text*: the answer cells and the cells the student added.

``names_read``/``names_bound`` are the static facts the namespace builder and the provenance checks
use. Cell sources are turned into Python first (IPython magics and shell escapes become calls, as
IPython runs them).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

from autograder.course.handed_out import given_forms
from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.course.notebook import cell_text, normalized

GIVEN, ANSWER, ADDED, GRADED, TEXT = "given", "answer", "added", "graded", "text"


def python_of(source: str) -> str:
    """A cell's source as the Python IPython runs (``%pip x`` becomes ``get_ipython().run_line_magic(...)``)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - nbgrader needs IPython
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - a cell IPython cannot read: parse it as it is
        return source


def parse(source: str) -> Optional[ast.Module]:
    try:
        return ast.parse(python_of(source))
    except SyntaxError:
        return None


# ---- what code binds and reads -----------------------------------------------------------------------
def names_bound(tree: ast.AST, top_level_only: bool = True) -> Set[str]:
    """Names a module's top-level statements bind (defs, classes, assignments, imports, loops, withs)."""
    bound: Set[str] = set()
    body = tree.body if isinstance(tree, ast.Module) else [tree]
    for node in body:
        bound |= statement_binds(node)
    return bound


def statement_binds(node: ast.stmt) -> Set[str]:
    """Names one top-level statement binds in the module's namespace."""
    out: Set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(node.name)
        return out
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name != "*":
                out.add((alias.asname or alias.name).split(".")[0])
        return out
    for sub in _module_level_nodes(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
            out.add(sub.target.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in sub.names if a.name != "*"}
    return out


def _module_level_nodes(node: ast.AST) -> Iterable[ast.AST]:
    """Nodes that run in the module's scope: everything except the bodies of functions, lambdas,
    comprehensions and classes (a class body's names are its own)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield child  # its name is bound here; its body runs elsewhere
                stack.extend(child.decorator_list)
                if not isinstance(child, ast.ClassDef):
                    stack.extend(d for d in child.args.defaults + child.args.kw_defaults if d is not None)
                else:
                    stack.extend(child.bases + [k.value for k in child.keywords])
                continue
            if isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                yield child
                continue
            stack.append(child)


def names_read(tree: ast.AST) -> Set[str]:
    """Every name loaded anywhere in ``tree`` (function bodies included: they read globals when called)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def free_names(tree: ast.AST) -> Set[str]:
    """Names ``tree`` reads that its own top level does not bind first (an over-approximation)."""
    return names_read(tree) - _locally_bound(tree)


def _locally_bound(tree: ast.AST) -> Set[str]:
    """Names bound anywhere inside ``tree`` (arguments, assignments, loop targets, imports, defs)."""
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def root_name(node: ast.AST) -> Optional[str]:
    """``a`` for ``a``, ``a.b.c``, ``a[1].b``, ``a.b(...).c``; None otherwise."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def mutates(node: ast.stmt) -> Set[str]:
    """Module names a statement changes in place: ``x.m(...)``, ``x.a = ...``, ``x[i] = ...``, ``x += ...``."""
    out: Set[str] = set()
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        name = root_name(node.value.func.value)
        if name:
            out.add(name)
    targets: List[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, (ast.Attribute, ast.Subscript)):
                name = root_name(sub)
                if name:
                    out.add(name)
    return out


# ---- a lab's source, a submission's cells ------------------------------------------------------------
@dataclass
class Statement:
    """One top-level statement of a given cell (trusted text), with what it binds, reads and changes."""

    cell: int
    node: ast.stmt
    binds: Set[str]
    reads: Set[str]
    changes: Set[str]


@dataclass
class Cell:
    index: int
    kind: str  # given, answer, added, graded, text
    source: str  # for graded cells: the source notebook's text (hidden tests included)
    cell_id: str = ""
    grade_id: str = ""
    points: float = 0.0
    tree: Optional[ast.Module] = None

    @property
    def student(self) -> bool:
        return self.kind in (ANSWER, ADDED)


@dataclass
class LabSource:
    """The lab's source notebook, read once per grading process."""

    path: Path
    cells: List[dict]
    graded: Dict[str, str] = field(default_factory=dict)  # grade_id -> source text
    given_texts: Set[str] = field(default_factory=set)  # normalized texts of given code cells
    answer_ids: Set[str] = field(default_factory=set)  # grade_ids of answer cells

    @classmethod
    def read(cls, path: Path) -> "LabSource":
        data = json.loads(Path(path).read_text())
        lab = cls(Path(path), data["cells"])
        for cell in data["cells"]:
            meta = nbgrader_meta(cell)
            text = cell_text(cell.get("source"))
            if cell.get("cell_type") != "code":
                continue
            if meta.get("grade"):
                lab.graded[meta["grade_id"]] = text
            elif meta.get("solution"):
                lab.answer_ids.add(meta.get("grade_id", ""))
            else:  # and the forms students are handed it in (a translation's or a class's setup cell)
                lab.given_texts |= {normalized(form) for form in given_forms(text)}
        return lab


def classify(nb, lab: LabSource) -> List[Cell]:
    """The submission's cells (``nb``: an nbformat notebook), each with its kind (see the module doc)."""
    out: List[Cell] = []
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        source = cell_text(cell.get("source"))
        if cell.get("cell_type") != "code":
            out.append(Cell(index, TEXT, source, cell.get("id", "")))
            continue
        grade_id = meta.get("grade_id", "")
        if meta.get("grade") and grade_id in lab.graded:
            made = Cell(
                index, GRADED, lab.graded[grade_id], cell.get("id", ""), grade_id, float(meta.get("points", 0) or 0)
            )
        elif meta.get("solution") and not meta.get("grade"):
            made = Cell(index, ANSWER, source, cell.get("id", ""), grade_id)
        elif normalized(source) in lab.given_texts or not source.strip():
            made = Cell(index, GIVEN, source, cell.get("id", ""), grade_id)
        else:
            made = Cell(index, ADDED, source, cell.get("id", ""), grade_id)
        made.tree = parse(made.source)
        out.append(made)
    return out


def given_statements(cells: List[Cell]) -> List[Statement]:
    """Every top-level statement of the given cells, in notebook order."""
    out: List[Statement] = []
    for cell in cells:
        if cell.kind != GIVEN or cell.tree is None:
            continue
        for node in cell.tree.body:
            out.append(Statement(cell.index, node, statement_binds(node), free_names(node), mutates(node)))
    return out


def student_names(cells: List[Cell], before: int) -> Set[str]:
    """Names the student's cells above cell ``before`` bind at their top level."""
    names: Set[str] = set()
    for cell in cells:
        if cell.index < before and cell.student and cell.tree is not None:
            names |= names_bound(cell.tree)
    return names


def given_names(cells: List[Cell]) -> Set[str]:
    """Names the given cells bind anywhere at their top level (imports, defs, assignments)."""
    names: Set[str] = set()
    for statement in given_statements(cells):
        names |= statement.binds
    return names
