"""The course checkout the hub runs from, closed to its students: ``make hub`` does it before anything starts.

A student's server imports one edition of the package (``hub.package``), but it runs on the same machine as
the checkout: were the checkout open to every account, a student's cell could read ``solutions/`` or, taking
the edition off ``sys.path``, import the whole ``paged_kv`` through the course environment's editable install.
``close`` gives each of ``CLOSED`` (top-level folders of the checkout) the instructor's group and mode 0750:
its owner (root, who runs the hub and grades) and the instructor (Formgrader, through ``hub.mounts``) may
read it, no other account may enter it. The rest of the checkout (the course environment ``.venv``, the
released notebooks, ``student-lab``) stays as it was. ``open_to_students`` lists what a student could still
read: ``make hub`` refuses to start while it lists anything.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Callable, List

from hub.layout import REPO

CLOSED = ("solutions", "paged_kv", "autograder", "tests", ".git")


class CheckoutOpen(RuntimeError):
    """A folder of the checkout with answers in it is open to the hub's students; the message says which."""


def close(instructor_group: str, repo: Path = REPO) -> List[str]:
    """Close ``CLOSED`` to every account but the owner and ``instructor_group``; returns the folders changed."""
    gid = grp.getgrnam(instructor_group).gr_gid
    return _closed_to(repo, lambda info: gid)


def keep_closed(repo: Path = REPO) -> List[str]:
    """Give ``CLOSED`` back to its owner's own group, still 0750 (``make hub-clean``: the instructor's group is
    removed with the accounts, and its id could be handed to a later account). Returns the folders changed."""
    return _closed_to(repo, _owners_group)


def _owners_group(info: os.stat_result) -> int:
    try:
        return pwd.getpwuid(info.st_uid).pw_gid
    except KeyError:
        return 0


def _closed_to(repo: Path, group_of: Callable[[os.stat_result], int]) -> List[str]:
    """Give each folder of ``CLOSED`` the group ``group_of`` its stat names, and mode 0750; the folders changed."""
    changed = []
    for name in CLOSED:
        path = repo / name
        if not path.is_dir() or path.is_symlink():
            continue
        info = path.stat()
        gid = group_of(info)
        if info.st_gid != gid or stat.S_IMODE(info.st_mode) != 0o750:
            os.chown(path, -1, gid)
            os.chmod(path, 0o750)
            changed.append(str(path))
    return changed


def open_to_students(repo: Path = REPO) -> List[str]:
    """The folders of ``CLOSED`` that an account outside their group may enter."""
    return [
        str(repo / name)
        for name in CLOSED
        if (repo / name).is_dir() and (repo / name).stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)
    ]


def require_closed(repo: Path = REPO) -> None:
    """Raise CheckoutOpen when a student could still read a folder of ``CLOSED``."""
    left = open_to_students(repo)
    if left:
        raise CheckoutOpen(
            f"{', '.join(left)} can be read by every account, so a student's server could read the "
            "solutions or import the whole course package: `make hub` closes them (chmod 0750, the "
            "instructor's group); check that this file system lets root change their modes"
        )
