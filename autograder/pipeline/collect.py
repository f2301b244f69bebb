"""Collect a lab's submissions from a folder or a zip, as an LMS exports them, into nbgrader's layout.

``python -m autograder.pipeline.collect LAB SOURCE`` (``make collect LAB=... FROM=...``) accepts:

- a folder or a zip with one entry per student: a sub-folder, a zip, or a notebook;
- Canvas's "Download Submissions" zip: ``<name>[_late]_<user id>_<attachment id>_<file name>``;
- Moodle's "Download all submissions" zip, with or without a folder per student:
  ``<Full Name>_<participant id>_assignsubmission_file_[/]<file name>``.

For every student it picks the lab's notebook (the expected name, then "Copy of …", "… (1)" and
other renamed copies, then the only notebook there is), repairs it (``autograder.pipeline.repair``), writes it to
``submitted/<student>/<LAB>/<notebook>`` and keeps the original beside the work folder. Each student's
repairs go to ``reports/<LAB>/repairs.csv``; students are listed in ``reports/<LAB>/roster.csv``.
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import nbformat

from autograder.pipeline.repair import repair

CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?:_late)?_(?P<id>\d+)_(?P<attachment>\d+)_(?P<file>.+)$", re.I)
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_[a-z]+_(?P<file>.*)$")
MAX_UNZIPPED = 512 * 1024 * 1024  # a class's zip is a few MB; more is a zip bomb
MAX_NOTEBOOK = 64 * 1024 * 1024


@dataclass
class Submission:
    student: str
    name: str = ""
    files: List[Path] = field(default_factory=list)


def student_key(entry: str) -> Tuple[str, str, str]:
    """``(student id, display name, file name inside)`` from an LMS entry name."""
    for pattern in (MOODLE, CANVAS):
        found = pattern.match(entry)
        if found:
            return found["id"], found["name"], found["file"]
    stem = entry[:-len(Path(entry).suffix)] if Path(entry).suffix in (".zip", ".ipynb") else entry
    return safe_id(stem), stem, entry


def safe_id(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._")
    return cleaned or "student"


def safe_extract(archive: Path, target: Path) -> None:
    """Unzip without leaving ``target`` and without unpacking more than ``MAX_UNZIPPED`` bytes."""
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if sum(m.file_size for m in members) > MAX_UNZIPPED:
            raise ValueError(f"{archive.name} unpacks to more than {MAX_UNZIPPED >> 20} MB")
        root = target.resolve()
        for member in members:
            destination = (target / member.filename).resolve()
            if not str(destination).startswith(str(root) + "/"):
                raise ValueError(f"{archive.name} has an entry outside its folder: {member.filename}")
            destination.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)


def gather(source: Path, scratch: Path) -> Dict[str, Submission]:
    """Every student's files, by student id (zips unpacked, one level of nested zips too)."""
    if source.is_file() and source.suffix == ".zip":
        unpacked = scratch / "export"
        safe_extract(source, unpacked)
        source = unpacked
    entries = sorted(p for p in source.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX")
    if len(entries) == 1 and entries[0].is_dir() and not MOODLE.match(entries[0].name):
        entries = sorted(p for p in entries[0].iterdir() if not p.name.startswith("."))  # zip of one folder
    found: Dict[str, Submission] = {}
    for number, entry in enumerate(entries):
        sid, name, inner = student_key(entry.name)
        submission = found.setdefault(sid, Submission(student=sid, name=name))
        if entry.is_dir():
            submission.files += sorted(p for p in entry.rglob("*") if p.is_file())
        elif entry.suffix == ".zip":
            folder = scratch / f"zip-{number}"
            try:
                safe_extract(entry, folder)
                submission.files += sorted(p for p in folder.rglob("*") if p.is_file())
            except (zipfile.BadZipFile, ValueError) as error:
                print(f"warning: {entry.name}: {error}", file=sys.stderr)
        else:
            renamed = scratch / f"file-{number}" / inner
            renamed.parent.mkdir(parents=True)
            shutil.copy(entry, renamed)
            submission.files.append(renamed)
    return found


def pick_notebook(files: List[Path], expected: str) -> Tuple[Optional[Path], List[str]]:
    """The file to grade as ``expected`` and what was skipped."""
    notebooks = [f for f in files if f.suffix == ".ipynb" and ".ipynb_checkpoints" not in f.parts
                 and "__MACOSX" not in f.parts]
    stem = expected[:-len(".ipynb")]
    by_rank = sorted(notebooks, key=lambda f: (_rank(f.name, stem), len(f.name), str(f)))
    if not by_rank:
        return None, [f.name for f in files]
    chosen = by_rank[0]
    if _rank(chosen.name, stem) == 3 and len(notebooks) > 1:
        return None, [f.name for f in notebooks]  # several unrelated notebooks: nothing to choose by
    return chosen, [f.name for f in notebooks if f is not chosen]


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


def write_submissions(lab: str, submissions: Dict[str, Submission], course_root: Path, release_dir: Path,
                      notebook: str, keep: Tuple[str, ...] = ()) -> List[dict]:
    """Repair and write each student's notebook to ``submitted/<student>/<lab>/``; one record per student.

    ``keep``: names of other files of a submission copied beside the notebook as they are (nbgrader's
    exchange puts ``timestamp.txt`` and ``submission_secret.txt`` there: feedback is released with them)."""
    bad = [name for name in keep if not name or "/" in name or name.endswith(".ipynb")]
    if bad:
        raise ValueError(f"keep names plain non-notebook files, got {bad}")
    release = nbformat.read(release_dir / lab / notebook, as_version=4)
    work = course_root / "autograder" / "work"
    records = []
    for sid, submission in sorted(submissions.items()):
        if safe_id(sid) != sid:
            raise ValueError(f"unsafe student id {sid!r}")
        chosen, skipped = pick_notebook(submission.files, notebook)
        if chosen is None or chosen.stat().st_size > MAX_NOTEBOOK:
            raw, name = b"", "(none)"
            if chosen is not None:
                skipped = [f"{chosen.name} (larger than {MAX_NOTEBOOK >> 20} MB)"]
        else:
            raw, name = chosen.read_bytes(), chosen.name
        repaired = repair(raw, release, file_name=name, expected_name=notebook)
        if chosen is None:
            repaired.log.insert(0, ("no-notebook", f"files: {', '.join(skipped) or 'none'}"))
        elif skipped:
            repaired.log.append(("skipped-files", ", ".join(skipped)))
        target = work / "submitted" / sid / lab
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        nbformat.write(repaired.notebook, target / notebook)
        for kept in (f for f in submission.files if f.name in keep and ".ipynb_checkpoints" not in f.parts):
            shutil.copy(kept, target / kept.name)
        originals = work / "originals" / lab / sid
        if originals.exists():
            shutil.rmtree(originals)
        originals.mkdir(parents=True)
        if chosen is not None:
            shutil.copy(chosen, originals / chosen.name)
        records.append({"student": sid, "name": submission.name, "file": name, "repairs": repaired.log})
    write_reports(work / "reports" / lab, records)
    return records


def write_reports(folder: Path, records: List[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "roster.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "name", "file"])
        writer.writerows([r["student"], r["name"], r["file"]] for r in records)
    with open(folder / "repairs.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "kind", "detail"])
        for record in records:
            writer.writerows([record["student"], kind, detail] for kind, detail in record["repairs"])
    (folder / "collected.json").write_text(json.dumps(records, indent=1))


def main(argv=None) -> int:
    from autograder.pipeline.labs import LABS, RELEASE_DIR, ROOT

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lab", choices=sorted(LABS))
    parser.add_argument("source", type=Path, help="a folder or a zip (Canvas, Moodle, or one entry per student)")
    args = parser.parse_args(argv)
    if not args.source.exists():
        parser.error(f"{args.source} does not exist")
    records = collect(args.lab, args.source, ROOT, RELEASE_DIR, LABS[args.lab])
    repaired = sum(1 for r in records if any(k not in ("added-cells",) for k, _ in r["repairs"]))
    print(f"{args.lab}: {len(records)} students collected, {repaired} with repairs "
          f"(see autograder/work/reports/{args.lab}/repairs.csv)")
    for record in records:
        kinds = sorted({k for k, _ in record["repairs"]} - {"added-cells"})
        if kinds:
            print(f"  {record['student']:>16}  {record['file']}: {', '.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
