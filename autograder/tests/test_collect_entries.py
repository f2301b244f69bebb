"""The LMS path's collection never follows a link, refuses one bad entry alone, and limits sizes per entry and per
student, never per class (``autograder.collect.collect``, ``entries``). Whose entry is whose, one id to one student:
test_collect_student_ids.py."""

from __future__ import annotations

import csv
import html
import io
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path

import nbformat
import pytest
from collect_inputs import HONEST, LAB, NOTEBOOK, link_entry, write_class

from autograder.collect import collect, entries
from autograder.grade import grade

SECRET = b"NOT-FOR-STUDENTS-" + os.urandom(8).hex().encode()
THREE_GIB = 3 << 30
CRC_OF_THREE_GIB_OF_ZEROS = 1208729143  # zlib.crc32(bytes(3 << 30)): 2.4 s to compute, so written down


def _every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())


def _raw_zip(path: Path, name: str, data: bytes, crc: int, declared: int) -> None:
    """A one-entry zip written by hand (deflated ``data``), whose directory says ``declared`` bytes."""
    encoded = name.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(data), declared, len(encoded), 0)
    central = struct.pack(
        "<4s6H3L5H2L",
        b"PK\x01\x02",
        (3 << 8) | 20,
        20,
        0,
        8,
        0,
        0x21,
        crc,
        len(data),
        declared,
        len(encoded),
        0,
        0,
        0,
        0,
        (stat.S_IFREG | 0o644) << 16,
        0,
    )
    start = len(local) + len(encoded) + len(data)
    size = len(central) + len(encoded)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, size, start, 0)
    path.write_bytes(local + encoded + data + central + encoded + end)


