"""The course's layout, read from ``nbgrader_config.py`` (the one place that names the folders).

``SOURCE_DIR`` holds the nbgrader source notebooks, ``RELEASE_DIR`` what students get, and ``LABS``
maps each assignment (a folder of the source directory, in order) to its notebook's file name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from traitlets.config.loader import PyFileConfigLoader

CONFIG_FILE = Path(__file__).resolve().parents[1] / "nbgrader_config.py"


def _course_directory():
    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    return config.CourseDirectory


_course = _course_directory()
ROOT = Path(_course.root)
SOURCE_DIR = ROOT / _course.source_directory
RELEASE_DIR = ROOT / _course.release_directory


def discover_labs(source_dir: Path = SOURCE_DIR) -> Dict[str, str]:
    """``{assignment folder: notebook file}`` for every ``NN-name/`` folder, each with one notebook."""
    labs = {}
    for folder in sorted(p for p in source_dir.iterdir() if p.is_dir() and p.name[:2].isdigit()):
        notebooks = sorted(n.name for n in folder.glob("*.ipynb"))
        if len(notebooks) != 1:
            raise ValueError(f"{folder} must hold exactly one notebook, found {notebooks}")
        labs[folder.name] = notebooks[0]
    return labs


LABS = discover_labs()


def grading_limit(lab: str, name: str) -> int:
    """One of the grading box's limits for ``lab`` as ``nbgrader_config.py`` sets it (``HardenedExecute.<name>``,
    or its ``lab_limits`` entry for the lab), e.g. ``notebook_timeout`` in seconds; KeyError if it sets none."""
    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config().HardenedExecute
    per_lab = dict(config.get("lab_limits", {})).get(lab, {})
    if name in per_lab:
        return int(per_lab[name])
    if name not in config:
        raise KeyError(f"nbgrader_config.py sets no HardenedExecute.{name}")
    return int(config[name])


def graded_labs(source_dir: Path = SOURCE_DIR) -> List[str]:
    """Labs whose source notebook has graded cells (discovered, so new labs are included)."""
    from autograder.course.notebook import is_graded

    labs = []
    for lab, name in discover_labs(source_dir).items():
        nb = json.loads((source_dir / lab / name).read_text())
        if any(is_graded(c) for c in nb["cells"]):
            labs.append(lab)
    return labs
