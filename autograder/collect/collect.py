"""Collect a lab's submissions from a folder or a zip, as an LMS exports them, into nbgrader's layout.

``python -m autograder.collect.collect LAB SOURCE`` (``make collect LAB=... FROM=...``) accepts:

- a folder or a zip with one entry per student: a sub-folder, a zip, or a notebook;
- Canvas's "Download Submissions" zip: ``<name>[_LATE]_<user id>_<attachment id>_<file name>``;
- Moodle's "Download all submissions" zip, with or without a folder per student:
  ``<Full Name>_<participant id>_assignsubmission_file[_][/]<file name>``.

Whose each entry is, is read by ``autograder.collect.entry_names``: two entries that give the same
student id and are not one student's (``alice/`` and ``@alice/``; two Moodle folders of participant 42
with different names) are both refused, never merged: neither is graded, the student's Grading notes say
so, and the instructor sees both named (``id-collision`` in the repairs and log.csv, a WARNING on the
terminal). An entry whose name holds two LMS ids is refused alone.

For every student it picks the lab's notebook (the expected name, then "Copy of …", "… (1)" and
other renamed copies, then the only notebook there is), repairs it (``autograder.collect.repair``) against the
release in the notebook's language (``autograder.course.languages``: its prose stays the student's), writes it to
``submitted/<student>/<LAB>/<notebook>`` and keeps the original beside the work folder. Each student's
repairs go to ``reports/<LAB>/repairs.csv``; students are listed in ``reports/<LAB>/roster.csv`` with what the
LMS's download says of each (``entry_names``): which LMS, its id for the student (Canvas's user id, Moodle's
participant id), the full name where the download carries one (Moodle's; Canvas writes only a slug of the
name, kept in ``name``) and whether the submission is late (Canvas marks it ``LATE``: yes or no; Moodle's
download does not say: empty). Nothing is guessed: what the download does not carry is left empty.

Every name below ``SOURCE`` is a student's, and is read with ``autograder.collect.entries``: only regular
files, never through a link, within limits per entry and per student. An entry that is not one (a link,
a FIFO, a device, a zip entry that leaves its folder or is too large) is refused alone: its student's
other files and every other student are collected, and it is named with its reason in the repairs, the
student's Grading notes and on the terminal.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import nbformat

from autograder.course.languages import speaking, submitted_language, translated_releases
from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.collect.entries import (
    MAX_ENTRY,
    MAX_STUDENT,
    SKIPPED,
    Budget,
    Entry,
    Refused,
    open_folder,
    read_file,
    walk,
    write_new,
    zip_entries,
)
from autograder.collect.entry_names import MOODLE_FOLDER, Reading, collisions, read_entry, safe_id
from autograder.collect.repair import Repaired, add_note, repair

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
        parts = _relative(info.filename)
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
        top, folder = _top(info.filename, wrapper)
        if top not in (".", "..") and not top.startswith(".") and top not in SKIPPED:
            tops[top] = tops.get(top, False) or folder or info.is_dir()
        sid = _owner(info.filename, wrapper).student
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


def pick_notebook(files: List[Path], expected: str) -> Tuple[Optional[Path], List[str]]:
    """The file to grade as ``expected`` and what was skipped."""
    notebooks = [
        f for f in files if f.suffix == ".ipynb" and ".ipynb_checkpoints" not in f.parts and "__MACOSX" not in f.parts
    ]
    stem = expected[: -len(".ipynb")]
    by_rank = sorted(notebooks, key=lambda f: (_rank(f.name, stem), len(f.name), str(f)))
    if not by_rank:
        return None, [f.name for f in files]
    chosen = by_rank[0]
    if _rank(chosen.name, stem) == 3 and len(notebooks) > 1:
        return None, [f.name for f in notebooks]  # several unrelated notebooks: nothing to choose by
    return chosen, [f.name for f in notebooks if f is not chosen]


def notebooks_of_the_lab(files: List[Path], grade_ids: Iterable[str]) -> List[Path]:
    """Of ``files``, the notebooks whose content is this lab's: valid JSON whose cells carry one of the lab's
    ``grade_ids`` in their nbgrader metadata, read as collection reads (``read_file``: plain files, in limits)."""
    wanted = set(grade_ids)
    found = []
    for path in files:
        if path.suffix != ".ipynb" or ".ipynb_checkpoints" in path.parts or "__MACOSX" in path.parts:
            continue
        try:
            cells = json.loads(read_file(path).decode("utf-8-sig", errors="replace")).get("cells", [])
            ids = {nbgrader_meta(c).get("grade_id") for c in cells if isinstance(c, dict)}
        except (Refused, ValueError, AttributeError, OSError):
            continue
        if ids & wanted:
            found.append(path)
    return found


def _nothing_to_grade(release, kind: str, detail: str, note: str) -> Repaired:
    """The release, graded in place of a submission that gave no one notebook of the lab, with why."""
    result = Repaired(notebook=copy.deepcopy(release))
    add_note(result, kind, detail, note)
    return result


def _rank(name: str, stem: str) -> int:
    if name == f"{stem}.ipynb":
        return 0
    plain = re.sub(r"^(copy of |copie de |kopie von )", "", name.lower())
    plain = re.sub(r"(\s*\(\d+\)|-\d+|_\d+|\s+copy(\s*\d+)?|-checkpoint)(?=\.ipynb$)", "", plain)
    if plain == f"{stem.lower()}.ipynb":
        return 1
    return 2 if stem.lower() in name.lower() else 3


def collect(lab: str, source: Path, course_root: Path, release_dir: Path, notebook: str) -> List[dict]:
    """Write every student's repaired notebook; return one record per student."""
    with tempfile.TemporaryDirectory() as scratch:
        return write_submissions(lab, gather(source, Path(scratch)), course_root, release_dir, notebook)


