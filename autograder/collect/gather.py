"""Reading a class's export into each student's files: ``gather(source, scratch)``, one ``Submission`` per student.

``source`` is a folder or a zip (a zip of one folder is opened; one level of nested zips per student too). Whose
each top-level entry is, is read by ``autograder.collect.entry_names`` (Canvas's and Moodle's file and folder
names, else the entry's own name, in any script); every name below ``source`` is a student's, read with
``autograder.collect.entries``: only regular files, never through a link, within limits per entry and per
student. An entry that is not one (a link, a FIFO, a device, a zip entry that leaves its folder or is too large)
is refused alone, in its student's ``Submission.refused``. Entries that give one id and are not one student's
are all refused (``Submission.collided``); an entry whose name holds two LMS ids is refused alone. An entry
whose name looks like an LMS's but does not match its form (a renamed Canvas file) is collected under its whole
name and noted (``Submission.unmatched``), since it then carries no LMS id and no late flag.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from autograder.collect.entries import (
    MAX_ENTRY,
    MAX_STUDENT,
    SKIPPED,
    Budget,
    Entry,
    Refused,
    entry_name,
    open_folder,
    read_file,
    walk,
    write_new,
    zip_entries,
)
from autograder.collect.entry_names import MOODLE_FOLDER, Reading, collisions, lms_form_problem, read_entry

MAX_NOTED = 20  # refused entries listed per student (then only how many more)


@dataclass
class Submission:
    """One student's files to grade, and the entries refused: ``(entry, reason)``, the first ``MAX_NOTED``
    listed, how many more in ``unlisted``. ``collided``: the top-level entries that all gave this student's
    id (``entry_names.collisions``); when there are any, none of them is graded. ``lms``, ``lms_id``,
    ``full_name`` and ``late``: what the LMS's download says of the student (``entry_names.Reading``; empty
    or None where it says nothing, and for a collided id, whose they are not being known). ``submitted_at``: when
    the graded submission was made, where the route knows it (nbgrader's exchange); ``superseded``: the times of
    the student's earlier submissions, which it replaced (newest first; none of them is graded)."""

    student: str
    name: str = ""
    files: List[Path] = field(default_factory=list)
    refused: List[Tuple[str, str]] = field(default_factory=list)
    unlisted: int = 0
    collided: List[str] = field(default_factory=list)
    lms: str = ""
    lms_id: str = ""
    full_name: str = ""
    late: Optional[bool] = None
    submitted_at: str = ""
    superseded: List[str] = field(default_factory=list)
    unmatched: str = ""  # its entry looks like an LMS's but is not in its form (``entry_names.lms_form_problem``)

    def refuse(self, entry: str, reason: str) -> None:
        """Note that ``entry`` was not collected, and why."""
        if len(self.refused) < MAX_NOTED:
            self.refused.append((entry, reason))
        else:
            self.unlisted += 1


def submission_for(found: Dict[str, Submission], reading: Reading) -> Submission:
    """The Submission of ``reading``'s student in ``found`` (made when missing), with what the LMS's name says
    of the student added: an ambiguous reading adds nothing (whose it is is not known); a student is late
    when any of their entries is marked late (Canvas marks each attachment of a late submission)."""
    if not isinstance(reading, Reading):
        raise ValueError(f"submission_for takes a Reading, got {type(reading).__name__}")
    submission = found.setdefault(reading.student, Submission(student=reading.student, name=reading.name))
    if reading.ambiguous or reading.source not in ("canvas", "moodle") or submission.collided:
        return submission
    submission.lms = reading.source
    submission.lms_id = submission.lms_id or reading.lms_id
    submission.full_name = submission.full_name or reading.full_name
    if reading.late is not None:
        submission.late = bool(submission.late) or reading.late
    return submission


def _listing(dir_fd: int) -> List[str]:
    return sorted(n for n in os.listdir(dir_fd) if not n.startswith(".") and n not in SKIPPED)


def _wrapper(infos: List[zipfile.ZipInfo]) -> Optional[str]:
    """The one folder that holds everything in the class's zip (a zip of one folder), else None: decided
    from every name the zip's directory lists (made relative), as a listing of it unpacked would show."""
    tops, deep = set(), False
    for info in infos:
        parts = _relative(entry_name(info))
        if parts and not parts[0].startswith(".") and not SKIPPED & set(parts):
            tops.add(parts[0])
            deep = deep or (len(parts) > 1 and not info.is_dir())
    top = next(iter(tops)) if len(tops) == 1 else None
    return top if top is not None and deep and not MOODLE_FOLDER.match(top) else None


def _relative(name: str) -> List[str]:
    """The components of a zip entry's name with ``/``, ``.`` and ``..`` dropped (only to tell whose it is)."""
    return [p for p in name.split("/") if p not in ("", ".", "..")]


def _top(path: str, wrapper: Optional[str]) -> Tuple[str, bool]:
    """The top-level entry an entry of the class's zip belongs to (by ``_relative``, below the zip's one
    folder), and whether that top-level entry is a folder."""
    parts = _relative(path) or ["."]
    if wrapper is not None and parts[0] == wrapper and len(parts) > 1:
        parts = parts[1:]
    return parts[0], len(parts) > 1


def _owner(path: str, wrapper: Optional[str]) -> Reading:
    """``read_entry`` of the top-level entry an entry of the class's zip belongs to (``_top``)."""
    top, folder = _top(path, wrapper)
    return read_entry(top, folder) if top not in (".", "..") else read_entry("student", False)


def _unpack_class(archive: Path, target: Path, found: Dict[str, Submission]) -> Tuple[Optional[str], Dict[str, bool]]:
    """Unpack the class's zip into ``target``, each student's entries within that student's budget; note
    each refused entry for the student it belongs to; return the zip's one folder (``_wrapper``) and
    ``{top-level entry: whether it is a folder}`` as the zip's directory lists them (refused or not)."""
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
    wrapper = _wrapper(infos)
    tops: Dict[str, bool] = {}
    declared: Dict[str, int] = {}
    for info in infos:
        top, folder = _top(entry_name(info), wrapper)
        if top not in (".", "..") and not top.startswith(".") and top not in SKIPPED:
            tops[top] = tops.get(top, False) or folder or info.is_dir()
        sid = _owner(entry_name(info), wrapper).student
        declared[sid] = declared.get(sid, 0) + min(info.file_size, MAX_ENTRY)
    needed = 2 * sum(min(size, MAX_STUDENT) for size in declared.values())  # unpacked, then each student's copy
    free = shutil.disk_usage(target.parent).free
    if needed > free:
        raise ValueError(
            f"{archive.name} needs about {needed / 2**30:.1f} GB to unpack and copy, and "
            f"{target.parent} has {free / 2**30:.1f} GB free: free some space, or point TMPDIR "
            "at a larger disk"
        )
    budgets: Dict[str, Budget] = {}
    for path, data, reason in zip_entries(archive, lambda p: budgets.setdefault(_owner(p, wrapper).student, Budget())):
        if reason is None:
            try:
                write_new(target, path, data)
                continue
            except Refused as why:
                reason = str(why)
        submission_for(found, _owner(path, wrapper)).refuse(path, reason)
    return wrapper, tops


def gather(source: Path, scratch: Path) -> Dict[str, Submission]:
    """Every student's files, by student id, copied into ``scratch`` (zips unpacked, one level of nested
    zips too). ``source`` is the instructor's (it may be a link); every name below it is a student's and
    is read with ``autograder.collect.entries``: an entry that is not a regular file (a symbolic link, a
    FIFO, a device), that leaves its folder or passes a size limit (per entry, per student) is refused
    alone, in its student's ``Submission.refused``, and the others are collected. Entries that give one
    id and are not one student's (``entry_names.collisions``) are all refused, in ``Submission.collided``;
    an entry whose name holds two LMS ids is refused alone (``Reading.ambiguous``)."""
    found: Dict[str, Submission] = {}
    source, from_zip, wrapper, tops = Path(source), False, None, {}
    if source.is_file() and source.suffix == ".zip":
        unpacked, from_zip = scratch / "export", True
        unpacked.mkdir(parents=True)
        try:
            wrapper, tops = _unpack_class(source, unpacked, found)
        except zipfile.BadZipFile as error:
            raise ValueError(f"{source} is not a zip that can be read ({error})") from None
        source = unpacked
    if not source.is_dir():
        raise ValueError(f"{source} is neither a folder nor a .zip: give the LMS's export, unpacked or not")
    top = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        names = _listing(top)
        if from_zip:  # decided from the zip's directory, as the students' budgets were
            unwrap = wrapper is not None and names == [wrapper]
        else:
            unwrap = len(names) == 1 and _is_folder(names[0], top) and not MOODLE_FOLDER.match(names[0])
        if unwrap:
            inner = open_folder(names[0], dir_fd=top)  # a zip of one folder
            os.close(top)
            top, names = inner, _listing(inner)
        readings = {name: read_entry(name, folder) for name, folder in tops.items()}  # refused ones too
        readings.update((name, read_entry(name, _is_folder(name, top))) for name in names if name not in readings)
        clashes = _refuse_collisions(readings, found)
        canvas_seen = any(r.source == "canvas" for r in readings.values())
        for reading in readings.values():
            problem = lms_form_problem(reading, canvas_seen)
            if problem and reading.student not in clashes:
                submission_for(found, reading).unmatched = problem
        budgets: Dict[str, Budget] = {}
        for number, name in enumerate(names):
            reading = readings[name]
            submission = submission_for(found, reading)
            if reading.ambiguous:
                submission.refuse(name, reading.ambiguous)
            elif reading.student not in clashes:
                _gather_entry(
                    top, name, reading.file, scratch, number, submission, budgets.setdefault(reading.student, Budget())
                )
    finally:
        os.close(top)
    return found


def _refuse_collisions(readings: Dict[str, Reading], found: Dict[str, Submission]) -> Dict[str, List[str]]:
    """Mark every id that entries of more than one owner give (``entry_names.collisions``) as collided in
    ``found``, with its entries; return them."""
    clashes = collisions(readings.values())
    for sid, entries in clashes.items():
        names = sorted({readings[e].name for e in entries})
        submission = found.setdefault(sid, Submission(student=sid))
        submission.name, submission.collided = " / ".join(names), entries
        submission.lms, submission.lms_id, submission.full_name, submission.late = "", "", "", None
    return clashes


def _is_folder(name: str, dir_fd: int) -> bool:
    return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)


