"""The graded labs, one folder each: ``autograder/labs/labNN_<name>/`` holds the lab's declaration (``LAB`` in
its ``__init__.py``: TODOs, parts, graded cells), its checks (``checks.py``, what the hidden tests import) and
its ``tests/`` (its catalogue of bugs and variants, its own tests; never shipped to a grader).

A lab's id is its folder under ``solutions/`` (``05-prefix-cache``); every other spelling derives from it
here: ``package_name`` (``lab05_prefix_cache``), ``cell_prefix`` (``lab05-``). ``LABS`` lists the labs in
course order, read from the folders, so adding a lab adds a folder and nothing here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Dict, Tuple

from autograder.course.model import Lab, Part, Stub

__all__ = ["LABS", "BY_ID", "Lab", "Part", "Stub", "by_id", "package_name", "cell_prefix", "checks_module"]

HERE = Path(__file__).resolve().parent
_PACKAGE = re.compile(r"lab\d\d_[a-z0-9_]+")


def package_name(lab: str) -> str:
    """``05-prefix-cache`` -> ``lab05_prefix_cache`` (the lab's folder under ``autograder/labs/``)."""
    if not isinstance(lab, str) or not re.fullmatch(r"\d\d-[a-z0-9-]+", lab):
        raise ValueError(f"{lab!r} is not a lab id; a lab id is its folder under solutions/, e.g. '05-prefix-cache'")
    return "lab" + lab.replace("-", "_")


def cell_prefix(lab: str) -> str:
    """``05-prefix-cache`` -> ``lab05-``: how the lab's graded cells' ``grade_id``s begin."""
    return "lab" + package_name(lab)[3:5] + "-"


def checks_module(lab: str) -> str:
    """The dotted name of the lab's checks: ``autograder.labs.lab05_prefix_cache.checks``."""
    return f"{__name__}.{package_name(lab)}.checks"


def _discover() -> Tuple[Lab, ...]:
    labs = []
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and _PACKAGE.fullmatch(p.name)):
        lab = getattr(importlib.import_module(f"{__name__}.{folder.name}"), "LAB", None)
        if not isinstance(lab, Lab):
            raise TypeError(f"autograder/labs/{folder.name}/__init__.py must declare LAB = Lab(...)")
        if package_name(lab.lab) != folder.name:
            raise ValueError(
                f"autograder/labs/{folder.name} declares lab {lab.lab!r}, whose folder is "
                f"{package_name(lab.lab)}: rename one of them"
            )
        labs.append(lab)
    return tuple(labs)


LABS: Tuple[Lab, ...] = _discover()
BY_ID: Dict[str, Lab] = {lab.lab: lab for lab in LABS}


def by_id(lab: str) -> Lab:
    """The declaration of lab ``lab`` (``05-prefix-cache``); KeyError naming the graded labs otherwise."""
    if lab not in BY_ID:
        raise KeyError(f"{lab!r} is not a graded lab; the graded labs are {sorted(BY_ID)}")
    return BY_ID[lab]