def _note_superseded(repaired, submission: Submission) -> None:
    """Say which of several submissions was graded (the student's Grading notes, the instructor's log), and keep
    a ``superseded`` line for each earlier one."""
    graded = submission.submitted_at or "the latest"
    earlier = submission.superseded
    add_note(
        repaired,
        "graded-submission",
        f"{graded} (latest of {len(earlier) + 1})",
        f"You submitted {len(earlier) + 1} times: your latest submission, of {graded}, was graded. "
        f"{'Your earlier one' if len(earlier) == 1 else 'Your earlier ones'} ({', '.join(earlier)}) "
        f"{'was' if len(earlier) == 1 else 'were'} superseded by it and not graded.",
    )
    for when in earlier:
        repaired.log.append(("superseded", f"submission of {when} superseded by {graded}"))


def write_submissions(
    lab: str,
    submissions: Dict[str, Submission],
    course_root: Path,
    release_dir: Path,
    notebook: str,
    keep: Tuple[str, ...] = (),
) -> List[dict]:
    """Repair and write each student's notebook to ``submitted/<student>/<lab>/``; one record per student.

    ``keep``: names of other files of a submission copied beside the notebook as they are (nbgrader's
    exchange puts ``timestamp.txt`` and ``submission_secret.txt`` there: feedback is released with them).
    Files are read with ``entries.read_file`` (never through a link); every entry refused, in
    ``Submission.refused`` or here, is a ``refused-entry`` line of the student's repairs and a note in
    their Grading notes. A collided submission (``Submission.collided``) is written as the release with
    an ``id-collision`` line naming its entries and a note that says none was graded (its refused entries
    are the instructor's only: whose they are is not known). Bad arguments are refused before anything is
    written."""
    bad = [name for name in keep if not name or "/" in name or name.endswith(".ipynb")]
    if bad:
        raise ValueError(f"keep names plain non-notebook files, got {bad}")
    unsafe = sorted(sid for sid in submissions if safe_id(sid) != sid)
    if unsafe:
        raise ValueError(f"unsafe student id {unsafe[0]!r}")
    release = nbformat.read(release_dir / lab / notebook, as_version=4)
    releases = {
        language: nbformat.reads(json.dumps(data), as_version=4)
        for language, data in translated_releases(release_dir, lab, notebook).items()
    }
    grade_ids = [nbgrader_meta(c).get("grade_id") for c in release.cells if nbgrader_meta(c).get("grade")]
    work = course_root / "autograder" / "work"
    records = []
    for sid, submission in sorted(submissions.items()):
        collided = bool(submission.collided)
        chosen, skipped = (None, []) if collided else pick_notebook(submission.files, notebook)
        ours: List[Path] = []
        if chosen is None and not collided:  # no name to go by: the lab's notebooks are known by their cells
            ours = notebooks_of_the_lab(submission.files, grade_ids)
            if len(ours) == 1:
                chosen, skipped = ours[0], [name for name in skipped if name != ours[0].name]
        raw, refused = b"", list(submission.refused)
        if chosen is not None:
            try:
                raw = read_file(chosen)
            except Refused as why:
                refused.append((chosen.name, str(why)))
                chosen = None
        name = chosen.name if chosen is not None else "(none)"
        if collided:
            repaired = _collision(sid, submission.collided, release)
        elif chosen is None and len(ours) > 1:
            names = ", ".join(f"`{_shown(p.name)}`" for p in ours)
            repaired = _nothing_to_grade(
                release,
                "several-notebooks",
                ", ".join(p.name for p in ours),
                f"Your submission holds {len(ours)} notebooks of this lab ({names}), so none was graded: the "
                f"autograder cannot tell which one you want graded. Submit one notebook, `{notebook}`.",
            )
        elif chosen is None:
            repaired = _nothing_to_grade(
                release,
                "no-notebook",
                f"files: {', '.join(skipped) or 'none'}",
                f"No notebook of this lab was found in your submission, so nothing was graded. Submit the lab's "
                f"notebook, `{notebook}` (File > Download in JupyterLab or Colab).",
            )
        else:
            language = submitted_language(raw)  # its prose and notes stay in the student's language
            with speaking(language):
                repaired = repair(raw, releases.get(language, release), file_name=chosen.name, expected_name=notebook)
            if skipped:
                repaired.log.append(("skipped-files", ", ".join(skipped)))
        for entry, reason in refused:
            if collided:
                repaired.log.append(("refused-entry", f"{entry}: {reason}"))
                continue
            add_note(
                repaired,
                "refused-entry",
                f"{entry}: {reason}",
                f"Your file `{_shown(entry)}` was not collected: {reason}. Only plain files are collected (not "
                f"links to files elsewhere, pipes or devices), each of at most {MAX_ENTRY >> 20} MB: submit "
                "the notebook file itself.",
            )
        if submission.superseded and not collided:
            _note_superseded(repaired, submission)
        if submission.unlisted and not collided:
            add_note(
                repaired,
                "refused-entry",
                f"{submission.unlisted} more entries refused",
                f"{submission.unlisted} more of your files were not collected.",
            )
        target = work / "submitted" / sid / lab
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        nbformat.write(repaired.notebook, target / notebook)
        for kept in (f for f in submission.files if f.name in keep and ".ipynb_checkpoints" not in f.parts):
            try:
                (target / kept.name).write_bytes(read_file(kept))
            except Refused as why:
                repaired.log.append(("refused-entry", f"{kept.name}: {why}"))
        originals = work / "originals" / lab / sid
        if originals.exists():
            shutil.rmtree(originals)
        originals.mkdir(parents=True)
        if chosen is not None:
            (originals / chosen.name).write_bytes(raw)
        records.append(
            {
                "student": sid,
                "name": submission.name,
                "file": name,
                "repairs": repaired.log,
                "lms": submission.lms,
                "lms_id": submission.lms_id,
                "full_name": submission.full_name,
                "late": submission.late,
            }
        )
    kept = write_reports(work / "reports" / lab, records)
    if kept:
        print(
            f"{lab}: {len(records)} student(s) collected now, {kept} kept from an earlier collection "
            f"(roster.csv lists both)"
        )
    return records


