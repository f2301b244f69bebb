"""Each lab's pytest marker (``lab05``, as MiniTorch marks ``task0_1``) and which tests are the lab's: the root
``conftest.py`` marks every collected test with the markers of the labs it belongs to, so that
``pytest -m lab05`` (``make check LAB=05-prefix-cache``) runs one lab's tests and no file is marked by hand.

A test belongs to a lab (``labs_of``) when

- it lives in the lab's folders: ``autograder/labs/labNN_name/`` (its catalogue, its graders' tests) or
  ``solutions/NN-name/`` (its notebook, run by nbval);
- it is parametrized with the lab: a parameter that is the lab's id (``"05-prefix-cache"``), an object of the lab's
  package (one of its checks), or an id naming it (``lab05-check_prefix_hits``);
- it is a package test (``tests/<layer>/test_<module>*.py``) of a module that holds one of the lab's TODOs
  (``tests/cache/test_manager.py``: labs 02, 03 and 04) or that the lab alone uses (its notebook or its grader
  names it: ``tests/lab/test_fork_lab.py``, lab 08), or one that imports a module holding the lab's TODOs
  (``tests/kernels/test_triton_attention.py`` imports lab 06's kernels).

Lab ids come from ``solutions/`` (``autograder.course.layout``); the TODOs from the lab model (``autograder.labs``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Set

from autograder.course.layout import SOURCE_DIR, discover_labs

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "paged_kv"
LAYERS = ("cache", "engine", "kernels", "lab")  # tests/<layer>/: the package's tests, one folder per layer
_LAB_ID = re.compile(r"\d\d-[a-z0-9-]+")
_PACKAGE_PATH = re.compile(r"paged_kv\.(cache|engine|kernels|lab)\.(\w+)")
_FROM_PACKAGE = re.compile(r"from\s+paged_kv\.(cache|engine|kernels|lab)\s+import\s+\(?([\w\s,]+)")


def marker(lab: str) -> str:
    """``05-prefix-cache`` -> ``lab05``: the lab's pytest marker."""
    if not isinstance(lab, str) or not _LAB_ID.fullmatch(lab):
        raise ValueError(f"{lab!r} is not a lab id; a lab id is its folder under solutions/, e.g. '05-prefix-cache'")
    return f"lab{lab[:2]}"


@functools.lru_cache(maxsize=1)
def lab_ids() -> tuple:
    """Every lab of the course (its folders under ``solutions/``, lab 00 included), in order."""
    return tuple(discover_labs(SOURCE_DIR))


def lab_of_marker(name: str) -> str:
    """``lab05`` (or ``05-prefix-cache``) -> ``05-prefix-cache``; ValueError naming the labs otherwise."""
    found = [lab for lab in lab_ids() if name in (lab, marker(lab))]
    if not found:
        raise ValueError(f"{name!r} is no lab; the labs are {', '.join(lab_ids())}")
    return found[0]


def _package_name(lab: str) -> str:
    return "lab" + lab.replace("-", "_")


@functools.lru_cache(maxsize=1)
def _todo_modules() -> Dict[str, FrozenSet[str]]:
    """``{module inside paged_kv/ without .py: labs}``: the labs whose TODOs it holds."""
    from autograder.labs import LABS

    owners: Dict[str, Set[str]] = {}
    for lab in LABS:
        for part in lab.parts:
            for todo in part.todos:
                owners.setdefault(todo.module[: -len(".py")], set()).add(lab.lab)
    return {module: frozenset(labs) for module, labs in owners.items()}


@functools.lru_cache(maxsize=1)
def _module_labs() -> Dict[str, FrozenSet[str]]:
    """``{module inside paged_kv/ without .py: labs}``: the labs whose TODOs it holds, or the one lab that uses it."""
    owners: Dict[str, Set[str]] = {module: set(labs) for module, labs in _todo_modules().items()}
    users: Dict[str, Set[str]] = {}
    for lab in lab_ids():
        for module in _modules_used(lab):
            users.setdefault(module, set()).add(lab)
    for module, labs in users.items():
        if len(labs) == 1 and module not in owners:
            owners[module] = set(labs)
    return {module: frozenset(labs) for module, labs in owners.items()}


def _modules_used(lab: str) -> Set[str]:
    """Modules of the package (``lab/fork_lab``) that the lab's notebook or its grader's modules name."""
    texts = [p.read_text(encoding="utf-8") for p in (SOURCE_DIR / lab).glob("*.ipynb")]
    texts += [p.read_text(encoding="utf-8") for p in (REPO / "autograder" / "labs" / _package_name(lab)).glob("*.py")]
    return _modules_named(texts)


def _modules_named(texts: Iterable[str]) -> Set[str]:
    """Modules of the package that ``texts`` (code, or a notebook's JSON) name by a dotted path or import from."""
    found: Set[str] = set()
    for text in texts:
        text = text.replace("\\n", "\n")
        found |= {f"{layer}/{name}" for layer, name in _PACKAGE_PATH.findall(text)}
        for layer, names in _FROM_PACKAGE.findall(text):
            found |= {f"{layer}/{name.strip()}" for name in names.split(",") if name.strip()}
    return {module for module in found if (PACKAGE / f"{module}.py").is_file()}


def labs_of_path(path: Path) -> Set[str]:
    """The labs a test file belongs to by where it is (see the module doc)."""
    try:
        parts = Path(path).resolve().relative_to(REPO).parts
    except ValueError:
        return set()
    if len(parts) >= 3 and parts[:2] == ("autograder", "labs"):
        return {lab for lab in lab_ids() if _package_name(lab) == parts[2]}
    if len(parts) >= 2 and parts[0] == "solutions":
        return {parts[1]} & set(lab_ids())
    if len(parts) == 3 and parts[0] == "tests" and parts[1] in LAYERS and parts[2].startswith("test_"):
        stem = parts[2][len("test_") : -len(".py")]
        modules = [m for m in _module_labs() if m.startswith(parts[1] + "/") and stem.startswith(m.split("/")[1])]
        found = set(_module_labs()[max(modules, key=len)]) if modules else set()
        for module in _modules_named([Path(path).read_text(encoding="utf-8")]) & set(_todo_modules()):
            found |= _todo_modules()[module]
        return found
    return set()


def labs_of_params(params: Mapping[str, Any], test_id: str = "") -> Set[str]:
    """The labs a parametrized test belongs to by its parameters and its id (see the module doc)."""
    found: Set[str] = set()
    for value in _flat(params.values()):
        if isinstance(value, str) and value in lab_ids():
            found.add(value)
        module = getattr(value, "__module__", None) or getattr(value, "__name__", None)
        if isinstance(module, str):
            found |= {lab for lab in lab_ids() if module.startswith(f"autograder.labs.{_package_name(lab)}")}
    for lab in lab_ids():
        if re.search(rf"(?<![\w]){marker(lab)}[-_]|(?<![\w-]){re.escape(lab)}(?![\w-])", test_id):
            found.add(lab)
    return found


def _flat(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, (tuple, list)):
            yield from _flat(value)
        else:
            yield value
