"""The course checkout the hub runs from, closed to its students: ``make hub`` does it before anything starts.

A student's server imports one edition of the package (``hub.package``), but it runs on the same machine as
the checkout: were the checkout open to every account, a student's cell could read ``solutions/``, the hidden
tests in what ``make gradescope`` and ``make prairielearn`` wrote to ``dist/``, a screenshot of a solved lab in
``test-artifacts/``, or, taking the edition off ``sys.path``, import the whole ``paged_kv`` through the course
environment's editable install. So the checkout is closed by construction: every entry at its top (folders,
files, hidden ones, build outputs that do not exist yet when a later ``make`` writes them there) but ``OPEN`` gets
the instructor's group and mode 0750 (a file 0640): its owner (root, who runs the hub and grades) and the
instructor (Formgrader, through ``hub.mounts``) may read it, no other account may enter it. ``OPEN`` is what a
student's server runs from the checkout: the course environment ``.venv``, which holds no answer (its install of
the package is editable: a path to the closed ``paged_kv/``). A link at the top is never followed (its target
is not the checkout's to change).

``open_to_students`` lists what a student could still read (an entry that others may read or enter, a link to
one, a copy of the package installed into the course environment): ``make hub`` refuses to start while it lists
anything, and ``require_closable`` refuses before any account is made where closing cannot help (a link).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import sys
import sysconfig
from pathlib import Path
from typing import Callable, List

from hub.layout import REPO

OPEN = (".venv",)
OTHERS = stat.S_IROTH | stat.S_IWOTH | stat.S_IXOTH


class CheckoutOpen(RuntimeError):
    """A path of the checkout with answers in it is open to the hub's students; the message says which."""


def closed_entries(repo: Path = REPO) -> List[Path]:
    """Every entry at the top of the checkout that no student needs: all but ``OPEN``."""
    return sorted(path for path in Path(repo).iterdir() if path.name not in OPEN)


def close(instructor_group: str, repo: Path = REPO) -> List[str]:
    """Close every entry of ``closed_entries`` to every account but the owner and ``instructor_group``; returns
    those changed."""
    gid = grp.getgrnam(instructor_group).gr_gid
    return _closed_to(repo, lambda info: gid)


def keep_closed(repo: Path = REPO) -> List[str]:
    """Give the closed entries back to their owner's own group, still closed (``make hub-clean``: the instructor's
    group is removed with the accounts, and its id could be handed to a later account). Returns those changed."""
    return _closed_to(repo, _owners_group)


def _owners_group(info: os.stat_result) -> int:
    try:
        return pwd.getpwuid(info.st_uid).pw_gid
    except KeyError:
        return 0


def _closed_mode(info: os.stat_result) -> int:
    """0750 for a folder or a file its owner may run, else 0640."""
    return 0o750 if stat.S_ISDIR(info.st_mode) or info.st_mode & stat.S_IXUSR else 0o640


def _closed_to(repo: Path, group_of: Callable[[os.stat_result], int]) -> List[str]:
    """Give each entry of ``closed_entries`` the group ``group_of`` its stat names and its closed mode (a link is
    left as it is: ``open_to_students`` judges it); those changed."""
    changed = []
    for path in closed_entries(repo):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        gid, mode = group_of(info), _closed_mode(info)
        if info.st_gid != gid or stat.S_IMODE(info.st_mode) != mode:
            os.chown(path, -1, gid, follow_symlinks=False)
            os.chmod(path, mode)
            changed.append(str(path))
    return changed


def open_to_students(repo: Path = REPO, environment: Path = Path(sys.prefix)) -> List[str]:
    """What an account outside the checkout's owner and group may read: each closed entry others may read or enter
    (a link: its target), and a copy of the package installed into the course ``environment``."""
    left = [str(path) + (" (a link)" if path.is_symlink() else "") for path in closed_entries(repo) if _others(path)]
    return left + installed_copies(environment)


def _others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & OTHERS)  # a link's target: what reading through it reaches
    except OSError:  # a dangling link reaches nothing
        return False


def installed_copies(environment: Path = Path(sys.prefix)) -> List[str]:
    """The course package's folders in the course environment's site-packages (a non-editable install copies the
    whole package there, every answer in it, open to every account that runs the environment)."""
    site = Path(sysconfig.get_paths(vars={"base": str(environment), "platbase": str(environment)})["purelib"])
    return [str(site / name) for name in ("paged_kv", "autograder") if (site / name).is_dir()]


def require_closable(repo: Path = REPO, environment: Path = Path(sys.prefix)) -> None:
    """Raise CheckoutOpen, before anything is made, where closing the checkout cannot close it: a link at its top
    to something others may read (``close`` never follows a link), a copy of the package in the environment."""
    links = [f"{path} (a link)" for path in closed_entries(repo) if path.is_symlink() and _others(path)]
    left = links + installed_copies(environment)
    if left:
        raise CheckoutOpen(
            f"{', '.join(left)} can be read by every account and `make hub` cannot close it: move what a link "
            "points to into the checkout or remove the link; install the course package editable (`make env`)"
        )


def require_closed(repo: Path = REPO, environment: Path = Path(sys.prefix)) -> None:
    """Raise CheckoutOpen when a student could still read a path of the checkout (``open_to_students``)."""
    left = open_to_students(repo, environment)
    if left:
        raise CheckoutOpen(
            f"{', '.join(left)} can be read by every account, so a student's server could read the "
            "solutions, the hidden tests or the whole course package: `make hub` closes every entry of the "
            f"checkout but {', '.join(OPEN)} (mode 0750, the instructor's group); check that this file system "
            "lets root change their modes"
        )
