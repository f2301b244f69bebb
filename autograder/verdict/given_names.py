"""What the lab's given and test cells make of names: which they import (and from where), which lead to the
reference (``paged_kv``'s implementation of a TODO), which are modules, which the TODOs must define. The provenance
checks (``autograder.verdict.provenance``) read a submission against it."""

from __future__ import annotations

import ast
import importlib
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Sequence, Set

from autograder.verdict.notebook import GIVEN, GRADED, Cell, statement_binds
from autograder.verdict.provenance_rules import DENIED_COURSE_NAMES


@dataclass
class LabNames:
    """What the given cells make of names: imports (with their paths), and which lead to the reference."""

    given: Set[str] = field(default_factory=set)  # every name a given or test cell binds
    given_imports: Dict[str, str] = field(default_factory=dict)  # name -> dotted path
    given_functions: Set[str] = field(default_factory=set)  # defs and classes of given cells
    reference_bearing: Set[str] = field(default_factory=set)  # given names leading to a reference
    module_names: Set[str] = field(default_factory=set)  # given names bound to modules
    todo_names: Set[str] = field(default_factory=set)  # names the answer cells must define
    course_paths: Set[str] = field(default_factory=set)  # paged_kv paths the given cells import
    reference_codes: Set[Any] = field(default_factory=set)  # code objects of the references


def lab_names(cells: Sequence[Cell], references: Iterable[Any], todo_names: Iterable[str]) -> LabNames:
    """Classify the names of the given and test cells (see ``LabNames``); ``references`` are the lab's
    reference implementations (its graders' ``@grades`` and its starters' TODOs)."""
    names = LabNames(todo_names=set(todo_names))
    reference_codes = {c for c in map(code_of, references) if c is not None}
    names.reference_codes = reference_codes
    for cell in cells:
        if cell.kind not in (GIVEN, GRADED) or cell.tree is None:
            continue
        for node in cell.tree.body:
            for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
                if isinstance(sub, ast.Import):
                    for alias in sub.names:
                        bound = (alias.asname or alias.name).split(".")[0]
                        names.given_imports[bound] = alias.name if alias.asname else alias.name.split(".")[0]
                elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                    for alias in sub.names:
                        names.given_imports[alias.asname or alias.name] = f"{sub.module}.{alias.name}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.given_functions.add(node.name)
            names.given |= statement_binds(node)
    for name, path in names.given_imports.items():
        obj = resolve(path)
        if isinstance(obj, types.ModuleType):
            names.module_names.add(name)
        if path.split(".")[0] == "paged_kv":
            names.course_paths.add(path)
            if (
                isinstance(obj, types.ModuleType)
                or name in DENIED_COURSE_NAMES
                or path.rsplit(".", 1)[-1] in DENIED_COURSE_NAMES
                or leads_to(obj, reference_codes)
            ):
                names.reference_bearing.add(name)
    return names


def resolve(path: str) -> Any:
    """The object at a dotted ``path`` (the longest importable module, then attributes); None when there is none."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def code_of(obj: Any):
    """The code object behind a function, method, property or Triton kernel (None for anything else)."""
    for attr in ("__func__", "fget", "fn"):
        inner = getattr(obj, attr, None)
        if inner is not None and inner is not obj:
            return code_of(inner)
    return getattr(obj, "__code__", None)


def leads_to(obj: Any, codes: Set[Any], depth: int = 0, seen: Optional[Set[int]] = None) -> bool:
    """True when ``obj`` is a reference implementation, a class holding one, or a function that calls one."""
    seen = set() if seen is None else seen
    if obj is None or id(obj) in seen or depth > 6:
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        for klass in obj.__mro__:
            for value in vars(klass).values():
                code = code_of(value)
                if code is not None and code in codes:
                    return True
        return False
    code = code_of(obj)
    if code is None:
        return False
    if code in codes:
        return True
    function = getattr(obj, "__func__", obj)
    globals_ = getattr(function, "__globals__", {})
    module = getattr(function, "__module__", "") or ""
    for name in code.co_names:
        value = globals_.get(name)
        if value is None or not (getattr(value, "__module__", "") or "").startswith("paged_kv"):
            continue
        if (getattr(value, "__module__", "") or "") == module or isinstance(value, type) or callable(value):
            if leads_to(value, codes, depth + 1, seen):
                return True
    return False
