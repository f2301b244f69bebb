"""A lab's notebooks read for the simulated class (``classroom``): the lab (``Lab``, ``load_lab``, in another
language with ``in_language``), and its answer cell edited: code injected at its top or a function's
(``inject``, ``inject_into_function``), its TODO functions and the delegations to the reference a dishonest student
would write (``delegations``)."""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Set


from autograder.course.languages import METADATA_KEY, is_setup_cell, translated_releases
from autograder.course.notebook import cell_text, is_hidden_test, nbgrader


# ---- reading a lab ---------------------------------------------------------------------------------
@dataclass
class Lab:
    name: str
    notebook: str
    source: dict
    release: dict
    translated: Dict[str, dict] = field(default_factory=dict)  # {language: its release} (course/<language>/)

    @property
    def answer_index(self) -> int:
        return next(i for i, c in enumerate(self.source["cells"]) if nbgrader(c).get("solution"))

    @property
    def grade_cells(self) -> Dict[str, float]:
        return {
            nbgrader(c)["grade_id"]: float(nbgrader(c).get("points", 0))
            for c in self.source["cells"]
            if nbgrader(c).get("grade")
        }

    @property
    def visible(self) -> Set[str]:
        return {
            nbgrader(c)["grade_id"] for c in self.source["cells"] if nbgrader(c).get("grade") and not is_hidden_test(c)
        }

    def hidden_check(self, grade_id: str) -> Optional[str]:
        cell = next(c for c in self.source["cells"] if nbgrader(c).get("grade_id") == grade_id)
        calls = [
            n.func.attr
            for n in ast.walk(ast.parse(cell_text(cell)))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("check_")
        ]
        return calls[0] if calls else None


def load_lab(lab: str, source_dir: Path, release_dir: Path) -> Lab:
    notebook = next(p.name for p in (source_dir / lab).glob("*.ipynb"))
    read = lambda folder: json.loads((folder / lab / notebook).read_text())  # noqa: E731
    return Lab(lab, notebook, read(source_dir), read(release_dir), translated_releases(release_dir, lab, notebook))


def in_language(lab: Lab, nb: dict, language: str) -> dict:
    """``nb`` (made from the lab's source) as a student of ``language``'s release has it: its markdown cells and its
    setup cell are that release's (by cell id), its metadata says the language."""
    twins = {cell.get("id"): cell for cell in lab.translated[language]["cells"]}
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        twin = twins.get(cell.get("id"))
        if twin is not None and (cell.get("cell_type") == "markdown" or is_setup_cell(cell)):
            cell["source"], cell["metadata"] = copy.deepcopy(twin["source"]), copy.deepcopy(twin["metadata"])
    out["metadata"] = {**out.get("metadata", {}), METADATA_KEY: {"language": language}}
    return out


# ---- editing the answer cell -----------------------------------------------------------------------
def _with_answer(lab: Lab, edit: Callable[[str], str]) -> dict:
    nb = copy.deepcopy(lab.source)
    cell = nb["cells"][lab.answer_index]
    cell["source"] = edit(cell_text(cell))
    return nb


def inject(code: str) -> Callable[[str], str]:
    """Put ``code`` at the top of the TODO's solution region (inside the function being written)."""

    def edit(source: str) -> str:
        lines = source.splitlines()
        at = next(i for i, line in enumerate(lines) if "### BEGIN SOLUTION" in line)
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        return "\n".join(lines[: at + 1] + [indent + line for line in code.splitlines()] + lines[at + 1 :])

    return edit


def inject_into_function(name: str, code: str) -> Callable[[str], str]:
    """Put ``code`` at the top of the body of the function ``name`` defined in the answer cell."""

    def edit(source: str) -> str:
        lines = source.splitlines()
        node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
        at = node.body[0].lineno - 1
        if isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None), ast.Constant):
            at = node.body[0].end_lineno  # after the docstring
        indent = " " * node.body[0].col_offset
        return "\n".join(lines[:at] + [indent + line for line in code.splitlines()] + lines[at:])

    return edit


def todo_functions(lab: Lab) -> Dict[str, ast.FunctionDef]:
    """The functions the answer cell writes: its top-level defs, or the methods of its class."""
    tree = ast.parse(cell_text(lab.release["cells"][_release_answer(lab)]))
    found: Dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            found.update({n.name: n for n in node.body if isinstance(n, ast.FunctionDef)})
    return found


def _release_answer(lab: Lab) -> int:
    return next(i for i, c in enumerate(lab.release["cells"]) if nbgrader(c).get("solution"))


def _call_args(function: ast.FunctionDef) -> str:
    names = [a.arg for a in function.args.args if a.arg not in ("self", "cls")]
    names += [f"{a.arg}={a.arg}" for a in function.args.kwonlyargs]
    return ", ".join(names)


def _class_answer(lab: Lab) -> Optional[ast.ClassDef]:
    tree = ast.parse(cell_text(lab.source["cells"][lab.answer_index]))
    return next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)


def delegations(lab: Lab) -> Dict[str, str]:
    """Answer-cell edits that hand the TODO to paged_kv's reference: ``{label: code to inject}``."""
    import paged_kv

    out: Dict[str, str] = {}
    functions = todo_functions(lab)
    if not functions:
        return out
    name, function = next(iter(functions.items()))
    klass = _class_answer(lab)
    if klass is not None:
        out["super()"] = f"return super().{name}({_call_args(function)})"
        base = klass.bases[0].id if klass.bases and isinstance(klass.bases[0], ast.Name) else None
        reference = _starter_reference(base, name)
        if reference is not None:
            owner = reference.__qualname__.split(".")[0]
            out["reference imported under another name"] = (
                f"from {reference.__module__} import {owner} as _Engine\n"
                f"return _Engine.{name}(self, {_call_args(function)})"
            )
    elif hasattr(paged_kv, name):
        out["reference imported under another name"] = (
            f"from paged_kv import {name} as _engine\nreturn _engine({_call_args(function)})"
        )
    return out


def _starter_reference(base: Optional[str], method: str):
    from paged_kv.lab import starters

    starter = getattr(starters, base, None) if base else None
    if starter is None or method not in getattr(starter, "__todo__", ()):
        return None
    return starters._defined(starter.__starter_of__, method)
