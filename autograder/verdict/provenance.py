"""Read the submitted text for code that reaches the reference, the grading machinery or the kernel's internals.

The student's code runs in the grading kernel, where it can change anything; what it cannot change
is the text it was submitted as. Every cell the student wrote or added is read here, in the trusted
process, before any score is given. A finding names the cell, the line and the rule; a TODO with a
finding earns nothing, and the instructor's report lists it.

What is refused (each with the reason shown to the student):

- imports outside an allowed list (the standard library's plain-data modules, numpy, torch, triton,
  xxhash, matplotlib, ipywidgets), and any import of ``paged_kv`` beyond the names the lab's own
  setup imports; ``IPython``, ``ipykernel``, ``autograder``, ``sys``, ``os``, ``inspect``,
  ``importlib``, ``gc``, ``ctypes``, ``types``, ``builtins``, ``pickle`` and the like;
- dynamic code and introspection: ``eval``, ``exec``, ``compile``, ``__import__``, ``globals``,
  ``locals``, ``vars``, ``breakpoint``, ``getattr``/``setattr``/``delattr``/``hasattr`` with a name
  that is not a string literal, double-underscore attributes outside the data-model methods
  (``__class__``, ``__dict__``, ``__code__``, ``__globals__``, ``__mro__``, ``__subclasses__`` ...), frame,
  traceback, code and generator attributes (``f_back``, ``tb_frame``, ``co_code`` ...), ``mro()``,
  private attributes of modules (``torch._C``), loaders of pickled objects and native code;
- IPython and the kernel: ``get_ipython``, ``In``, ``Out``, ``_ih``, ``exit``, magics other than
  ``%time``/``%timeit``/``%matplotlib``, shell escapes;
- reaching the reference: reading, inside a function or class (code that runs when graded), a
  name of the lab's given cells that leads to paged_kv's implementation of a TODO (the package
  itself, its reference classes, ``with_reference_todos``) or a variable of a given or test cell
  (``_demo``, ``M``) -- directly, or through a name that a statement reading one bound;
- changing what is not yours: assigning attributes of modules, of given classes and functions
  (monkeypatching), rebinding a name the lab's setup binds, binding a TODO's name other than with
  ``def``/``class``.

The lists are ``autograder.verdict.provenance_rules``; what the given cells make of names,
``autograder.verdict.given_names`` (``lab_names``); reading one cell, ``autograder.verdict.cell_reader``; here,
``check_submission`` reads the whole submission in notebook order (a name a statement fills from a given cell's
objects stays tainted below it).

``similar_to_reference`` flags, for the instructor only, a TODO whose normalised syntax tree is
nearly the reference's (students hold the package: pasting cannot be prevented, only shown).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap
from typing import Any, Dict, Iterable, List, Sequence, Set, Tuple

from autograder.verdict.cell_reader import CellReader, magic_free, taints
from autograder.verdict.given_names import LabNames, code_of
from autograder.verdict.notebook import ANSWER, GRADED, Cell, python_of, statement_binds
from autograder.verdict.provenance_rules import BELOW, TODO, Finding


# ---- the whole submission ------------------------------------------------------------------------------------
def check_submission(cells: Sequence[Cell], lab: LabNames) -> List[Finding]:
    """Every finding in the student's cells (answer cells and added cells), in notebook order; and, for a
    test cell that reads a name some statement filled from a given cell's objects, that statement."""
    findings: List[Finding] = []
    tainted: Dict[str, Finding] = {}
    own: Set[str] = set()
    for cell in cells:
        if cell.kind == GRADED and cell.tree is not None:
            from autograder.verdict.notebook import free_names

            for name in sorted(free_names(cell.tree) & set(tainted)):
                origin = tainted[name]
                findings.append(
                    Finding(
                        origin.cell_index,
                        origin.cell_label,
                        origin.line,
                        origin.code,
                        f"gives `{name}`, which the tests use, something taken from a given or "
                        "test cell's objects (paged_kv's implementation earns nothing)",
                        BELOW,
                    )
                )
            continue
        if not cell.student:
            continue
        label = (
            f"your answer cell `{cell.grade_id}`"
            if cell.kind == ANSWER and cell.grade_id
            else f"your cell #{cell.index + 1}" + (" (added)" if cell.kind != ANSWER else "")
        )
        source, refused = magic_free(cell.source)
        lines = cell.source.splitlines()
        for number, text in refused:
            findings.append(
                Finding(
                    cell.index,
                    label,
                    number,
                    text[:160],
                    "IPython magics and shell commands (other than %time, %timeit, %matplotlib) "
                    "are not allowed in a graded notebook",
                    BELOW,
                )
            )
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # a syntax error defines nothing: the tests fail on their own
        reader = CellReader(cell, label, lab, set(tainted), own, lines)
        variables = {n for n in lab.given if n not in lab.given_imports and n not in lab.given_functions}
        for node in tree.body:  # statement by statement: a name a statement taints is tainted below it
            reader.visit(node)
            line = getattr(node, "lineno", 0)
            for name in taints(node, (lab.reference_bearing | variables | set(tainted)) - own):
                text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
                tainted.setdefault(name, Finding(cell.index, label, line, text[:160], "", BELOW))
                reader.tainted.add(name)
                own.discard(name)
            own |= statement_binds(node) - lab.given - set(tainted)
        findings += reader.findings
        findings += _todo_bindings(cell, tree, lab, label, lines)
    return _unique(findings)


