"""nbgrader's exchange, collected safely: each student's latest submission, read as that student.

``nbgrader collect`` runs as root under ``make hub-grade`` and copies each inbound folder with
``shutil.copytree``, which follows every symbolic link in it: a notebook linked to the instructor's
root-only solution, to another student's submission or to ``/etc/shadow`` would be copied into the
course folder and graded. ``collect_inbound`` takes its place and keeps its layout
(``INBOX/<student>/<lab>/`` with the exchange's ``timestamp.txt`` and ``submission_secret.txt``, which
``nbgrader release_feedback`` reads):

- per student it takes the latest ``<student>+<lab>+<timestamp>[+<random>]`` entry of ``inbound/`` that
  the student's own account owns (``lstat``: a link made by someone else is not theirs), as nbgrader
  does; a newer entry of theirs that is not a folder (a link to someone else's) is refused and noted;
- it reads that folder in a child process that has given up root for the student's own uid and groups,
  with ``autograder.collect.entries``: every link is refused, files that belong to another account (a
  hard link) are refused, and anything else could only be what that student can read anyway;
- the child hands back plain data (JSON: paths, bytes as base64, refusals), checked again (paths, sizes)
  before anything is written. A child that fails, runs past ``CHILD_SECONDS`` or says too much refuses
  that submission alone.

Without root (a grader that runs as the instructor), the folder is read as the grader's own uid.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import select
import shutil
import signal
import stat
import time
from pathlib import Path
from typing import Dict, List, Tuple

from autograder.collect.collect import Submission
from autograder.exchange.hub_uids import Owners, owners, owners_of
from autograder.collect.entries import MAX_STUDENT, Budget, Refused, kind_of, member_path, open_folder, walk, write_new

CHILD_SECONDS = 60  # to read one student's folder (a few notebooks): far more than it takes
_READ_BACK = 2 * MAX_STUDENT  # base64 and JSON around a full budget


def latest_submissions(
    inbound_fd: int, lab: str, names: Owners
) -> Tuple[Dict[str, Tuple[str, str, int]], Dict[str, List[Tuple[str, str]]], Dict[str, List[str]]]:
    """``{student: (entry name, timestamp, owner uid)}``: each student's latest folder of ``lab`` in the open
    ``inbound/`` folder that the student owns (``names`` says whose each uid is);
    ``{student: [(entry, reason)]}`` for that student's newer entries refused (not a folder); and
    ``{student: [time, ...]}``: the times (``shown_time``) of that student's older folders, newest first,
    which the latest supersedes (not graded). Entries owned by someone else are left alone
    (``exchange.set_aside_forged`` moves them out)."""
    from nbgrader.utils import parse_utc

    pattern = re.compile(rf"^(?P<student>[^+]+)\+{re.escape(lab)}\+(?P<time>[^+]+)(\+[^+]*)?$")
    mine: Dict[str, List[Tuple[object, str, str, os.stat_result]]] = {}
    for name in os.listdir(inbound_fd):
        found = pattern.match(name)
        if not found:
            continue
        try:
            info = os.stat(name, dir_fd=inbound_fd, follow_symlinks=False)
            when = parse_utc(found["time"])
        except (OSError, ValueError):
            continue
        if names.name_of(info.st_uid) == found["student"]:
            mine.setdefault(found["student"], []).append((when, name, found["time"], info))
    latest, refused, superseded = {}, {}, {}
    for student, entries in mine.items():
        for when, name, written, info in sorted(entries, key=lambda e: e[0], reverse=True):
            if not stat.S_ISDIR(info.st_mode):
                if student not in latest:
                    refused.setdefault(student, []).append((name, f"it is {kind_of(info.st_mode)}, not a folder"))
            elif student not in latest:
                latest[student] = (name, written, info.st_uid)
            else:
                superseded.setdefault(student, []).append(shown_time(when))
    return latest, refused, superseded


def shown_time(when) -> str:
    """A submission's time as students and instructors read it (``2026-12-05 12:34:56 UTC``): made from the
    parsed time, never from the folder name's own text."""
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def read_as(
    uid: int, gid: int, inbound_fd: int, name: str, seconds: float = CHILD_SECONDS
) -> Tuple[List[Tuple[str, bytes]], List[Tuple[str, str]]]:
    """The files of the folder ``name`` in the open ``inbound_fd`` that belong to ``uid``, read in a child
    process as ``uid`` and ``gid`` with no other groups (as this process's own uid without root), and the
    entries refused there: ``([(path, bytes)], [(path, reason)])``. Refused when the child fails, takes
    more than ``seconds`` or hands back anything that is not what it should."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            with os.fdopen(write_end, "wb") as out:
                out.write(_tree_as_json(inbound_fd, name, uid))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        raw = _read_back(read_end, pid, seconds)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if status != 0:
        raise Refused(
            f"it could not be read as uid {uid} (the reader stopped with {os.waitstatus_to_exitcode(status)})"
        )
    return _checked(raw)


def _tree_as_json(inbound_fd: int, name: str, owner: int) -> bytes:
    """In the child: the folder's files and refusals as JSON (``entries.walk``, files of ``owner`` only)."""
    files, refused = [], []
    try:
        folder = open_folder(name, dir_fd=inbound_fd, owner=owner)
    except Refused as why:
        refused.append([".", str(why)])
    else:
        for path, data, reason in walk(folder, Budget(), owner=owner):
            if reason is None:
                files.append([path, base64.b64encode(data).decode()])
            else:
                refused.append([path, reason])
        os.close(folder)
    return json.dumps({"files": files, "refused": refused}).encode()


