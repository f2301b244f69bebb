"""Scaffold a new graded lab: ``make new-lab ID=09-name TODO=cache/ledger.py:blocks_per_request EXAMPLE="10, 4"``.

Writes the lab's two homes and generates its release, nothing else:

- ``solutions/<id>/<name>.ipynb``: the notebook (title, setup, the TODO's answer cell holding the
  reference's code as its solution, a visible test on ``EXAMPLE``, one hidden test cell), 10 points;
- ``autograder/labs/lab<id>/``: its declaration (``LAB``), its checks (``checks.py``: the student's function
  against the reference on ``EXAMPLE`` and seeded random cases), ``tests/bugs.py`` (an empty catalogue to fill);
- ``course/<id>/``: the release, by ``nbgrader generate_assignment``.

The scaffold grades as it stands (solution 10, release 0); the steps that make it a lab worth taking
(prose, pictures, realistic checks and bugs) are in docs/maintainers.md, "Adding a lab".
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _fail(message: str) -> None:
    raise SystemExit(f"new-lab: {message}")


def _reference(todo: str):
    """``cache/ledger.py:blocks_per_request`` -> (the function, its module path, its name)."""
    if not isinstance(todo, str) or ":" not in todo:
        _fail(
            f"TODO={todo!r}: give the TODO as <module path inside paged_kv/>:<function>, "
            "e.g. cache/ledger.py:blocks_per_request"
        )
    module, name = todo.split(":", 1)
    if not module.endswith(".py") or not (REPO / "paged_kv" / module).is_file():
        _fail(f"paged_kv/{module} is not a file of the package; check the path (relative to paged_kv/)")
    dotted = "paged_kv." + module[:-3].replace("/", ".")
    function = getattr(importlib.import_module(dotted), name, None)
    if not inspect.isfunction(function):
        _fail(f"{dotted} has no function {name!r} (a lab scaffold's TODO is a module-level function)")
    return function, module, name


def _cell(kind: str, source: str, grade_id: str, **nbgrader) -> dict:
    meta = {"grade": False, "grade_id": grade_id, "locked": True, "schema_version": 3, "solution": False}
    meta.update(nbgrader)
    cell = {"cell_type": kind, "metadata": {"nbgrader": meta}, "source": source.strip("\n")}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(lab: str, title: str, name: str, function, example: str) -> dict:
    """The scaffold's notebook: every cell tagged ``lab<NN>-...``, 2 visible points and 8 hidden."""
    from autograder.course.notebook import BEGIN, END
    from autograder.labs import cell_prefix, package_name

    prefix, package = cell_prefix(lab), package_name(lab)
    model = json.loads((REPO / "solutions" / "01-capacity-ledger" / "capacity_ledger.ipynb").read_text())
    setup = model["cells"][1]  # lab 01's setup cell and notebook metadata: the scaffold's models
    answer = textwrap.dedent(inspect.getsource(function))
    header = re.match(r"(def [^\n]*?\)(?:\s*->\s*[^:]+)?):\n", answer)
    if header is None:
        _fail(f"{name}'s definition must start on one line (def {name}(...):)")
    body = answer[header.end() :]
    imports = sorted({f"from {function.__module__} import {n}" for n in _free_names(answer, function)})
    expected = function(*ast.literal_eval(f"({example},)"))
    return {
        "cells": [
            _cell(
                "markdown",
                f"# Lab {lab[:2]} · {title}\n\n(What this lab teaches, in a paragraph: write it.)",
                f"{prefix}md-01",
            ),
            _cell("code", "".join(setup["source"]), f"{prefix}given-02"),
            _cell(
                "markdown", f"## Your task: `{name}`\n\n(The contract: arguments, result, errors.)", f"{prefix}md-03"
            ),
            _cell(
                "code",
                "\n".join(
                    imports
                    + [
                        "",
                        "",
                        header.group(1) + ":",
                        "    ### BEGIN SOLUTION",
                        textwrap.indent(textwrap.dedent(body), "    ").rstrip(),
                        "    ### END SOLUTION",
                    ]
                ),
                f"{prefix}{name.replace('_', '-')}",
                locked=False,
                solution=True,
            ),
            _cell(
                "code",
                f"# Visible tests: run this cell after your function.\n"
                f"expect_equal(\"{name}({example})\", {name}({example}), {expected!r})\nsay(\"Visible tests passed.\")",
                f"{prefix}visible",
                grade=True,
                points=2,
            ),
            _cell(
                "code",
                f"# Hidden tests (8 points): the worked example and seeded random cases.\n{BEGIN}\n"
                f"from autograder.labs.{package} import checks as grader\ngrader.check_{name}({name})\n"
                f"{END}",
                f"{prefix}hidden",
                grade=True,
                points=8,
            ),
        ],
        "metadata": model["metadata"],
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _free_names(source: str, function) -> set:
    """Module-level names of the reference's module that its code reads (to import them in the answer cell)."""
    tree = ast.parse(source)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    module = sys.modules[function.__module__]
    return {n for n in read if n in vars(module) and n != function.__name__ and not n.startswith("__")}


def declaration(lab: str, title: str, module: str, name: str) -> str:
    prefix = __import__("autograder.labs", fromlist=["cell_prefix"]).cell_prefix(lab)
    return (
        f'"""Lab {lab[:2]}, {lab}: its declaration (``LAB``), its checks (``checks.py``) and, under ``tests/``, its\n'
        f'catalogue of bugs and variants."""\nfrom autograder.course.model import Lab, Part, Stub\n\n'
        f'LAB = Lab({lab!r}, {title!r}, (\n'
        f'    Part({name.split("_")[0]!r}, (Stub({module!r}, {name!r}),), ({prefix + "visible"!r}, {prefix + "hidden"!r})),\n'
        f'), todo_object={name!r})\n'
    )


def checks(lab: str, function, name: str, example: str) -> str:
    return f'''"""Lab {lab[:2]}'s checks: ``{name}`` against the reference on the worked example and seeded random cases.

A scaffold: replace the random cases with the lab's edge cases first, then random ones (see lab 01's checks)."""
from __future__ import annotations

import random
from typing import Callable

from {function.__module__} import {name} as reference

from autograder.labs.checking import call, expect_equal, grades

EXAMPLE = ({example},)


def _cases(seed: int, count: int):
    rng = random.Random(seed)
    yield EXAMPLE
    for _ in range(count):
        yield tuple(rng.randint(1, 4 * max(1, a)) if isinstance(a, int) else a for a in EXAMPLE)


@grades(reference)
def check_{name}(student: Callable) -> None:
    """Every case gives the reference's result, with its type."""
    for args in _cases(seed=0, count=50):
        label = "{name}(" + ", ".join(map(repr, args)) + ")"
        expect_equal(label, call(label, student, *args), reference(*args))
'''


BUGS = '''"""Lab {n}'s catalogue: realistic bugs (``BUGS``, each must lose points) and correct variants written
differently (``VARIANTS``, each must keep full marks), as functions with the TODO's signature. Aim for 8 bugs."""

BUGS: list = []
VARIANTS: list = []
'''


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab", help="the lab's id: its folder under solutions/, e.g. 09-chunked-prefill")
    parser.add_argument("--title", required=True, help="a few words, e.g. 'chunked prefill'")
    parser.add_argument("--todo", required=True, help="<module inside paged_kv/>:<function>, the reference")
    parser.add_argument("--example", required=True, help="the worked example's arguments, e.g. '10, 4'")
    parser.add_argument("--no-release", action="store_true", help="do not run nbgrader generate_assignment")
    args = parser.parse_args(argv)

    from autograder.labs import BY_ID, package_name

    package = package_name(args.lab)
    if (
        args.lab in BY_ID
        or (REPO / "solutions" / args.lab).exists()
        or (REPO / "autograder" / "labs" / package).exists()
    ):
        _fail(f"lab {args.lab} exists already (solutions/{args.lab} or autograder/labs/{package}); pick another id")
    function, module, name = _reference(args.todo)
    try:
        ast.literal_eval(f"({args.example},)")
    except (ValueError, SyntaxError):
        _fail(f"EXAMPLE={args.example!r} must be Python literals separated by commas, e.g. '10, 4'")

    nb = notebook(args.lab, args.title, name, function, args.example)
    folder = REPO / "solutions" / args.lab
    folder.mkdir(parents=True)
    (folder / f"{args.lab[3:].replace('-', '_')}.ipynb").write_text(json.dumps(nb, indent=1) + "\n")
    home = REPO / "autograder" / "labs" / package
    (home / "tests").mkdir(parents=True)
    (home / "__init__.py").write_text(declaration(args.lab, args.title, module, name))
    (home / "checks.py").write_text(checks(args.lab, function, name, args.example))
    (home / "tests" / "__init__.py").write_text("")
    (home / "tests" / "bugs.py").write_text(BUGS.format(n=args.lab[:2]))
    print(f"wrote solutions/{args.lab}/ and autograder/labs/{package}/")
    if not args.no_release:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nbgrader",
                "generate_assignment",
                args.lab,
                "--force",
                "--log-level=WARN",
                "--NbGrader.config_file=autograder/nbgrader_config.py",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])),
        )
        if done.returncode != 0:
            _fail(f"nbgrader generate_assignment {args.lab} failed:\n{done.stderr[-2000:]}")
        print(f"generated course/{args.lab}/")
    print("next: docs/maintainers.md, 'Adding a lab' (README's labs table, prose, checks, bugs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
