"""Whose is a uid in nbgrader's exchange: the hub's registry of pod uids, else /etc/passwd.

On the local hub every student is an account, and /etc/passwd names each uid. In the Kubernetes deployment
(deploy/) a student's server runs as uid 20000 + their hub user id, and the image calls every such uid
"jovyan" (nbgrader then takes JUPYTERHUB_USER as the student id). The hub's ``pre_spawn_hook`` writes each
user's hub name into ``<exchange>/<course>/hub-uids/<uid>``: that folder belongs to the course folder's
owner, the uid the hub runs as, and no student can write there. ``owners`` reads it, trusting an entry only
when it is a plain file of the course folder's owner in a folder only that owner can write; any other uid
is named by /etc/passwd.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from typing import Dict, Optional

REGISTRY = "hub-uids"
NOGROUP = 65534  # the group a reader gets for a uid with no account
MAX_ENTRIES = 100_000  # far more users than a hub has; a registry above it is read up to it
# A hub name as nbgrader's exchange can carry it in ``<student>+<lab>+<time>``: no "+", "/", space or control.
HUB_NAME = re.compile(r"[^\s/+\x00-\x1f\x7f]{1,255}")
UID = re.compile(r"[0-9]{1,10}")
_NO_LINK = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Owners:
    """The names of uids: ``registry`` (``{uid: hub name}``) first, then /etc/passwd."""

    registry: Dict[int, str] = field(default_factory=dict)

    def name_of(self, uid: int) -> Optional[str]:
        """The user ``uid`` is, or None when nobody is named."""
        if uid in self.registry:
            return self.registry[uid]
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return None

    def group_of(self, uid: int) -> int:
        """The group to read as ``uid`` with: a pod user's own (the hook gives gid = uid), else the account's."""
        if uid in self.registry:
            return uid
        try:
            return pwd.getpwuid(uid).pw_gid
        except KeyError:
            return NOGROUP


def owners(course_fd: int) -> Owners:
    """The owners of the open course folder ``course_fd`` of an exchange (its ``hub-uids`` registry, if any)."""
    trusted = os.fstat(course_fd).st_uid
    try:
        folder = os.open(REGISTRY, _NO_LINK | os.O_DIRECTORY, dir_fd=course_fd)
    except OSError:
        return Owners()
    try:
        info = os.fstat(folder)
        if info.st_uid != trusted or info.st_mode & 0o022:
            return Owners()
        registry = {}
        for entry in sorted(os.listdir(folder))[:MAX_ENTRIES]:
            name = _entry(folder, entry, trusted) if UID.fullmatch(entry) else None
            if name is not None:
                registry[int(entry)] = name
        return Owners(registry)
    finally:
        os.close(folder)


def owners_of(exchange, course_id: str) -> Owners:
    """``owners`` of the course folder ``exchange/course_id`` (no registry when it cannot be opened)."""
    try:
        course = os.open(os.path.join(exchange, course_id), _NO_LINK | os.O_DIRECTORY)
    except OSError:
        return Owners()
    try:
        return owners(course)
    finally:
        os.close(course)


def _entry(folder: int, entry: str, trusted: int) -> Optional[str]:
    """The hub name in the registry file ``entry``, or None unless it is a plain file of ``trusted``."""
    try:
        fd = os.open(entry, _NO_LINK, dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != trusted:
            return None
        text = os.read(fd, 512).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    return text if HUB_NAME.fullmatch(text) else None
