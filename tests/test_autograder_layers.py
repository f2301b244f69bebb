"""The grading side's layers, enforced by reading every import of every shipped module (function-local ones
included: a cycle hidden inside a function is still a cycle).

From the bottom: ``agent`` (the only code beside the student: its wire format and nothing else), ``course``
(layout, the lab model, the notebook reader), ``verdict`` (how a cell's score is decided), ``labs`` (each lab's
declaration and checks), ``editions`` (the package without a lab's answers), ``box`` (isolation and the
nbgrader executor), the instructor's verbs in the order they build on each other (``handout``, ``feedback``,
``collect``, ``grade``, ``exchange``: the hub's), ``platforms`` (Gradescope, PrairieLearn), and on top ``proof`` (the
simulated class and ``make grader-report``: nothing shipped imports it). A package imports only those below it. Tests (``autograder/tests``, each lab's ``tests/``) may import anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from import_walk import import_statements

AUTOGRADER = Path(__file__).resolve().parents[1] / "autograder"
ORDER = (
    "agent",
    "course",
    "verdict",
    "labs",
    "editions",
    "box",
    "handout",
    "feedback",
    "collect",
    "grade",
    "exchange",
    "platforms",
    "proof",
)
MAY_IMPORT = {name: set(ORDER[: i + 1]) for i, name in enumerate(ORDER)}
AGENT_MAY_IMPORT = {"autograder.agent.wire"}


def violations(package: str, source: str, where: str = "<source>") -> List[str]:
    """Every import in ``source`` (a module of ``autograder.<package>``) the rule refuses, as readable lines."""
    found = []
    for statement in import_statements(source):
        if statement.level:
            found.append(
                f"{where}:{statement.lineno}: relative import; name the package (from autograder.<package>...)"
            )
            continue
        if statement.module == "autograder":
            names = [f"autograder.{name}" for name in statement.names]
        else:
            names = statement.reached()
        for name in names:
            parts = name.split(".")
            if parts[0] != "autograder" or len(parts) < 2:
                continue
            if (
                package == "agent"
                and name not in AGENT_MAY_IMPORT
                and not (
                    statement.module == "autograder.agent"
                    and all(f"autograder.agent.{name}" in AGENT_MAY_IMPORT for name in statement.names)
                )
            ):
                found.append(
                    f"{where}:{statement.lineno}: the agent imports {name} (only its wire format may be imported)"
                )
            elif parts[1] in MAY_IMPORT and parts[1] not in MAY_IMPORT[package]:
                found.append(
                    f"{where}:{statement.lineno}: autograder.{package} imports autograder.{parts[1]}, which lies "
                    f"above it ({' < '.join(ORDER)})"
                )
    return found


def _shipped(package: str) -> List[Path]:
    return sorted(p for p in (AUTOGRADER / package).rglob("*.py") if "tests" not in p.relative_to(AUTOGRADER).parts)


def test_every_package_of_the_grading_side_has_a_place_in_the_order():
    folders = {p.name for p in AUTOGRADER.iterdir() if (p / "__init__.py").exists()}
    assert folders - {"tests"} == set(ORDER), f"packages {sorted(folders)}, the order knows {ORDER}"


@pytest.mark.parametrize("package", ORDER)
def test_each_package_imports_only_what_lies_below_it(package):
    modules = _shipped(package)
    assert modules, f"autograder/{package}/ has no modules"
    problems = [
        line
        for path in modules
        for line in violations(package, path.read_text(), str(path.relative_to(AUTOGRADER.parent)))
    ]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "package, source, expected",
    [
        ("verdict", "def f():\n    from autograder.box import limits\n", "autograder.verdict imports autograder.box"),
        ("course", "from autograder.labs import LABS", "autograder.course imports autograder.labs"),
        ("agent", "from autograder.verdict import channel", "the agent imports autograder.verdict"),
        ("agent", "from autograder.agent import serve", "the agent imports autograder.agent"),
        ("box", "from autograder import grade", "autograder.box imports autograder.grade"),
        ("labs", "from .checking import call", "relative import"),
    ],
)
def test_the_rule_catches_a_planted_violation(package, source, expected):
    found = violations(package, source)
    assert len(found) == 1 and expected in found[0], found


def test_the_rule_lets_a_package_import_what_lies_below():
    source = (
        "from autograder.course.notebook import cell_text\nfrom autograder.agent import wire\n"
        "import autograder.verdict.channel\nimport json\n"
    )
    assert violations("labs", source) == []
    assert violations("agent", "from autograder.agent import wire\nimport socket\n") == []
