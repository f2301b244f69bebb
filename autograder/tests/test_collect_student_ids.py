"""One student id to one student's entries only (``autograder.collect.collect``, ``entry_names``): entries that give
the same id are all refused, never merged; a name in any script gets an id of its own, the name as written kept.
What an entry may hold (links, sizes, paths): test_collect_entries.py."""

from __future__ import annotations

import csv
import html
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from collect_inputs import HONEST, LAB, NOTEBOOK, SOLVED, link_entry, write_class

from autograder.collect import collect, entry_names
from autograder.course.layout import RELEASE_DIR
from autograder.grade import grade


# ---- one id, one student: colliding entries (the red team's collection attacks; attacks.py holds notebooks) ----
def _collected(source: Path, root: Path, capsys, students: list):
    """Collect ``source`` as ``make collect`` does, write log.csv as ``make grade`` does; return the records by
    student, the ``id-collision`` rows of repairs.csv and log.csv, and what went to the terminal's stderr."""
    records = collect.collect(LAB, source, root, root / "course", NOTEBOOK)
    collect.print_refused(records)
    work = root / "autograder" / "work"
    grade.summarize(LAB, students, {}, work, work / "reports" / LAB)
    rows = {}
    for name in ("repairs.csv", "log.csv"):
        with open(work / "reports" / LAB / name, newline="") as handle:
            rows[name] = [(r["student_id"], r["detail"]) for r in csv.DictReader(handle) if r["kind"] == "id-collision"]
    return {r["student"]: r for r in records}, rows, capsys.readouterr().err


@pytest.mark.parametrize("path", ["folder", "moodle"])
def test_colliding_collect_entries_are_refused_and_both_named(tmp_path, capsys, path):
    """Two entries that give one student id, on the class folder's path (``alice/`` and ``@alice/``) and on
    Moodle's (participant 42's folder under two names, in the zip): neither is graded (the release is, with a
    note that says why and names no other entry), both are named in repairs.csv, log.csv and a WARNING, and
    the student beside them is collected as ever (a Moodle student's two plugins are one student)."""
    if path == "folder":
        source = tmp_path / "export"
        for entry, content in (("alice", HONEST), ("@alice", SOLVED), ("bob", SOLVED)):
            (source / entry).mkdir(parents=True)
            (source / entry / NOTEBOOK).write_bytes(content)
        sid, clashing, other = "alice", ["@alice", "alice"], "bob"
    else:
        source = tmp_path / "class.zip"
        clashing = ["Alice Smith_42_assignsubmission_file", "Mallory Jones_42_assignsubmission_file"]
        with zipfile.ZipFile(source, "w") as zf:
            zf.writestr(f"{clashing[0]}/{NOTEBOOK}", HONEST)
            zf.writestr(f"{clashing[1]}/{NOTEBOOK}", SOLVED)
            link_entry(zf, f"{clashing[1]}/notes.txt", "/etc/passwd")
            zf.writestr(f"Bob Ray_8_assignsubmission_file/{NOTEBOOK}", SOLVED)
            zf.writestr("Bob Ray_8_assignsubmission_onlinetext/onlinetext.html", "<p>mine</p>")
        sid, other = "42", "8"
    root = write_class(tmp_path / "course-root")

    records, rows, err = _collected(source, root, capsys, [sid, other])

    work = root / "autograder" / "work"
    graded = nbformat.read(work / "submitted" / sid / LAB / NOTEBOOK, as_version=4)
    notes = html.unescape(graded.cells[0].source)
    assert records[sid]["file"] == "(none)" and "BEGIN SOLUTION" not in nbformat.writes(graded)
    assert "Nothing was graded for you" in notes and not any(e in notes for e in clashing if e != sid), notes
    assert "was not collected" not in notes  # a refused file of either entry is the instructor's to read
    assert list((work / "originals" / LAB / sid).iterdir()) == []
    for where in (
        rows["repairs.csv"],
        rows["log.csv"],
        [(sid, line) for line in err.splitlines() if line.startswith("WARNING: id collision")],
    ):
        assert len(where) == 1 and where[0][0] == sid and all(repr(e) in where[0][1] for e in clashing), where
    assert records[other]["file"] == NOTEBOOK and "id-collision" not in {k for k, _ in records[other]["repairs"]}
    if path == "moodle":
        assert ("refused-entry", f"{clashing[1]}/notes.txt: it is a symbolic link") in records[sid]["repairs"]