def _read_back(fd: int, pid: int, seconds: float) -> bytes:
    """All the child writes to ``fd``, within ``seconds`` and ``_READ_BACK`` bytes (else it is killed)."""
    chunks, size, deadline = [], 0, time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
        if not ready:
            os.kill(pid, signal.SIGKILL)
            raise Refused(f"reading it took more than {seconds:.0f} s")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _READ_BACK:
            os.kill(pid, signal.SIGKILL)
            raise Refused(f"it holds more than the {MAX_STUDENT >> 20} MB a submission may have")
        chunks.append(chunk)


def _checked(raw: bytes) -> Tuple[List[Tuple[str, bytes]], List[Tuple[str, str]]]:
    """The child's JSON, checked as data from elsewhere: plain relative paths, base64 bytes, one budget."""
    try:
        data = json.loads(raw)
        files = [(str(p), base64.b64decode(b, validate=True)) for p, b in data["files"]]
        refused = [(str(p), str(r)[:300]) for p, r in data["refused"]]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise Refused("the reader handed back something that is not a listing") from None
    budget = Budget()
    for path, content in files:
        if member_path(path) != path:
            raise Refused(f"the reader handed back a path that is not plain: {path!r}")
        budget.take(len(content))
    return files, refused


def collect_inbound(exchange: Path, course_id: str, lab: str, inbox: Path) -> Dict[str, Submission]:
    """Copy each student's latest submission of ``lab`` (``latest_submissions``, ``read_as``) into
    ``inbox/<student>/<lab>/``, which must not exist yet; return a ``Submission`` per student (the files
    copied, the entries refused), a student whose every entry was refused included. ``timestamp.txt``
    is the exchange folder's time when the student's is missing, refused or not a time."""
    from nbgrader.utils import parse_utc

    top = os.open(exchange, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the instructor's exchange root
    try:
        course = open_folder(course_id, dir_fd=top)
        try:
            inbound = open_folder("inbound", dir_fd=course)
            names = owners(course)
        finally:
            os.close(course)
    except Refused as why:
        raise ValueError(f"{exchange}/{course_id}/inbound cannot be collected: {why}") from None
    finally:
        os.close(top)
    try:
        inbox = Path(inbox)
        inbox.mkdir(parents=True)
        latest, refused, superseded = latest_submissions(inbound, lab, names)
        found: Dict[str, Submission] = {}
        for student in sorted(set(latest) | set(refused)):
            submission = found[student] = Submission(student=student, name=student)
            for entry, reason in refused.get(student, []):
                submission.refuse(entry, reason)
            if student not in latest:
                continue
            name, when, uid = latest[student]
            submission.submitted_at = shown_time(parse_utc(when))
            submission.superseded = list(superseded.get(student, []))
            target = inbox / student / lab
            target.mkdir(parents=True)
            try:
                files, inner = read_as(uid, names.group_of(uid), inbound, name)
            except Refused as why:
                files, inner = [], [(".", str(why))]
            for path, reason in inner:
                submission.refuse(name if path == "." else f"{name}/{path}", reason)
            for path, content in files:
                try:
                    if path == "timestamp.txt" and not _is_time(content, parse_utc):
                        raise Refused("it does not hold a time nbgrader can read")
                    submission.files.append(write_new(target, path, content))
                except Refused as why:
                    submission.refuse(f"{name}/{path}", str(why))
            if not (target / "timestamp.txt").exists():
                submission.files.append(write_new(target, "timestamp.txt", when.encode()))
    finally:
        os.close(inbound)
    return found


def copy_as_owner(inbound_dir: Path, name: str, target: Path) -> List[Tuple[str, str]]:
    """Copy the entry ``name`` of ``inbound_dir`` to the folder ``target`` (made; it must not exist) as the
    account that owns it (``read_as``; its own group, or nogroup when it has no account), then remove it
    from ``inbound_dir``; return the entries refused, not copied. This moves a submission to another file
    system, where a rename cannot: a copy made as root would read whatever its links and hard links name."""
    source = Path(inbound_dir) / name
    info = os.lstat(source)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(source)
        return [(".", f"it is {kind_of(info.st_mode)}, not a folder")]
    gid = owners_of(Path(inbound_dir).parent.parent, Path(inbound_dir).parent.name).group_of(info.st_uid)
    folder = os.open(inbound_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        files, refused = read_as(info.st_uid, gid, folder, name)
    except Refused as why:
        files, refused = [], [(".", str(why))]
    finally:
        os.close(folder)
    Path(target).mkdir(parents=True)
    for path, content in files:
        write_new(target, path, content)
    shutil.rmtree(source)
    return refused


def _is_time(content: bytes, parse_utc) -> bool:
    try:
        parse_utc(content.decode().strip())
        return True
    except (ValueError, UnicodeDecodeError, OverflowError):
        return False
