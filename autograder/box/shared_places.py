"""Every place a grading kernel could leave a file for the next box, found from inside a box and cleaned at release.

Below bubblewrap a box sees the grader's file system, and its uid may write wherever "other" may write: ``/tmp``,
``/var/tmp``, ``/dev/shm``, ``/run/lock`` (1777 on Debian and Ubuntu images; ``/var/lock`` links to it) and any
other world-writable folder an image holds. A file left there would be read by the next box given that uid, or by
any box when it is world-readable. So:

- the isolation probe (``autograder.box.trust``) **walks the file system as the box's uid** (``WALK``: every mount
  but ``/proc`` and ``/sys``, pruning autofs mount points and the box's own folder) and lists the folders it may
  write and the regular files it may write; in each folder it leaves a check file of its own;
- the grader **remembers the folders** (``remember``; ``autograder.box.place_walk`` walks once per grading run, in
  the background, and records them for the workers, the undertaker and the sweep) and every box's release removes
  what its uid owns there (``remove_files_of``), and in the world-writable folders inside them;
- a place that **cannot be cleaned** makes grading refuse below bubblewrap (``uncleanable``): a folder where a file
  the box makes is not its own (a mount that maps owners), a check file the release could not remove, a regular
  file any uid may write that no box owns (a channel nobody can empty), or a walk that did not finish in time.

Devices (``/dev/null``), FIFOs and sockets are not places to leave a file: they hold nothing once closed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from typing import Dict, Iterable, List, Optional, Sequence

DEFAULT = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")  # before (or without) a probe
CHECK_FILE = ".pkv-writable-check-"  # + the probe's uid: left by the probe in each folder it may write
WALK_BUDGET_S = 20.0
_FOUND: List[str] = []  # a walk found these: this process's releases clean them (``remember``)

# Runs in the probe's box as its uid (``trust.PROBE`` calls it): where may I write? ``find`` does the walk where it
# is installed (a few tenths of a second for a Python environment with torch); a plain walk otherwise.
WALK = r"""
def walk_writable(skip, budget):
    import shutil, subprocess, time
    skip = set(skip) | {"/proc", "/sys"}
    try:
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            if fields[fields.index("-") + 1] == "autofs":
                skip.add(fields[4].replace("\\040", " "))
    except (OSError, ValueError, IndexError):
        pass
    dirs, files, complete = [], [], True
    finder = shutil.which("find")
    if finder:
        prune = []
        for path in sorted(skip):
            prune += ["-path", path, "-o"]
        command = [finder, "/", "("] + prune[:-1] + [")", "-prune", "-o", "(", "-type", "d", "-o", "-type", "f",
                   ")", "-writable", "-printf", "%y %p\\0"]
        try:
            out = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=budget).stdout
        except subprocess.TimeoutExpired:
            out, complete = b"", False
        for entry in out.decode(errors="surrogateescape").split("\0"):
            if entry[:2] == "d ":
                dirs.append(entry[2:])
            elif entry[:2] == "f ":
                files.append(entry[2:])
    if not dirs and not files and complete:  # no GNU find (-printf, -writable): walk in Python
        deadline = time.monotonic() + budget
        dirs += ["/"] if os.access("/", os.W_OK) else []
        stack = ["/"]
        while stack:
            if time.monotonic() > deadline:
                complete = False
                break
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.path in skip:
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        if os.access(entry.path, os.W_OK):
                            dirs.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and os.access(entry.path, os.W_OK):
                        files.append(entry.path)
                except OSError:
                    continue
    kept, foreign = [], []
    for folder in dirs:
        check = os.path.join(folder, CHECK_FILE + str(os.getuid()))
        try:
            fd = os.open(check, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            foreign.append(folder)
            continue
        except OSError:
            continue  # access() said yes, the file system says no (read-only, full): nothing can be left there
        owner = os.fstat(fd).st_uid
        os.close(fd)
        kept.append(folder)
        if owner != os.getuid():
            foreign.append(folder)
    return {"dirs": kept, "files": files, "foreign": foreign, "complete": complete}
""".replace("CHECK_FILE", repr(CHECK_FILE))


def record_path():
    """The grading run's walk (``autograder.box.place_walk``): for its workers, and for the undertaker's sweep."""
    from autograder.box import uids

    return uids.UID_LOCKS / "writable-places.json"


def remember(folders: Iterable[str]) -> None:
    """A box may write ``folders``: every release in this process cleans them from now on."""
    for folder in folders:
        real = os.path.realpath(folder)
        if folder and real not in _FOUND:
            _FOUND.append(real)


def places() -> List[str]:
    """The folders a release cleans: ``DEFAULT`` and what a walk found (this process's, else the last recorded)."""
    found = list(_FOUND)
    if not found:
        try:
            found = [str(p) for p in json.loads(record_path().read_text())["result"]["dirs"]]
        except (OSError, ValueError, TypeError, KeyError):
            found = []
    chosen = []
    for folder in list(DEFAULT) + found:
        real = os.path.realpath(folder)
        if real not in chosen and os.path.isdir(real):
            chosen.append(real)
    return chosen


def remove_files_of(uid: Optional[int], folders: Optional[Sequence[str]] = None) -> List[str]:
    """Remove what ``uid`` owns in ``folders`` (default ``places()``) and in the world-writable folders inside them
    that it does not own, however deep (root only; its tasks must be gone: ``uids.end_tasks_of``). What it owns is
    removed whole, without following a link. Returns what was removed."""
    if uid is None or os.geteuid() != 0:
        return []
    pending = list(folders if folders is not None else places())
    seen, removed = set(), []
    while pending:
        folder = pending.pop()
        if folder in seen:
            continue
        seen.add(folder)
        for entry, info in _entries(folder):
            if info.st_uid == uid:
                try:
                    if stat.S_ISDIR(info.st_mode):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
                    removed.append(entry.path)
                except OSError:
                    continue
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                pending.append(entry.path)  # a shared folder inside (/tmp/.X11-unix)
    return removed


def _entries(folder: str) -> List[tuple]:
    """``(entry, its lstat)`` for each entry of ``folder`` that can be read ([] when the folder cannot)."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        try:
            found.append((entry, entry.stat(follow_symlinks=False)))
        except OSError:
            continue
    return found


def uncleanable(found: Dict, uid: int, box_uid) -> List[str]:
    """What the probe (as ``uid``) found that no release can clean, each with why. ``found``: ``WALK``'s answer, read
    after the probe's box was released; ``box_uid(owner)``: whether a uid is a box's (its files are removed when
    that box is released)."""
    problems = [f"{folder} (a file a box makes there is not its own)" for folder in found.get("foreign", [])]
    for folder in found.get("dirs", []):
        check = os.path.join(folder, CHECK_FILE + str(uid))
        if os.path.lexists(check) and folder not in found.get("foreign", []):
            problems.append(f"{folder} (a box's file there outlived its release)")
    for path in found.get("files", []):
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue
        if not box_uid(owner):
            problems.append(f"{path} (a file every account may write)")
    if not found.get("complete", True):
        problems.append(f"the walk of the file system did not finish in {WALK_BUDGET_S:.0f} s")
    return problems