def _unique(findings: List[Finding]) -> List[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.cell_index, f.line, f.rule)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _todo_bindings(cell: Cell, tree: ast.Module, lab: LabNames, label: str, lines: List[str]) -> List[Finding]:
    """A TODO's name bound by anything but ``def``/``class`` (an assignment, an import, a loop)."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in sorted(statement_binds(node) & lab.todo_names):
            line = getattr(node, "lineno", 0)
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            out.append(
                Finding(
                    cell.index,
                    label,
                    line,
                    text[:160],
                    f"binds the TODO's name `{name}` without def or class: write the TODO as code",
                    TODO if cell.kind == ANSWER else BELOW,
                )
            )
    return out


# ---- pasted reference code (reported, not penalised) ---------------------------------------------------------
def normalized_tokens(function: ast.AST) -> List[str]:
    """A function's syntax as a token list with names, constants and docstrings erased."""
    node = _strip_docstrings(ast.parse(ast.unparse(function)))
    tokens: List[str] = []
    for sub in ast.walk(node):
        tokens.append(type(sub).__name__)
        if isinstance(sub, ast.Attribute):
            tokens.append("." + sub.attr)
        elif isinstance(sub, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.AugAssign)):
            tokens.append(type(getattr(sub, "op", None) or sub.ops[0]).__name__)
    return tokens


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def similar_to_reference(
    cells: Sequence[Cell], references: Iterable[Any], threshold: float = 0.92
) -> List[Tuple[str, str, float]]:
    """``(TODO function, reference, similarity)`` for each written TODO whose body is nearly a reference's."""
    refs = {}
    for ref in references:
        code = code_of(ref)
        if code is None:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(getattr(ref, "__func__", getattr(ref, "fget", ref))))
            refs[code.co_name] = (f"{getattr(ref, '__qualname__', code.co_name)}", normalized_tokens(ast.parse(source)))
        except (OSError, TypeError, SyntaxError):
            continue
    out = []
    for cell in cells:
        if cell.kind != ANSWER or cell.tree is None:
            continue
        for node in ast.walk(cell.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in refs:
                name, tokens = refs[node.name]
                mine = normalized_tokens(node)
                if len(mine) < 12:
                    continue
                ratio = difflib.SequenceMatcher(None, mine, tokens, autojunk=False).ratio()
                if ratio >= threshold:
                    out.append((node.name, name, round(ratio, 3)))
    return out


def python(source: str) -> str:  # kept for callers that want the IPython-transformed text
    return python_of(source)
