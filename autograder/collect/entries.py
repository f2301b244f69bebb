"""Reading what a student names, as data: regular files only, never through a link, within limits.

Every name in a submission is chosen by a student: the files of a folder (an LMS export unpacked with
``unzip``, which keeps symbolic links; nbgrader's inbound folder, which its owner can change at any time),
the entries of a zip. Collection reads all of them here, the same way:

- a file is taken only when it is a regular file: ``lstat`` says so before it is opened, it is opened
  with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so that a FIFO never blocks), and ``fstat`` checks that what
  was opened is that same regular file. Folders are walked by descriptor (``openat`` with
  ``O_NOFOLLOW | O_DIRECTORY``), so no component of any path is a link that was followed;
- with ``owner``, a file or folder that belongs to another account is refused too (a hard link to
  someone else's file);
- a zip entry is taken only when its name stays inside its folder (no ``..``, no absolute path), its
  Unix mode is a file's (not a symbolic link, a FIFO or a device) and its size fits. Sizes are checked
  from the zip's directory before anything is unpacked, and bytes are counted while unpacking, so a
  directory that understates a size gains nothing;
- sizes are limited per entry (``MAX_ENTRY``) and per student (a ``Budget``), never per class.

What is not taken is *refused*: the reader yields ``(name, None, reason)`` and goes on with the next
entry, so that one bad entry never stops the others. Nothing here writes outside the folder it is given
(``write_new`` creates files only, below a folder of the caller's).
"""

from __future__ import annotations

import io
import os
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple, Union

MAX_ENTRY = 64 * 1024 * 1024  # one file: a notebook with outputs is 300-420 kB; no notebook is graded above this
MAX_STUDENT = 256 * 1024 * 1024  # all of one student's files
MAX_FILES = 1000  # files of one student
MAX_DEPTH = 16  # folders inside a student's folder
SKIPPED = frozenset({".ipynb_checkpoints", "__MACOSX", "__pycache__", ".DS_Store"})  # never read, never refused
_CHUNK = 1 << 20

# (relative path, its bytes, None) for a file taken; (relative path, None, reason) for one refused.
Entry = Tuple[str, Optional[bytes], Optional[str]]


class Refused(Exception):
    """Why one entry was not taken; ``str()`` is the reason, worded to follow "it was not collected: "."""


@dataclass
class Budget:
    """What one student's files may still take: bytes and files (``MAX_STUDENT``, ``MAX_FILES``)."""

    bytes_left: int = MAX_STUDENT
    files_left: int = MAX_FILES

    def check(self, size: int) -> None:
        """Raise Refused when a file of ``size`` bytes does not fit what is left; take nothing."""
        if self.files_left <= 0:
            raise Refused(f"the submission has more than {MAX_FILES} files")
        if size > self.bytes_left:
            raise Refused(f"the submission's files together pass {MAX_STUDENT >> 20} MB")

    def take(self, size: int) -> None:
        self.check(size)
        self.files_left -= 1
        self.bytes_left -= size


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a symbolic link", "a FIFO", ...)."""
    for test, words in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _check_owner(info: os.stat_result, owner: Optional[int]) -> None:
    if owner is not None and info.st_uid != owner:
        raise Refused(f"it belongs to another account (uid {info.st_uid})")


def _check_size(size: int, limit: int, what: str = "it is") -> None:
    if size > limit:
        raise Refused(f"{what} {size / 2**20:.0f} MB, more than the {limit >> 20} MB a file may have")


def read_file(
    name: Union[str, Path],
    dir_fd: Optional[int] = None,
    budget: Optional[Budget] = None,
    owner: Optional[int] = None,
    limit: int = MAX_ENTRY,
) -> bytes:
    """The bytes of the regular file ``name`` (relative to the folder ``dir_fd`` when given), or Refused.

    Refused when ``name`` is not a regular file (a symbolic link, FIFO, socket, device, folder), belongs to
    another uid than ``owner`` (when given), is larger than ``limit`` or than what ``budget`` has left
    (then taken from it), or changed while it was read. A link is never followed, even to check it: with
    ``dir_fd``, ``name`` is one entry of that folder; without, it is a path of the caller's, whose folders
    are the caller's own (only its last component is a student's)."""
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as error:
        raise Refused(f"it could not be read ({error.strerror})") from None
    if not stat.S_ISREG(before.st_mode):
        raise Refused(f"it is {kind_of(before.st_mode)}")
    _check_owner(before, owner)
    _check_size(before.st_size, limit)
    if budget is not None:
        budget.check(before.st_size)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:  # ELOOP: it became a link after the lstat above
        raise Refused(f"it could not be opened as a file ({error.strerror})") from None
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise Refused("it was replaced while it was read")
        data = _read_at_most(handle, limit)
    if len(data) > limit:
        raise Refused(f"it grew past {limit >> 20} MB while it was read")
    if budget is not None:
        budget.take(len(data))
    return data


