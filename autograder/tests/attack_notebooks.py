"""The red team's notebooks (``attacks``): where a lab's TODO is, what its entry point is, and a lab's notebook with
cells added, injected into its TODO or put in its place."""

from __future__ import annotations

import ast
import copy
from typing import List

import nbformat

from autograder.proof import classroom
from autograder.course.notebook import cell_text, nbgrader
from autograder.proof.classroom import Lab


# ---- what a lab's TODO is -------------------------------------------------------------------------------
def answer_indices(lab: Lab) -> List[int]:
    return [
        i for i, c in enumerate(lab.source["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade")
    ]


def setup_index(lab: Lab) -> int:
    return next(i for i, c in enumerate(lab.source["cells"]) if c["cell_type"] == "code")


def entry_point(lab: Lab, names: List[str]) -> str:
    """The first of the answer cell's TODO functions that no other one calls in the solution (lab 07's
    ``schedule`` calls ``preempt``): the tests reach it first, so a route planted there is the one they meet."""
    tree = ast.parse(cell_text(lab.source["cells"][lab.answer_index]))
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    target = inner.func
                    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                    if name in names and name != node.name:
                        called.add(name)
    return next((n for n in names if n not in called), names[0])


def target(lab: Lab) -> dict:
    """The TODO the tests reach first: its class (and starter) or function, the answer cell's methods, their
    reference paths."""
    functions = classroom.todo_functions(lab)
    klass = classroom._class_answer(lab)
    first_name = entry_point(lab, list(functions))
    first = functions[first_name]
    kernel = any("jit" in ast.unparse(d) for d in first.decorator_list)
    info = {
        "kernel": kernel,
        "function": first_name,
        "args": classroom._call_args(first),
        "class": None,
        "starter": None,
        "methods": {},
        "classmethod": any("classmethod" in ast.unparse(d) for d in first.decorator_list),
    }
    if klass is not None:
        base = klass.bases[0].id if klass.bases and isinstance(klass.bases[0], ast.Name) else None
        info["class"], info["starter"] = klass.name, base
        for name in functions:
            reference = classroom._starter_reference(base, name)
            if reference is not None:
                owner = reference.__qualname__.split(".")[0]
                info["methods"][name] = (reference.__module__, owner)
    else:
        import paged_kv

        reference = getattr(paged_kv, first_name, None)
        if reference is not None:
            info["methods"][first_name] = (reference.__module__, None)
    return info


def code_cell(source: str, cell_id: str) -> dict:
    cell = dict(nbformat.v4.new_code_cell(source))
    cell["id"] = cell_id
    return cell


def with_cells(nb: dict, at: int, sources: List[str], tag: str) -> dict:
    nb = copy.deepcopy(nb)
    for offset, source in enumerate(sources):
        nb["cells"].insert(at + offset, code_cell(source, f"attack-{tag}-{offset}"))
    return nb


def inject_into_todo(nb: dict, lab: Lab, code: str) -> dict:
    """``code`` at the top of the targeted TODO's body (``target``: its solution region, or its stub in the
    release)."""
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    cell = nb["cells"][index]
    lines = cell_text(cell).splitlines()
    name = target(lab)["function"]
    span = next(
        (
            (n.lineno - 1, n.end_lineno)
            for n in ast.walk(ast.parse(cell_text(cell)))
            if isinstance(n, ast.FunctionDef) and n.name == name
        ),
        (0, len(lines)),
    )
    at = next((i for i in range(*span) if "### BEGIN SOLUTION" in lines[i] or "YOUR CODE HERE" in lines[i]), None)
    if at is None:
        raise ValueError(f"{lab.name}: no solution marker in the first answer cell")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    cell["source"] = "\n".join(lines[: at + 1] + [indent + line for line in code.splitlines()] + lines[at + 1 :])
    return nb


def replace_todo(nb: dict, source: str) -> dict:
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    nb["cells"][index]["source"] = source
    return nb