def _gather_entry(
    top: int, name: str, inner: str, scratch: Path, number: int, submission: Submission, budget: Budget
) -> None:
    """Copy the top-level entry ``name`` (a folder, a zip or a file) of the class into ``scratch``."""
    try:
        if _is_folder(name, top):
            folder = open_folder(name, dir_fd=top)
            try:
                _stage(walk(folder, budget), scratch / f"dir-{number}", submission, name + "/")
            finally:
                os.close(folder)
        elif name.endswith(".zip"):
            archive = read_file(name, dir_fd=top)  # its entries count against the budget once unpacked
            _stage(zip_entries(archive, lambda _: budget), scratch / f"zip-{number}", submission, name + "/")
        else:
            _stage(
                [(inner, read_file(name, dir_fd=top, budget=budget), None)],
                scratch / f"file-{number}",
                submission,
                "",
                shown=name,
            )
    except Refused as why:
        submission.refuse(name, str(why))
    except zipfile.BadZipFile:
        submission.refuse(name, "it is not a zip that can be read")


def _stage(found: Iterable[Entry], folder: Path, submission: Submission, prefix: str, shown: str = "") -> None:
    """Write each file taken into ``folder`` (as the submission's), note each one refused."""
    for path, data, reason in found:
        if reason is None:
            try:
                submission.files.append(write_new(folder, path, data))
                continue
            except Refused as why:
                reason = str(why)
        submission.refuse(shown or prefix + path, reason)