def test_an_entry_refused_whole_still_collides_with_the_entry_that_gives_its_id(tmp_path):
    """The zip's directory names every top-level entry: one whose every file is refused still gives its id."""
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"alice/{NOTEBOOK}", HONEST)
        link_entry(zf, f"@alice/{NOTEBOOK}", "/etc/shadow")
        zf.writestr(f"bob/{NOTEBOOK}", HONEST)
    found = collect.gather(archive, tmp_path / "scratch")
    assert found["alice"].collided == ["@alice", "alice"] and found["alice"].files == []
    assert found["bob"].collided == [] and [f.read_bytes() for f in found["bob"].files] == [HONEST]


def test_a_moodle_display_name_that_carries_another_participants_id_takes_nothing_of_theirs(tmp_path):
    """A folder's participant id is the group that ends its name: Mallory's display name that carries
    ``_42_assignsubmission_file_`` is participant 7's, and participant 42 keeps their own notebook."""
    export = tmp_path / "export"
    for folder, content in (
        ("Alice Smith_42_assignsubmission_file", HONEST),
        ("Mallory_42_assignsubmission_file__7_assignsubmission_file", SOLVED),
    ):
        (export / folder).mkdir(parents=True)
        (export / folder / NOTEBOOK).write_bytes(content)
    found = collect.gather(export, tmp_path / "scratch")
    assert sorted(found) == ["42", "7"] and not any(s.collided or s.refused for s in found.values())
    assert [f.read_bytes() for f in found["42"].files] == [HONEST]
    assert [f.read_bytes() for f in found["7"].files] == [SOLVED]


def test_a_flat_moodle_file_named_with_another_participants_id_is_refused_alone(tmp_path):
    """In Moodle's flat layout the file name after its prefix is the student's: one that carries another
    participant's group (42's, who submitted; 99's, who did not) is refused, noted for its uploader, and
    gives nobody else anything."""
    export = tmp_path / "export"
    export.mkdir()
    files = {
        f"Alice Smith_42_assignsubmission_file_{NOTEBOOK}": HONEST,
        f"Mallory_7_assignsubmission_file_{NOTEBOOK}": HONEST,
        f"Mallory_7_assignsubmission_file_x_42_assignsubmission_file_{NOTEBOOK}": SOLVED,
        f"Mallory_7_assignsubmission_file_x_99_assignsubmission_file_{NOTEBOOK}": SOLVED,
    }
    for name, content in files.items():
        (export / name).write_bytes(content)
    found = collect.gather(export, tmp_path / "scratch")
    assert sorted(found) == ["42", "7"] and not any(s.collided for s in found.values())
    assert [f.read_bytes() for f in found["42"].files] == [HONEST] and found["42"].refused == []
    assert [f.read_bytes() for f in found["7"].files] == [HONEST]
    assert [(e, r.split(" (")[0]) for e, r in found["7"].refused] == [
        (name, "its name holds more than one LMS student id") for name in sorted(files)[2:]
    ]


def test_one_students_entries_share_an_id_and_two_students_entries_collide():
    read = entry_names.read_entry
    one_student = [
        read("Bob Ray_8_assignsubmission_file", True),
        read("Bob Ray_8_assignsubmission_onlinetext", True),
        read(f"doejane_12345_1_{NOTEBOOK}", False),
        read("doejane_late_12345_2_notes.txt", False),
        read(f"Jo Li_5_assignsubmission_file_{NOTEBOOK}", False),
        read("Jo Li_5_assignsubmission_file_a.py", False),
    ]
    assert entry_names.collisions(one_student) == {}
    clashing = [
        read("42", True),
        read("Alice Smith_42_assignsubmission_file", True),
        read("bob smith", True),
        read("bob_smith.zip", False),
        read("bob_smith", True),
    ]
    assert entry_names.collisions(clashing) == {
        "42": ["42", "Alice Smith_42_assignsubmission_file"],
        "bob_smith": ["bob smith", "bob_smith", "bob_smith.zip"],
    }
    with pytest.raises(ValueError, match="Readings"):
        entry_names.collisions(["alice", "@alice"])


def test_collecting_one_resubmission_keeps_the_rest_of_the_class(tmp_path, capsys):
    """A later collection of the lab (a late resubmission, a new student) replaces its students' lines in
    roster.csv and repairs.csv and keeps every other student's, and the terminal says how many were kept."""
    first = tmp_path / "export"
    for sid in ("alice", "bob"):
        (first / sid).mkdir(parents=True)
        (first / sid / NOTEBOOK).write_bytes(HONEST)
    (first / "bob" / "notes.txt").write_text("not a notebook")
    root = write_class(tmp_path / "course-root")
    collect.collect(LAB, first, root, root / "course", NOTEBOOK)
    late = tmp_path / "late"  # bob again, and carol for the first time
    for sid, name in (("bob", "my lab.ipynb"), ("carol", NOTEBOOK)):
        (late / sid).mkdir(parents=True)
        (late / sid / name).write_bytes(HONEST)
    records = collect.collect(LAB, late, root, root / "course", NOTEBOOK)
    assert [r["student"] for r in records] == ["bob", "carol"]
    assert "2 student(s) collected now, 1 kept from an earlier collection" in capsys.readouterr().out
    reports = root / "autograder" / "work" / "reports" / LAB
    with open(reports / "roster.csv", newline="") as handle:
        roster = {row["student_id"]: row["file"] for row in csv.DictReader(handle)}
    assert roster == {"alice": NOTEBOOK, "bob": "my lab.ipynb", "carol": NOTEBOOK}
    with open(reports / "repairs.csv", newline="") as handle:
        bob = {row["kind"] for row in csv.DictReader(handle) if row["student_id"] == "bob"}
    assert "file-name" in bob and "skipped-files" not in bob  # the late entry's repairs, not the first one's


