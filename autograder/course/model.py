"""The lab model: what a graded lab asks for (its TODOs, their equivalents elsewhere in the package, its parts
and the graded cells that grade each part). Each lab declares one ``Lab`` in its folder's ``__init__.py``;
``autograder.labs.LABS`` collects them in order and everything else reads them from there.

An *edition* of the package (``autograder.editions.build``) leaves out, as stubs that raise
``TodoNotWritten``, a set of these functions:

- ``todos``: the reference implementation of each TODO of the lab (the answer);
- ``equivalents``: code elsewhere in the package that computes what a TODO computes, without calling
  the TODO (a student could delegate to it): e.g. for lab 03's decode growth every ``may_append``, for
  lab 05's ``compute_hash`` the module's own ``_chain_hash``; code a later lab's reference adds is an
  earlier lab's equivalent too (lab 09's ``ChunkedBlockManager._hits`` is lab 05's). ``python -m
  autograder.editions.routes`` finds what is not declared. Code that merely CALLS a TODO needs no entry: in an
  edition it reaches the stub.

A part whose checks need another part's reference (``own_box``) is graded in a box of its own, whose
edition leaves out that part only; every other part is graded in the lab's main box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

#: Paths (inside ``paged_kv/``) that several labs' stubs name.
PREFIX = "cache/prefix_cache.py"
FORK = "cache/forking.py"


@dataclass(frozen=True)
class Stub:
    """One function (or Triton kernel) an edition leaves out: ``module`` is its path inside ``paged_kv/``,
    ``qualname`` its name there (``Class.method`` for a method), ``why`` a few words for its message."""

    module: str
    qualname: str
    why: str = ""

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def dotted(self) -> str:
        """``paged_kv.cache.prefix_cache.BlockManager.allocate``."""
        return "paged_kv." + self.module[: -len(".py")].replace("/", ".") + "." + self.qualname


@dataclass(frozen=True)
class Part:
    """A part of a lab: the TODOs graded together, the graded cells that grade them, and whether its checks
    need the other parts' references (then it is graded in a box of its own)."""

    name: str
    todos: Tuple[Stub, ...]
    cells: Tuple[str, ...]
    equivalents: Tuple[Stub, ...] = ()
    own_box: bool = False

    @property
    def stubs(self) -> Tuple[Stub, ...]:
        return self.todos + self.equivalents


@dataclass(frozen=True)
class Lab:
    """A graded lab as every part of the grading side reads it: ``lab`` is its id (its folder under
    ``solutions/``, e.g. ``05-prefix-cache``; ``package_name`` gives its folder under ``autograder/labs/``),
    ``title`` a few words, ``parts`` its TODOs and graded cells; ``todo_object`` / ``todo_method`` name what
    the notebook defines for the checks (a function or class, and the method a TODO is, if any)."""

    lab: str
    title: str
    parts: Tuple[Part, ...]
    todo_object: str = ""
    todo_method: Optional[str] = None

    @property
    def stubs(self) -> Tuple[Stub, ...]:
        return tuple(s for part in self.parts for s in part.stubs)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"lab {self.lab} has no part {name!r}; its parts are {[p.name for p in self.parts]}")

    def part_of_cell(self, grade_id: str) -> Optional[Part]:
        return next((p for p in self.parts if grade_id in p.cells), None)

    @property
    def boxed_parts(self) -> Tuple[Part, ...]:
        return tuple(p for p in self.parts if p.own_box)
