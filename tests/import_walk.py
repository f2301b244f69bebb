"""Every import statement of a module's source, read with ast (function-local ones included: an import hidden in a
function still ties two layers). The one walker under both layer rules: ``test_layers`` (``paged_kv``) and
``test_autograder_layers`` (``autograder``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class ImportStatement:
    """``import a.b`` (``module`` None, ``names`` ("a.b",)) or ``from a.b import c, d`` (``module`` "a.b", ``names``
    ("c", "d")); ``level`` counts the dots of a relative import."""

    lineno: int
    module: str | None
    names: Tuple[str, ...]
    level: int = 0

    def reached(self) -> List[str]:
        """The dotted names it imports from: ``module`` for a ``from`` import, else each imported module."""
        return [self.module] if self.module is not None else list(self.names)


def import_statements(source: str) -> List[ImportStatement]:
    """Every ``import`` and ``from ... import`` in ``source``, in the order ast walks them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found.append(ImportStatement(node.lineno, node.module or "", tuple(a.name for a in node.names), node.level))
        elif isinstance(node, ast.Import):
            found.append(ImportStatement(node.lineno, None, tuple(a.name for a in node.names)))
    return found
