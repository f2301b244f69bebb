"""The pieces of ``autograder/grade/`` talk through public names: no module reads another object's private member
(``x._name`` or ``x.__dict__`` where ``x`` is not ``self`` or ``cls``), so a renamed private member cannot silently break grading.
The executor hands its pieces a ``NotebookRun`` and a ``KernelPort`` (``autograder.grade.notebook_run``) instead.
``super()._name`` (a base class's hook) and ``os._exit`` (the standard library's public name) are allowed."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

GRADE = Path(__file__).resolve().parents[1] / "grade"
ALLOWED = {("os", "_exit")}


def private_reads(source: str, where: str = "<source>") -> List[str]:
    """``file:line: x._name`` for each read of a private member of an object other than ``self``/``cls``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr != "__dict__":
            continue  # a dunder is public (``__starter_of__``), but writing into another object's ``__dict__`` is not
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or (owner.id, node.attr) in ALLOWED):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(
            (
                node.lineno,
                node.col_offset,
                f"{where}:{node.lineno}: {ast.unparse(node)} uses a private member of another object",
            )
        )
    return [line for _, _, line in sorted(found)]


def test_no_module_of_grade_reads_another_objects_private_members():
    modules = sorted(GRADE.glob("*.py"))
    assert len(modules) > 10, f"expected the modules of autograder/grade/ under {GRADE}"
    found = [line for path in modules for line in private_reads(path.read_text(), f"{path.name}")]
    assert found == [], "use the NotebookRun or the KernelPort (autograder/grade/notebook_run.py):\n" + "\n".join(found)


def test_the_privacy_rule_finds_a_read_across_objects_and_allows_self_super_and_os_exit():
    source = (
        "class A:\n"
        "    def f(self, executor):\n"
        "        self._mine = executor._view\n"
        "        super()._hook()\n"
        "        os._exit(1)\n"
        "        return cls._x, self.run.view._cache, executor.__dict__\n"
    )
    assert private_reads(source, "a.py") == [
        "a.py:3: executor._view uses a private member of another object",
        "a.py:6: self.run.view._cache uses a private member of another object",
        "a.py:6: executor.__dict__ uses a private member of another object",
    ]