def test_the_labs_notebook_is_known_by_its_cells_when_its_name_says_nothing(tmp_path):
    """Notebooks under names that say nothing: the one whose cells carry the lab's grade ids is graded, the other
    skipped; two of the lab are both named to the student and neither is graded (no false invalid-JSON note);
    none of the lab is "no notebook", again without an invalid-JSON note."""
    other = (RELEASE_DIR / "03-decode-growth" / "decode_growth.ipynb").read_bytes()
    export = tmp_path / "export"
    for sid, files in (
        ("one", {"final.ipynb": SOLVED, "scratch.ipynb": other}),
        ("two", {"final.ipynb": SOLVED, "final v2.ipynb": HONEST}),
        ("none", {"notes.ipynb": other, "scratch.ipynb": other}),
    ):
        (export / sid).mkdir(parents=True)
        for name, data in files.items():
            (export / sid / name).write_bytes(data)
    root = write_class(tmp_path / "course-root")
    records = {r["student"]: r for r in collect.collect(LAB, export, root, root / "course", NOTEBOOK)}
    kinds = {sid: [k for k, _ in r["repairs"]] for sid, r in records.items()}
    assert records["one"]["file"] == "final.ipynb" and "skipped-files" in kinds["one"]
    assert "several-notebooks" in kinds["two"] and records["two"]["file"] == "(none)"
    assert "no-notebook" in kinds["none"]
    assert not any("invalid-json" in k for k in kinds.values()), kinds
    notes = nbformat.read(root / "autograder" / "work" / "submitted" / "two" / LAB / NOTEBOOK, as_version=4)
    text = html.unescape(notes.cells[0].source)
    assert "2 notebooks of this lab" in text and "final v2.ipynb" in text and "final.ipynb" in text


# ---- names in any script (issue 49): an id of its own for every student, the name as written kept ----
@pytest.mark.parametrize(
    "name, expected",
    [
        ("张三", "ZhangSan-"),
        ("李四", "LiSi-"),
        ("ａｌｉｃｅ", "alice-"),  # fullwidth: NFKC reads it as alice, the suffix keeps it apart from alice/
        ("Иван Петров", "Ivan_Petrov-"),
        ("alice", "alice"),  # a name in ASCII keeps the id it always had
        ("@alice", "alice"),  # (and so still collides with alice: refused, never merged)
    ],
)
def test_a_name_in_any_script_gets_a_readable_id_of_its_own(name, expected):
    sid = entry_names.student_id(name)
    assert sid.startswith(expected) and sid == entry_names.safe_id(sid) and sid == entry_names.student_id(name)
    if not name.isascii():
        assert len(sid) == len(expected) + entry_names.SUFFIX_HEX and sid != entry_names.student_id(name + " ")
    reading = entry_names.read_entry(name, True)
    assert (reading.student, reading.name) == (sid, name)


def test_names_that_read_alike_in_ascii_are_two_students():
    """Simplified and traditional 张伟/張偉 are both ZhangWei, ａｌｉｃｅ and alice both alice: never one id."""
    ids = {n: entry_names.student_id(n) for n in ("张伟", "張偉", "ａｌｉｃｅ", "alice")}
    assert len(set(ids.values())) == 4 and ids["张伟"][:9] == ids["張偉"][:9] == "ZhangWei-", ids
    readings = [entry_names.read_entry(n, True) for n in ids]
    assert entry_names.collisions(readings) == {}


