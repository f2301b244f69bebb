"""``requirements-student.txt``: the pins of ``requirements-lock.txt`` that a student's install needs.

The developer lock holds everything ``make test`` and the hub need (JupyterHub and its authenticators,
Playwright, pytest, hypothesis, nbval). A student needs the course package's own dependencies and its
``course`` extra (JupyterLab, nbgrader, Triton) and what those need in turn: this script takes that closure from
the installed environment's metadata (``importlib.metadata``, markers evaluated here) and keeps the lock's
lines for it, in the lock's order. A class handout ships it as its ``requirements-lock.txt``
(``autograder/handout/handout.py``). ``make lock`` rewrites it; ``--check`` exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Iterable, List, Set

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-lock.txt"
STUDENT_LOCK = ROOT / "requirements-student.txt"
EXTRAS = ("course",)
HEADER = """\
# The pins of requirements-lock.txt a student's install needs: the course package's dependencies and its
# `course` extra (JupyterLab, nbgrader, Triton), with what they need (written by tools/student_lock.py,
# `make lock`). A class handout installs these (its Makefile's `make lab`, which takes torch's CPU build from
# PyTorch's index on Linux without an NVIDIA driver: PyPI's Linux build includes CUDA).
"""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _roots() -> List[Requirement]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in EXTRAS:
        names += project["optional-dependencies"][extra]
    return [Requirement(text) for text in names]


def closure(roots: Iterable[Requirement]) -> Set[str]:
    """The normalised names of ``roots`` and of everything they require, as installed here."""
    seen: Set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in roots]
    while todo:
        requirement, extras = todo.pop()
        name = _key(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if name in seen and not extras:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(requirement.name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            inner = Requirement(text)
            if (
                inner.marker is None
                or inner.marker.evaluate({"extra": ""})
                or any(inner.marker.evaluate({"extra": extra}) for extra in extras)
            ):
                todo.append((Requirement(str(inner).split(";")[0]), frozenset(inner.extras)))
    return seen


def student_lines(lock_text: str, names: Set[str]) -> List[str]:
    """The ``name==version`` lines of ``lock_text`` whose name is in ``names``, in the lock's order."""
    kept = []
    for line in lock_text.splitlines():
        pin = line.split("==", 1)
        if len(pin) == 2 and not line.startswith("#") and _key(pin[0].strip()) in names:
            kept.append(line)
    return kept


def render() -> str:
    return HEADER + "\n".join(student_lines(LOCK.read_text(), closure(_roots()))) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        stale = not STUDENT_LOCK.exists() or STUDENT_LOCK.read_text() != text
        if stale:
            print(f"{STUDENT_LOCK.name} is stale: run `make lock` (or python tools/student_lock.py)", file=sys.stderr)
        return 1 if stale else 0
    STUDENT_LOCK.write_text(text)
    print(f"wrote {STUDENT_LOCK} ({text.count(chr(10)) - HEADER.count(chr(10))} pins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