def _read_at_most(handle, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``handle``: one byte more than the limit says it was passed."""
    chunks, size = [], 0
    while size <= limit:
        chunk = handle.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def open_folder(name: Union[str, Path], dir_fd: Optional[int] = None, owner: Optional[int] = None) -> int:
    """A descriptor of the folder ``name`` (relative to ``dir_fd`` when given), opened without following a
    link; Refused when it is no folder or (with ``owner``) belongs to another uid. The caller closes it."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            raise Refused(f"it could not be opened ({error.strerror})") from None
        raise Refused(
            f"it is {kind_of(mode)}, not a folder"
            if not stat.S_ISDIR(mode)
            else f"it could not be opened ({error.strerror})"
        ) from None
    try:
        _check_owner(os.fstat(fd), owner)
    except Refused:
        os.close(fd)
        raise
    return fd


def walk(dir_fd: int, budget: Budget, owner: Optional[int] = None, prefix: str = "", depth: int = 0) -> Iterator[Entry]:
    """Every file below the open folder ``dir_fd``, by relative path (sorted), as ``Entry`` tuples: the
    regular files with their bytes (``read_file``), every other entry refused with its reason. Folders
    named in ``SKIPPED`` are passed over unread; a folder is entered only by descriptor, never through a
    link, and at most ``MAX_DEPTH`` deep."""
    try:
        names = sorted(os.listdir(dir_fd))
    except OSError as error:
        yield prefix.rstrip("/") or ".", None, f"the folder could not be listed ({error.strerror})"
        return
    for name in names:
        path = prefix + name
        if name in SKIPPED:
            continue
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError as error:
            yield path, None, f"it could not be read ({error.strerror})"
            continue
        if stat.S_ISDIR(mode):
            if depth >= MAX_DEPTH:
                yield path, None, f"it is nested more than {MAX_DEPTH} folders deep"
                continue
            try:
                inner = open_folder(name, dir_fd=dir_fd, owner=owner)
            except Refused as why:
                yield path, None, str(why)
                continue
            try:
                yield from walk(inner, budget, owner, path + "/", depth + 1)
            finally:
                os.close(inner)
            continue
        try:
            yield path, read_file(name, dir_fd=dir_fd, budget=budget, owner=owner), None
        except Refused as why:
            yield path, None, str(why)


def member_path(name: str) -> str:
    """A zip entry's name as a relative path inside its folder, or Refused when it would leave it."""
    if name.startswith("/") or name.startswith("\\"):
        raise Refused("its name is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused("its name leaves its folder (..)")
    if not parts:
        raise Refused("it has no name")
    return "/".join(parts)


UTF8_NAME = 0x800  # general purpose bit 11: the entry's name is UTF-8 (APPNOTE.TXT, appendix D)


def entry_name(info: zipfile.ZipInfo) -> str:
    """The name of a zip entry as its maker wrote it. A name not flagged UTF-8 is decoded as CP437 (the format's
    old default, as Python does), but many makers write UTF-8 without the flag (rubyzip unless ``unicode_names``
    is set, Windows' own zip): such a name that is valid UTF-8 once its CP437 reading is undone is read as UTF-8,
    so that ``张三_12345_...`` is not collected as ``σ╝á...``; any other name is kept as Python read it."""
    name = info.filename
    if info.flag_bits & UTF8_NAME or name.isascii():
        return name
    try:
        return name.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return name


def zip_entries(archive: Union[Path, bytes], budget_for: Callable[[str], Budget]) -> Iterator[Entry]:
    """Every file entry of the zip ``archive`` (a path of the caller's, or its bytes) as ``Entry``
    tuples, by its path inside the zip (``member_path``). ``budget_for(path)`` gives the budget of the
    student an entry belongs to (entries' names as their maker wrote them: ``entry_name``). Folders are passed over; symbolic links, FIFOs, devices, names that leave
    the folder, encrypted or damaged entries, entries that declare (or unpack to) more than ``MAX_ENTRY``
    or than the budget left, are refused one by one. Raises zipfile.BadZipFile when it is no zip at all."""
    with zipfile.ZipFile(io.BytesIO(archive) if isinstance(archive, bytes) else archive) as zf:
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_ISDIR(mode):
                continue
            try:
                path = member_path(entry_name(info))
                if SKIPPED & set(path.split("/")):
                    continue
                if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                    raise Refused(f"it is {kind_of(mode)}")
                if info.flag_bits & 0x1:
                    raise Refused("it is encrypted")
                _check_size(info.file_size, MAX_ENTRY, "it declares")
                budget = budget_for(path)
                budget.check(info.file_size)
                data = _unpack(zf, info)
                budget.take(len(data))
                yield path, data, None
            except Refused as why:
                yield entry_name(info), None, str(why)


def _unpack(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The entry's bytes, counted: no more than its declared size is ever kept (Refused otherwise)."""
    try:
        with zf.open(info) as source:
            data = _read_at_most(source, info.file_size)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as error:
        raise Refused(f"it cannot be unpacked ({_plain(str(error))})") from None
    if len(data) > info.file_size:
        raise Refused(f"it unpacks to more than the {info.file_size} bytes it declares")
    return data


def _plain(text: str) -> str:
    """``text`` (which may quote a name a student chose) with only letters, digits and plain punctuation
    kept, so that it can be shown as it is in a note: no markup, no code span, no link."""
    return re.sub(r"[^\w .,:;()'/-]", "?", text)[:200]


def write_new(folder: Path, relative: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/relative``, a file that must not exist yet (0600, created with
    ``O_EXCL | O_NOFOLLOW``); Refused when ``relative`` leaves ``folder`` or clashes with an entry there."""
    path = Path(folder) / member_path(relative)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        raise Refused("its folder's name is taken by another entry's file") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise Refused(f"another entry has the same name ({error.strerror})") from None
    with open(fd, "wb", closefd=True) as handle:
        handle.write(data)
    return path
