"""Whose each entry of a class's export is: one student id per entry, and never one id for two students.

``read_entry(name, folder)`` reads the student of one top-level entry of an export (a folder, a zip, a file):

- Canvas's "Download Submissions": ``<name>[_LATE]_<user id>_<attachment id>_<file name>``. Canvas writes
  the name with letters only, so the user id is the group right before the attachment id, the first
  ``_<digits>_<digits>_`` after a name without ``_``; the file name after it is the student's, and can hold
  anything. The name is a slug of the student's sortable name ("Doe, Jane" is ``doejane``), not a name to
  show; ``LATE`` marks a submission Canvas counts late. An assignment graded anonymously is downloaded as
  ``[LATE_]anon_<anonymous id>_<attachment id>_<file name>``: no name and no user id, so the student id is
  ``anon_<anonymous id>`` and no LMS user id is known (an ``anon_`` prefix is always read so: a student
  whose slug is ``anon`` cannot be told from it, and reading a random anonymous id as a user id could send
  a grade to someone else). Canvas's ``lib/content_zipper.rb`` (``get_filename``, ``sanitize_user_name``)
  writes these names;
- Moodle's "Download all submissions": a folder ``<Full Name>_<participant id>_assignsubmission_<plugin>[_]``
  per student (and plugin), or, in its older flat layout, one file ``<Full Name>_<participant id>
  _assignsubmission_<plugin>_<file name>`` per file. Moodle writes every ``_`` of the full name as a space,
  so the group it writes is the only one before the file name. A folder's participant id is read from the
  right: the group that ends its name (a display name that carries ``_42_assignsubmission_file_`` does not
  make it participant 42's). A file's name ends with the student's own file name, which may carry such a
  group too: a file whose name holds groups of different ids is *ambiguous*. The participant id is the
  assignment's own (Moodle's ``assign_user_mapping``: one per student and assignment), the number after
  ``Participant `` in that assignment's grading worksheet, not Moodle's user id. Under blind marking the
  name is ``Participant``, which is no name;
- anything else is one entry per student, named after the student (``alice/``, ``alice.zip``,
  ``alice.ipynb``, ``张三/``): its id is ``student_id`` of the name without ``.zip`` or ``.ipynb`` (a name in any
  script gets an id of its own, readable and stable: ``ZhangSan-9c1f``), and the name as written is kept.

A name read both as Canvas's and as Moodle's, with different ids, is ambiguous as well. An ambiguous entry
is refused whole (``Reading.ambiguous`` says why), and is noted for the id that comes first in its name:
the LMS writes its own part first, the student's file name after it.

``collisions(readings)`` finds the ids that entries of more than one student yield: two plain entries
(``alice/`` and ``@alice/`` are both ``alice``), two LMS entries with the same id and different names, a
plain entry and an LMS one. Collection refuses every entry of such an id (never merges them): it cannot
tell whose the id is. The entries of one student share an id and an owner (``Reading.owner``): a Moodle
student's folders for two plugins, a Canvas student's attachments, a flat Moodle student's files.

What the LMS says of the student besides the id is kept as it was written, never guessed: ``lms_id``
(Canvas's user id, Moodle's participant id; empty where the name gives none), ``full_name`` (Moodle's full
name; empty for Canvas, whose slug is not a name, for blind marking and for plain entries) and ``late``
(Canvas: True or False; None where the download does not say, as Moodle's and plain entries do not).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Dict, Iterable, List, Optional, Tuple

CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?P<late>_late)?_(?P<id>\d+)_(?P<attachment>\d+)_(?P<file>.+)$", re.I)
# anonymous grading: Canvas writes no name, so LATE comes first (content_zipper.rb joins [name, "LATE", id])
CANVAS_ANONYMOUS = re.compile(r"^(?P<late>LATE_)?anon_(?P<anon>[A-Za-z0-9]+)_(?P<attachment>\d+)_(?P<file>.+)$")
MOODLE_BLIND = "Participant"  # the name of every folder under blind marking (Moodle's English string)
MOODLE_FOLDER = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_[a-z]+_?$")  # greedy: the last group
MOODLE_GROUP = re.compile(r"_(?P<id>\d+)_assignsubmission_[a-z]+_")  # in a file's name: each one found


@dataclass(frozen=True)
class Reading:
    """Whose the top-level entry ``entry`` is: ``student`` (the id), ``name`` (the name as the entry writes
    it: Canvas's slug, Moodle's full name, the entry's name), ``file`` (the file name inside a flat LMS entry,
    else the entry), ``source`` ("canvas", "moodle" or "entry"), ``ambiguous`` (why it cannot be told whose
    it is, the entry being refused; empty when it can), ``lms_id``, ``full_name`` and ``late`` (the module
    doc: what the LMS wrote, empty or None where it wrote nothing)."""

    entry: str
    student: str
    name: str
    file: str
    source: str
    ambiguous: str = ""
    lms_id: str = ""
    full_name: str = ""
    late: Optional[bool] = None

    @property
    def owner(self) -> Tuple[str, str]:
        """What the entries of one student share besides the id: an LMS's display name, else the entry."""
        return (self.source, self.name) if self.source in ("canvas", "moodle") else (self.source, self.entry)