def _without_utf8_flag(archive: Path) -> None:
    """Clear the UTF-8 flag (bit 11) of every entry, in its local header and in the directory: names stay UTF-8
    bytes, as rubyzip writes them unless ``Zip.unicode_names`` is set."""
    raw = bytearray(archive.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = raw.find(signature)
        while at >= 0:
            flags = struct.unpack_from("<H", raw, at + offset)[0]
            struct.pack_into("<H", raw, at + offset, flags & ~0x800)
            at = raw.find(signature, at + 4)
    archive.write_bytes(bytes(raw))


def test_chinese_names_of_a_canvas_and_a_moodle_download_are_read_as_written_flag_or_not(tmp_path):
    """Canvas keeps a CJK display name in its file names (``sanitize_file_name`` keeps ``[[:word:]]``), Moodle in its
    folders; a zip that stores them as UTF-8 without the UTF-8 flag is read as UTF-8, not CP437."""
    root = write_class(tmp_path / "course-root")
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"张三_late_12345_987001_{NOTEBOOK}", HONEST)
        zf.writestr(f"李四_4242_assignsubmission_file_/{NOTEBOOK}", HONEST)
    _without_utf8_flag(archive)
    with zipfile.ZipFile(archive) as zf:
        assert "张三" not in zf.namelist()[0]  # Python alone reads the names as CP437
    records = {r["student"]: r for r in collect.collect(LAB, archive, root, root / "course", NOTEBOOK)}
    assert (records["12345"]["name"], records["12345"]["lms"], records["12345"]["late"]) == ("张三", "canvas", True)
    assert (records["4242"]["full_name"], records["4242"]["lms"]) == ("李四", "moodle")
    with open(root / "autograder" / "work" / "reports" / LAB / "roster.csv", newline="", encoding="utf-8") as handle:
        assert {r["student_id"]: r["name"] for r in csv.DictReader(handle)} == {"12345": "张三", "4242": "李四"}


def test_a_canvas_download_with_names_out_of_its_form_is_said_on_the_terminal(tmp_path, capsys):
    """A file renamed out of Canvas's form (``doe_jane_...``: Canvas never writes ``_`` in the name) falls back to its
    whole name, with no Canvas id and no late flag: the instructor is told, with what to do."""
    root = write_class(tmp_path / "course-root")
    export = tmp_path / "export"
    export.mkdir()
    (export / f"smithbob_23456_987002_{NOTEBOOK}").write_bytes(HONEST)
    (export / f"doe_jane_LATE_12345_987001_{NOTEBOOK}").write_bytes(HONEST)
    records = {r["student"]: r for r in collect.collect(LAB, export, root, root / "course", NOTEBOOK)}
    collect.print_refused(list(records.values()))
    err = capsys.readouterr().err
    fallen = next(r for sid, r in records.items() if sid != "23456")
    assert fallen["lms"] == "" and fallen["late"] is None and "not-lms-form" in [k for k, _ in fallen["repairs"]]
    assert "does not match Canvas's file names" in err and "no Canvas user id and no late flag" in err, err
    assert "23456" not in err and not records["23456"]["repairs"]


def test_three_students_named_in_other_scripts_are_collected_and_graded_as_three(tmp_path):
    """Issue 49's class: ``张三/``, ``李四/`` and fullwidth ``ａｌｉｃｅ/`` (once all ``student``, all refused) are three
    students through make collect and make grade, each graded on their own notebook, their names as written in
    roster.csv, grades.csv and the insight report."""
    from autograder.course.layout import LABS
    from autograder.proof import report

    lab = "01-capacity-ledger"
    root = report.prepare_root(tmp_path / "course")
    solved, release = ((root / d / lab / LABS[lab]).read_bytes() for d in ("solutions", "course"))
    export = tmp_path / "export"
    for name, notebook in (("张三", solved), ("李四", release), ("ａｌｉｃｅ", solved)):
        (export / name).mkdir(parents=True)
        (export / name / LABS[lab]).write_bytes(notebook)
    env = dict(os.environ, PAGED_KV_COURSE_ROOT=str(root), PYTHONPATH=str(report.REPO))
    for step in (["autograder.collect.collect", lab, str(export)], ["autograder.grade.grade", lab]):
        done = subprocess.run([sys.executable, "-m", *step], cwd=report.REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    work = root / "autograder" / "work"
    with open(work / "reports" / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {r["download_name"]: r for r in csv.DictReader(handle) if r["assignment"] == lab}
    ids = {name: entry_names.student_id(name) for name in ("张三", "李四", "ａｌｉｃｅ")}
    assert {name: (r["student_id"], r["status"], float(r["score"])) for name, r in rows.items()} == {
        "张三": (ids["张三"], "graded", 10.0),
        "李四": (ids["李四"], "graded", 0.0),
        "ａｌｉｃｅ": (ids["ａｌｉｃｅ"], "graded", 10.0),
    }
    insight = json.loads((work / "reports" / lab / "insight.json").read_text(encoding="utf-8"))
    assert insight["names"] == {sid: name for name, sid in ids.items()}
    shown = [
        line.split()[:2] for line in done.stdout.splitlines() if line.split()[:1] in ([sid] for sid in ids.values())
    ]
    assert sorted(shown) == sorted([sid, name] for name, sid in ids.items()), done.stdout  # make grade's table
