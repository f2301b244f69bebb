"""The instructor's course folder on the hub: what nbgrader needs of the repository, owned by the instructor.

``prepare_course_folder`` copies the repository's ``solutions/`` (nbgrader's source) and ``course/`` (its
release) into ``~INSTRUCTOR/paged-kv-course``, keeping that folder's ``autograder/work/`` (the gradebook,
submissions, feedback) as it is, and gives it all to the instructor. ``give_to_instructor`` is run again
after each root-run grading step, so the instructor's Formgrader can write the gradebook.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from hub.layout import REPO

COPIED = ("solutions", "course")


def give_to_instructor(folder: Path, instructor: str) -> None:
    """chown -R ``folder`` to ``instructor`` (and the instructor's group); no other account may read it."""
    entry = pwd.getpwnam(instructor)
    for path in [folder, *Path(folder).rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    os.chmod(folder, 0o700)


def prepare_course_folder(course_root: Path, instructor: str, repo: Path = REPO) -> Path:
    """Fill ``course_root`` from ``repo`` (see the module's docstring); return it."""
    course_root = Path(course_root)
    if not (repo / "solutions").is_dir():
        raise FileNotFoundError(f"{repo} has no solutions/ folder: not the course repository")
    course_root.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        target = course_root / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(repo / name, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (course_root / "autograder" / "work").mkdir(parents=True, exist_ok=True)
    give_to_instructor(course_root, instructor)
    return course_root