def _zeros_deflated(size: int) -> bytes:
    """``size`` zero bytes (a multiple of 64 MiB) deflated in a few MB: one flushed 64 MiB block, repeated."""
    block = 64 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = compressor.compress(bytes(block)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return chunk * (size // block) + b"\x03\x00"  # an empty final block ends the stream


def _declare(archive: Path, name: str, size: int) -> None:
    """Make the zip's directory say that its entry ``name`` unpacks to ``size`` bytes."""
    raw = bytearray(archive.read_bytes())
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + length] == name.encode():
            struct.pack_into("<L", raw, at + 24, size)
        at = raw.find(b"PK\x01\x02", at + 46)
    archive.write_bytes(bytes(raw))


def test_symlinked_entries_of_a_class_folder_are_refused_and_the_others_collected(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "solution.ipynb").write_bytes(SECRET)
    export = tmp_path / "export"
    for student in ("alice", "bob", "dave"):
        (export / student).mkdir(parents=True)
    (export / "alice" / NOTEBOOK).write_bytes(HONEST)
    (export / "bob" / NOTEBOOK).symlink_to(outside / "solution.ipynb")  # to a file outside
    (export / "carol").symlink_to(export / "alice")  # to another student's folder
    (export / "dave" / "work").symlink_to(outside)  # a folder inside, linked out
    (export / "dave" / "notes.txt").write_text("mine")
    (export / f"erin_4242_99_{NOTEBOOK}").symlink_to(outside / "solution.ipynb")  # a Canvas file name
    os.mkfifo(export / "frank.ipynb")  # would block a reader that opens it plainly

    found = collect.gather(export, tmp_path / "scratch")

    assert [f.read_bytes() for f in found["alice"].files] == [HONEST] and found["alice"].refused == []
    assert found["bob"].refused == [(f"bob/{NOTEBOOK}", "it is a symbolic link")] and found["bob"].files == []
    assert found["carol"].refused == [("carol", "it is a symbolic link")] and found["carol"].files == []
    assert found["dave"].refused == [("dave/work", "it is a symbolic link")]
    assert [f.name for f in found["dave"].files] == ["notes.txt"]
    assert found["4242"].refused == [(f"erin_4242_99_{NOTEBOOK}", "it is a symbolic link")]
    assert found["frank"].refused == [("frank.ipynb", "it is a FIFO (named pipe)")]
    assert SECRET not in _every_byte(tmp_path / "scratch")


def test_refused_entries_reach_the_students_grading_notes_log_csv_and_the_terminal(tmp_path, capsys):
    outside = tmp_path / "solution.ipynb"
    outside.write_bytes(SECRET)
    export = tmp_path / "export"
    (export / "alice").mkdir(parents=True)
    (export / "alice" / NOTEBOOK).write_bytes(HONEST)
    (export / "bob").mkdir()
    (export / "bob" / NOTEBOOK).symlink_to(outside)
    root = write_class(tmp_path / "course-root")

    records = collect.collect(LAB, export, root, root / "course", NOTEBOOK)
    collect.print_refused(records)

    work = root / "autograder" / "work"
    bob = next(r for r in records if r["student"] == "bob")
    assert bob["file"] == "(none)" and ("refused-entry", f"bob/{NOTEBOOK}: it is a symbolic link") in bob["repairs"]
    notes = nbformat.read(work / "submitted" / "bob" / LAB / NOTEBOOK, as_version=4).cells[0].source
    assert f"`bob/{NOTEBOOK}` was not collected: it is a symbolic link" in html.unescape(notes)  # notes are escaped
    assert not any(r[0] == "refused-entry" for r in next(r for r in records if r["student"] == "alice")["repairs"])
    assert SECRET not in _every_byte(root)
    assert f"refused for bob: bob/{NOTEBOOK}: it is a symbolic link" in capsys.readouterr().err
    grade.summarize(LAB, ["alice", "bob"], {}, work, work / "reports" / LAB)  # how grade writes log.csv
    with open(work / "reports" / LAB / "log.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["kind"] == "refused-entry"]
    assert [(r["student_id"], r["detail"]) for r in rows] == [("bob", f"bob/{NOTEBOOK}: it is a symbolic link")]


def test_zip_entries_that_are_links_or_fifos_are_refused_and_their_neighbours_unpacked(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"alice/{NOTEBOOK}", HONEST)
        link_entry(zf, f"bob/{NOTEBOOK}", "/etc/passwd")
        zf.writestr("bob/notes.txt", "mine")
        link_entry(zf, f"carol/{NOTEBOOK}", "", kind=stat.S_IFIFO)
    found = collect.gather(archive, tmp_path / "scratch")
    assert [f.read_bytes() for f in found["alice"].files] == [HONEST]
    assert found["bob"].refused == [(f"bob/{NOTEBOOK}", "it is a symbolic link")]
    assert [f.name for f in found["bob"].files] == ["notes.txt"]
    assert found["carol"].refused == [(f"carol/{NOTEBOOK}", "it is a FIFO (named pipe)")]
    assert not any(p.is_symlink() for p in (tmp_path / "scratch").rglob("*"))


def test_zip_entries_that_leave_their_folder_are_refused_alone(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"alice/{NOTEBOOK}", HONEST)
        zf.writestr("../../escaped.ipynb", "x")
        zf.writestr(f"{tmp_path}/absolute.ipynb", "x")
        zf.writestr("bob/../../up.ipynb", "x")
        zf.writestr(f"carol/{NOTEBOOK}", HONEST)
    found = collect.gather(archive, tmp_path / "deep" / "scratch")
    assert [f.read_bytes() for f in found["alice"].files] == [HONEST] == [f.read_bytes() for f in found["carol"].files]
    assert found["escaped"].refused == [("../../escaped.ipynb", "its name leaves its folder (..)")]
    assert found["tmp"].refused == [(f"{tmp_path}/absolute.ipynb", "its name is an absolute path")]
    assert found["bob"].refused == [("bob/../../up.ipynb", "its name leaves its folder (..)")]
    assert {p.name for p in tmp_path.rglob("*.ipynb")} == {NOTEBOOK}  # nothing written anywhere else


def test_a_3_gib_entry_is_refused_from_the_directory_without_being_unpacked(tmp_path, monkeypatch):
    unpacked = []
    real_unpack = entries._unpack
    monkeypatch.setattr(entries, "_unpack", lambda zf, info: unpacked.append(info.filename) or real_unpack(zf, info))
    export = tmp_path / "export"
    export.mkdir()
    _raw_zip(export / "bob.zip", f"bob/{NOTEBOOK}", _zeros_deflated(THREE_GIB), CRC_OF_THREE_GIB_OF_ZEROS, THREE_GIB)
    assert (export / "bob.zip").stat().st_size < 8 << 20  # a bomb: a few MB that unpack to 3 GiB
    with zipfile.ZipFile(export / "alice.zip", "w") as zf:
        zf.writestr(f"alice/{NOTEBOOK}", HONEST)

    found = collect.gather(export, tmp_path / "scratch")

    assert found["bob"].refused == [
        (f"bob.zip/bob/{NOTEBOOK}", "it declares 3072 MB, more than the 64 MB a file may have")
    ]
    assert unpacked == [f"alice/{NOTEBOOK}"]  # the bomb's entry was never opened
    assert [f.read_bytes() for f in found["alice"].files] == [HONEST]
    assert sum(p.stat().st_size for p in (tmp_path / "scratch").rglob("*") if p.is_file()) < 1 << 20


def test_a_zip_whose_directory_understates_a_size_never_unpacks_more_than_it_declares(tmp_path):
    real = bytes(10 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = compressor.compress(real) + compressor.flush()
    export = tmp_path / "export"
    export.mkdir()
    _raw_zip(export / "bob.zip", f"bob/{NOTEBOOK}", data, zlib.crc32(real), declared=1000)
    found = collect.gather(export, tmp_path / "scratch")
    assert found["bob"].files == []
    ((entry, reason),) = found["bob"].refused
    assert entry == f"bob.zip/bob/{NOTEBOOK}" and reason.startswith("it cannot be unpacked (Bad CRC-32")
    assert max((p.stat().st_size for p in (tmp_path / "scratch").rglob("*") if p.is_file()), default=0) <= 1000


def test_a_students_budget_refuses_the_files_past_it_and_keeps_the_others():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for n in range(4):
            zf.writestr(f"bob/part{n}.txt", bytes(400))
    budget = entries.Budget(bytes_left=1000, files_left=10)
    got = list(entries.zip_entries(buffer.getvalue(), lambda _: budget))
    assert [(p, r) for p, d, r in got] == [
        ("bob/part0.txt", None),
        ("bob/part1.txt", None),
        ("bob/part2.txt", "the submission's files together pass 256 MB"),
        ("bob/part3.txt", "the submission's files together pass 256 MB"),
    ]
    assert budget.bytes_left == 200


def test_one_bad_entry_among_many_honest_students_stops_nobody(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for n in range(40):
            zf.writestr(f"student{n}_{1000 + n}_{7000 + n}_{NOTEBOOK}", HONEST)
        zf.writestr(f"../mallory_666_1_{NOTEBOOK}", HONEST)
        link_entry(zf, f"trudy_777_2_{NOTEBOOK}", "/etc/shadow")
        zf.writestr(f"oscar_888_3_{NOTEBOOK}", b"{}")
    _declare(archive, f"oscar_888_3_{NOTEBOOK}", THREE_GIB)  # refused from the directory, unread
    root = write_class(tmp_path / "course-root")
    records = {r["student"]: r for r in collect.collect(LAB, archive, root, root / "course", NOTEBOOK)}
    honest = [str(1000 + n) for n in range(40)]
    assert all(
        records[s]["file"] == NOTEBOOK and not any(k == "refused-entry" for k, _ in records[s]["repairs"])
        for s in honest
    )
    for student, reason in (("666", "leaves its folder"), ("777", "symbolic link"), ("888", "declares 3072 MB")):
        assert records[student]["file"] == "(none)"
        assert any(k == "refused-entry" and reason in d for k, d in records[student]["repairs"]), records[student]


def test_a_large_honest_class_is_never_refused_as_a_bomb(tmp_path):
    """1,300 notebooks with outputs of the measured size (420 kB each, 546 MB in all: more than the 512 MB
    that once refused a whole class's zip), stored as an LMS zips them."""
    nb = nbformat.reads(HONEST.decode(), as_version=4)
    picture = os.urandom(315_000).hex()[: 420_000 - len(HONEST)]
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "plot()",
            outputs=[nbformat.v4.new_output("display_data", data={"image/png": picture, "text/plain": "<Figure>"})],
        )
    )
    raw = nbformat.writes(nb).encode()
    assert 400_000 < len(raw) <= 430_000
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for n in range(1300):
            zf.writestr(f"student{n}_{10000 + n}_{70000 + n}_{NOTEBOOK}", raw)
    assert archive.stat().st_size > 512 << 20
    found = collect.gather(archive, tmp_path / "scratch")
    assert len(found) == 1300
    assert [s for s in found.values() if s.refused or len(s.files) != 1] == []


def test_a_link_handed_to_write_submissions_is_refused_not_read(tmp_path):
    outside = tmp_path / "solution.ipynb"
    outside.write_bytes(SECRET)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / NOTEBOOK).symlink_to(outside)
    root = write_class(tmp_path / "course-root")
    records = collect.write_submissions(
        LAB, {"bob": collect.Submission("bob", files=[tmp_path / "sub" / NOTEBOOK])}, root, root / "course", NOTEBOOK
    )
    assert ("refused-entry", f"{NOTEBOOK}: it is a symbolic link") in records[0]["repairs"]
    assert SECRET not in _every_byte(root)


def test_a_students_file_name_cannot_break_out_of_the_notes_code_span():
    assert collect._shown("a`<script>`\n.ipynb") == "a'<script>'?.ipynb"
    assert (
        entries._plain("Bad CRC-32 for file '<img src=x onerror=alert(1)>'")
        == "Bad CRC-32 for file '?img src?x onerror?alert(1)?'"
    )


@pytest.mark.parametrize(
    "name, reason", [("/abs", "absolute"), ("a/../../b", "leaves"), ("", "no name"), ("\\\\server\\x", "absolute")]
)
def test_zip_names_that_are_not_plain_paths_inside_their_folder_are_refused(name, reason):
    with pytest.raises(entries.Refused, match=reason):
        entries.member_path(name)