def _collision(sid: str, entries: List[str], release) -> Repaired:
    """The release, to grade in place of a student whose id several entries gave, with the instructor's
    ``id-collision`` line (every entry named) and the student's note (no other entry named: another
    student's name is not theirs to read)."""
    result = Repaired(notebook=copy.deepcopy(release))
    add_note(
        result,
        "id-collision",
        f"{len(entries)} entries give the student id {sid}: {', '.join(repr(_shown(e)) for e in entries)}; "
        "none was graded: rename them in the export so that each names its own student, and collect again",
        f"Nothing was graded for you: {len(entries)} entries of the class's submissions were all read as "
        f"your student id, {sid}, and the autograder cannot tell which one is yours, so it graded none of "
        "them. Your instructor has their names and will sort it out.",
    )
    return result


def _shown(name: str) -> str:
    """A file name a student chose, fit to quote in a code span of the Grading notes: one line, no backtick."""
    plain = "".join(c if c.isprintable() else "?" for c in name).replace("`", "'")
    return plain if len(plain) <= 120 else plain[:117] + "..."


def write_reports(folder: Path, records: List[dict]) -> int:
    """Write ``roster.csv``, ``repairs.csv`` and ``collected.json`` for a lab: ``records`` merged with what an
    earlier collection of the lab wrote there (a student collected again is replaced, the others are kept: one
    late resubmission collected alone does not drop the class). Returns how many earlier students were kept."""
    folder.mkdir(parents=True, exist_ok=True)
    now = {r["student"] for r in records}
    kept = [r for r in _earlier_records(folder / "collected.json") if r.get("student") not in now]
    records = sorted(kept + list(records), key=lambda r: r["student"])
    with open(folder / "roster.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(ROSTER_COLUMNS)
        writer.writerows(
            [
                r["student"],
                r["name"],
                r["file"],
                r.get("lms", ""),
                r.get("lms_id", ""),
                r.get("full_name", ""),
                late_word(r.get("late")),
            ]
            for r in records
        )
    with open(folder / "repairs.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "kind", "detail"])
        for record in records:
            writer.writerows([record["student"], kind, detail] for kind, detail in record["repairs"])
    (folder / "collected.json").write_text(json.dumps(records, indent=1))
    return len(kept)


ROSTER_COLUMNS = ["student_id", "name", "file", "lms", "lms_id", "full_name", "late"]


def late_word(late: Optional[bool]) -> str:
    """``late`` as roster.csv and grades.csv write it: "yes", "no", or "" where the download does not say."""
    if late is not None and not isinstance(late, bool):
        raise ValueError(f"late is True, False or None (not said), got {late!r}")
    return "" if late is None else ("yes" if late else "no")


def _earlier_records(path: Path) -> List[dict]:
    """The records an earlier collection wrote (``[]`` when there is none, or it cannot be read as records)."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(records, list):
        return []
    return [
        r
        for r in records
        if isinstance(r, dict) and isinstance(r.get("student"), str) and {"name", "file", "repairs"} <= set(r)
    ]


def main(argv=None) -> int:
    from autograder.course.layout import LABS, RELEASE_DIR, ROOT

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lab", choices=sorted(LABS))
    parser.add_argument("source", type=Path, help="a folder or a zip (Canvas, Moodle, or one entry per student)")
    args = parser.parse_args(argv)
    if not args.source.exists():
        parser.error(f"{args.source} does not exist")
    try:
        records = collect(args.lab, args.source, ROOT, RELEASE_DIR, LABS[args.lab])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    repaired = sum(1 for r in records if any(k not in ("added-cells",) for k, _ in r["repairs"]))
    reports = Path(ROOT).resolve() / 'autograder' / 'work' / 'reports' / args.lab
    print(f"{args.lab}: {len(records)} students collected, {repaired} with repairs (see {reports / 'repairs.csv'})")
    late = [r["student"] for r in records if r.get("late")]
    if late:
        print(
            f"{args.lab}: {len(late)} submission(s) the LMS marks late: {', '.join(late)} "
            f"(the late column of {reports / 'roster.csv'} and of grades.csv)"
        )
    for record in records:
        kinds = sorted({k for k, _ in record["repairs"]} - {"added-cells"})
        if kinds:
            print(f"  {record['student']:>16}  {record['file']}: {', '.join(kinds)}")
    print_refused(records)
    return 0


def print_refused(records: List[dict]) -> None:
    """A warning line on stderr for every entry refused, with its student and the reason, and for every id
    that several entries gave (``id-collision``), with every entry."""
    for record in records:
        for kind, detail in record["repairs"]:
            if kind == "refused-entry":
                print(f"WARNING: refused for {record['student']}: {detail}", file=sys.stderr)
            elif kind == "id-collision":
                print(f"WARNING: id collision: {detail}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
