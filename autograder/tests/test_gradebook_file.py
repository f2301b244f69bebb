"""A gradebook that is not a database, is damaged or is locked stops ``make grade`` with one line that names the
file and what to do, never SQLAlchemy's traceback (``autograder.grade.gradebook_file``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from autograder.course import layout as labs
from autograder.grade import grade, gradebook_file

LAB = "02-atomic-prefill"
GARBAGE = b"this is no sqlite file " * 400


def _database(path: Path, rows: int = 1) -> Path:
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE t (x TEXT)")
        connection.executemany("INSERT INTO t VALUES (?)", [(f"row {n} " * 20,) for n in range(rows)])
        connection.commit()
    return path


def test_a_gradebook_full_of_garbage_stops_make_grade_with_one_line_naming_it(tmp_path, monkeypatch, capsys):
    db = tmp_path / "autograder" / "work" / "gradebook.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(GARBAGE)
    monkeypatch.setattr(labs, "ROOT", tmp_path)  # grade() reads the course root when it runs
    with pytest.raises(SystemExit) as stop:
        grade.main([LAB])
    message = str(stop.value.code)
    assert "\n" not in message and message.startswith(f"error: the gradebook {db} is not a valid database")
    assert "file is not a database" in message and f"mv {db} {db}.broken" in message
    assert f"make grade LAB={LAB} again" in message and "sqlalchemy" not in message.lower()
    assert db.read_bytes() == GARBAGE  # left as it was: what to do with it is the instructor's call
    assert capsys.readouterr().out == ""  # stopped before anything was probed or graded


def test_a_gradebook_that_fails_while_grading_is_named_in_one_line_too(tmp_path):
    """Past the check (a file replaced while grading runs), SQLAlchemy's error becomes the same line."""
    (tmp_path / "gradebook.db").write_bytes(GARBAGE)
    with pytest.raises(SystemExit) as stop:
        grade.summarize(LAB, ["alice"], {}, tmp_path, tmp_path / "reports")
    message = str(stop.value.code)
    assert "\n" not in message and f"the gradebook {tmp_path / 'gradebook.db'} is not a valid database" in message


def test_a_gradebook_with_damaged_pages_is_refused_and_a_sound_or_missing_one_is_not(tmp_path):
    db = _database(tmp_path / "gradebook.db", rows=2000)
    assert gradebook_file.check(db) is None and gradebook_file.check(tmp_path / "none.db") is None
    raw = bytearray(db.read_bytes())
    raw[3 * 4096 : 4 * 4096] = b"\xff" * 4096  # a page past the header
    db.write_bytes(bytes(raw))
    assert "is not a valid database (sqlite: database disk image is malformed)" in gradebook_file.check(db, LAB)


def test_a_gradebook_another_program_holds_locked_is_named_with_what_to_wait_for(tmp_path):
    db = _database(tmp_path / "gradebook.db")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        message = gradebook_file.check(db, LAB, wait=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert f"the gradebook {db} is locked by another program" in message and "mv " not in message
    assert gradebook_file.check(db, LAB, wait=0.2) is None  # free again


@pytest.mark.parametrize("args", [("gradebook.db",), (Path("g.db"), "", -1), (Path("g.db"), "", "30")])
def test_checking_a_gradebook_refuses_what_is_not_a_path_and_a_wait(args):
    with pytest.raises(ValueError):
        gradebook_file.check(*args)
