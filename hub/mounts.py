"""Read-only bind mounts that let the hub's accounts reach a folder kept behind a private one.

A course checkout often lives below a folder only its owner opens (a CI's ``mktemp -d``, a 0750 home):
the single-user servers, which run as other accounts, could then start neither the course venv's
packages nor import ``paged_kv``. ``reachable(layout, source, name)`` returns ``source`` itself when every
account can reach it, else mounts it read-only at ``HUB_DIR/shared/NAME`` (or, with ``owner``, at
``HUB_DIR/private-OWNER/NAME``, a 0700 folder of that account, for what students must not read).
``unmount_all(layout)`` removes every mount below HUB_DIR, deepest first, and raises when one stays:
``make hub-clean`` calls it before it deletes HUB_DIR, so a delete never reaches through a mount.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from pathlib import Path
from typing import List, Optional

from hub.layout import Layout, check_account_name


class MountError(RuntimeError):
    """A bind mount could not be made or removed; the message has mount's words."""


def mounts_below(root: Path) -> List[Path]:
    """Mount points strictly below ``root``, deepest first (from /proc/self/mounts)."""
    prefix = str(Path(root).resolve()) + "/"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].encode().decode("unicode_escape")  # mount escapes spaces as \040
        if point.startswith(prefix):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def reachable(layout: Layout, source: Path, name: str, owner: Optional[str] = None) -> Path:
    """``source``, or a read-only bind mount of it that every account (or only ``owner``) can reach."""
    from hub.runtime import open_to_all

    source = Path(source).resolve()
    if not source.is_dir():
        raise MountError(f"{source} is not a folder")
    if owner is None and open_to_all(source):
        return source
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*", name or ""):
        raise ValueError(f"not a mount name (a relative path of plain names): {name!r}")
    base = layout.root / (f"private-{check_account_name(owner)}" if owner else "shared")
    base.mkdir(parents=True, exist_ok=True)
    if owner:
        entry = pwd.getpwnam(owner)
        os.chown(base, entry.pw_uid, entry.pw_gid)
        os.chmod(base, 0o700)
    else:
        os.chmod(base, 0o755)
    target = base / name
    if target in mounts_below(layout.root):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for parent in target.parents:
        if parent == base:
            break
        os.chmod(parent, 0o755)
    _run(["mount", "--bind", str(source), str(target)])
    _run(["mount", "-o", "remount,bind,ro", str(target)])
    return target


def unmount_all(layout: Layout) -> List[Path]:
    """Unmount everything below HUB_DIR; the mount points removed. MountError if one stays mounted."""
    removed = []
    for point in mounts_below(layout.root):
        _run(["umount", str(point)])
        removed.append(point)
    left = mounts_below(layout.root)
    if left:
        raise MountError(f"still mounted below {layout.root}: {', '.join(map(str, left))}")
    return removed


def _run(command: List[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise MountError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
