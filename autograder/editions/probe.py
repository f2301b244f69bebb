"""Try every route to the functions an edition leaves out, inside a process that imports that edition.

``python -m autograder.editions.probe NAME...`` (run with the edition first on ``PYTHONPATH``) resolves each
dotted name (``paged_kv.cache.prefix_cache.BlockManager.allocate``) by several routes that no rule about
names can list (an attribute chain, ``functools.reduce(getattr, ...)``, ``operator.attrgetter``, pattern
matching, a function's ``__globals__`` to ``__import__`` and ``sys.modules``, ``gc``), calls what it finds
with placeholder arguments and prints, as JSON, every route that did NOT end in the edition's
``TodoNotWritten``. An empty list means nothing there implements them.
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import json
import operator
import sys
from typing import Any, Callable, Dict, List, Tuple


def _split(dotted: str) -> Tuple[str, List[str]]:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            importlib.import_module(".".join(parts[:cut]))
            return ".".join(parts[:cut]), parts[cut:]
        except ImportError:
            continue
    raise ImportError(dotted)


def _call(found: Any) -> Any:
    """Call ``found`` with a placeholder for each argument it needs (a stub raises before it reads them); a
    Triton kernel stub is launched (``kernel[grid](...)``)."""
    if isinstance(found, property):  # reached through its class: the getter is the implementation
        found = found.fget
    kernel = getattr(found, "fn", None) if callable(getattr(type(found), "__getitem__", None)) else None
    function = kernel or found
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    needed = [p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return (found[(1,)] if kernel else found)(*[None] * len(needed))


def _match_attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name)`` written as a class pattern (no attribute node, no getattr call)."""
    scope = {"obj": obj}
    exec(compile(f"match obj:\n    case object({name}=found):\n        pass\n", "<match>", "exec"), scope)  # noqa: S102
    return scope["found"]


def _safe(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)`` for any object gc holds (some raise on a look)."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def routes(dotted: str) -> Dict[str, Callable[[], Any]]:
    """``{route: how it finds the object}`` for one dotted name."""
    module_name, names = _split(dotted)
    module = importlib.import_module(module_name)
    package = importlib.import_module("paged_kv")
    inside = module_name.split(".")[1:] + names

    def through_globals() -> Any:
        anchor = package.prefill  # any function of the package: its globals lead everywhere
        match anchor:
            case object(__globals__={"__builtins__": {"__import__": importer}}):
                system = importer("sys")
        return functools.reduce(getattr, names, system.modules[module_name])

    def through_gc() -> Any:
        qualname = ".".join(names)
        return next(
            o
            for o in gc.get_objects()
            if _safe(o, "__qualname__") == qualname and _safe(o, "__module__") == module_name
        )

    return {
        "getattr chain": lambda: functools.reduce(getattr, names, module),
        "functools.reduce(getattr) from the package": lambda: functools.reduce(getattr, inside, package),
        "operator.attrgetter": lambda: operator.attrgetter(".".join(inside))(package),
        "pattern matching": lambda: functools.reduce(_match_attribute, names, module),
        "__globals__ to sys.modules": through_globals,
        "gc": through_gc,
    }


def probe(names: List[str]) -> List[str]:
    from paged_kv.cache.todo import TodoNotWritten

    from autograder.editions.build import LEFT_OUT

    problems = []
    for dotted in names:
        for route, resolve in routes(dotted).items():
            try:
                found = resolve()
            except StopIteration:
                continue  # gc holds no such object: nothing to reach that way
            except Exception as error:  # noqa: BLE001
                problems.append(f"{dotted} via {route}: could not be reached ({type(error).__name__}: {error})")
                continue
            try:
                _call(found)
            except TodoNotWritten as error:
                if LEFT_OUT not in str(error):
                    problems.append(f"{dotted} via {route}: raised TodoNotWritten without the edition's message")
                continue
            except Exception as error:  # noqa: BLE001
                problems.append(f"{dotted} via {route}: ran and raised {type(error).__name__}: {str(error)[:200]}")
                continue
            problems.append(f"{dotted} via {route}: ran and returned (an implementation is there)")
    return problems


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1:])))