def safe_id(text: str) -> str:
    """``text`` as a student id: letters, digits, ``_``, ``.`` and ``-`` only ("student" when none is left)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._")
    return cleaned or "student"


ID_WIDTH = 40  # characters of a transliterated name kept in an id (before its suffix)
SUFFIX_HEX = 4  # hex digits of the suffix that tells apart names that read alike in ASCII


def student_id(name: str) -> str:
    """The student id of an entry named ``name`` (as the student or the LMS wrote it, any script): a name in
    ASCII is ``safe_id`` of it (``alice`` and ``@alice`` are both ``alice``: a collision, refused); any other name
    is read in ASCII (``anyascii``: 张三 is ``ZhangSan``, a fullwidth ａｌｉｃｅ ``alice``, Иван ``Ivan``) and
    always gets a short suffix made from the name as written (its NFC form's SHA-256): ``ZhangSan-9c1f``. So the id
    is readable, the same at every collection whatever else the export holds (a suffix chosen only when two
    names collide would change with the class), and two names that read alike in ASCII (张伟 and 張偉, ａｌｉｃｅ and
    alice) are two students. Two names whose suffixes collide too are refused as any id collision is."""
    if not isinstance(name, str):
        raise ValueError(f"a student's name is text, got {type(name).__name__}")
    written = unicodedata.normalize("NFC", name)
    if written.isascii():
        return safe_id(written)
    from anyascii import anyascii  # ISC licence; in the lock (requirements-lock.txt)

    read = safe_id(anyascii(unicodedata.normalize("NFKC", written)))[:ID_WIDTH].strip("._")
    return f"{read or 'student'}-{hashlib.sha256(written.encode('utf-8')).hexdigest()[:SUFFIX_HEX]}"


def _check(entry: str) -> None:
    if not isinstance(entry, str) or not entry or "/" in entry or entry in (".", ".."):
        raise ValueError(f"a top-level entry's name is one non-empty path component, got {entry!r}")


def _lms_readings(entry: str, folder: bool) -> List[Tuple[int, Reading]]:
    """Every way ``entry`` reads as an LMS's, with where its id starts in the name."""
    found = []
    anonymous = CANVAS_ANONYMOUS.match(entry)
    canvas = None if anonymous else CANVAS.match(entry)
    if anonymous:  # no user id to give: the student is known by the anonymous id only
        found.append(
            (
                anonymous.start("anon"),
                Reading(
                    entry,
                    safe_id(f"anon_{anonymous['anon']}"),
                    "",
                    anonymous["file"],
                    "canvas",
                    late=bool(anonymous["late"]),
                ),
            )
        )
    if canvas:
        found.append(
            (
                canvas.start("id"),
                Reading(
                    entry,
                    canvas["id"],
                    canvas["name"],
                    canvas["file"],
                    "canvas",
                    lms_id=canvas["id"],
                    late=bool(canvas["late"]),
                ),
            )
        )
    if folder:
        moodle = MOODLE_FOLDER.match(entry)
        if moodle:
            found.append((moodle.start("id"), _moodle(entry, moodle["id"], moodle["name"], "")))
    else:
        for group in MOODLE_GROUP.finditer(entry):
            if group.start() > 0:  # a display name before it
                found.append(
                    (group.start("id"), _moodle(entry, group["id"], entry[: group.start()], entry[group.end() :]))
                )
    return found


def _moodle(entry: str, sid: str, name: str, file: str) -> Reading:
    """A Moodle reading: the participant id is the LMS's id; the name is a full name unless blind marking."""
    return Reading(entry, sid, name, file, "moodle", lms_id=sid, full_name="" if name == MOODLE_BLIND else name)


def read_entry(entry: str, folder: bool) -> Reading:
    """Whose the top-level entry named ``entry`` is (see the module doc); ``folder``: whether it is a folder
    (a Moodle folder's id is the group that ends its name, a file's may be ambiguous). ValueError for a
    name that is not one path component."""
    _check(entry)
    if not isinstance(folder, bool):
        raise ValueError(f"folder says whether {entry!r} is a folder: True or False, got {folder!r}")
    readings = [r for _, r in sorted(_lms_readings(entry, folder), key=lambda found: found[0])]
    ids = {r.student for r in readings}
    if len(ids) > 1:
        first = readings[0]
        return Reading(
            entry,
            first.student,
            first.name,
            first.file,
            first.source,
            f"its name holds more than one LMS student id ({', '.join(sorted(ids, key=_by_number))}), so "
            "whose it is cannot be told: rename it",
        )
    if readings:
        return readings[0]
    suffix = PurePosixPath(entry).suffix
    stem = entry[: -len(suffix)] if suffix in (".zip", ".ipynb") and len(entry) > len(suffix) else entry
    return Reading(entry, student_id(stem), stem, entry, "entry")


# A name with Canvas's groups in it (``_<digits>_<digits>_``, ``_LATE_``) that its form did not read: renamed by
# hand, or a form this reader does not know (a name with ``_`` in it, which Canvas never writes).
CANVAS_LIKE = re.compile(r"_(late_)?\d+_\d+_|(^|_)late_", re.I)


def lms_form_problem(reading: Reading, canvas_seen: bool) -> str:
    """Why an entry read under its own name (``source == "entry"``) looks like an LMS's and was not read as one
    (its student then has no LMS id and no late flag), or "": a name with Canvas's groups in it, or any own-named
    entry of an export whose other entries are Canvas's (``canvas_seen``)."""
    if not isinstance(reading, Reading):
        raise ValueError(f"lms_form_problem takes a Reading, got {type(reading).__name__}")
    if reading.source != "entry" or reading.ambiguous:
        return ""
    if not (CANVAS_LIKE.search(reading.entry) or canvas_seen):
        return ""
    seen = "it looks like a Canvas file name" if CANVAS_LIKE.search(reading.entry) else "the export is Canvas's"
    return (
        f"{reading.entry!r} does not match Canvas's file names (<name>[_LATE]_<user id>_<attachment id>_<file>; "
        f"{seen}): collected under its whole name as student {reading.student}, with no Canvas user id and no "
        "late flag, so make gradebook leaves it out; rename it to Canvas's form (the download's own name) and "
        "collect again"
    )


def _by_number(sid: str) -> Tuple[int, int, str]:
    """Ids in number order (``7`` before ``42``), any that are not numbers (``anon_…``) after them."""
    return (0, int(sid), "") if sid.isdigit() else (1, 0, sid)


def collisions(readings: Iterable[Reading]) -> Dict[str, List[str]]:
    """``{student id: its entries, sorted}`` for every id that the entries of more than one owner yield
    (``Reading.owner``); ambiguous readings, refused already, take no part."""
    owners: Dict[str, set] = {}
    entries: Dict[str, List[str]] = {}
    for reading in readings:
        if not isinstance(reading, Reading):
            raise ValueError(f"collisions takes Readings, got {type(reading).__name__}")
        if reading.ambiguous:
            continue
        owners.setdefault(reading.student, set()).add(reading.owner)
        entries.setdefault(reading.student, []).append(reading.entry)
    return {sid: sorted(entries[sid]) for sid, seen in owners.items() if len(seen) > 1}
