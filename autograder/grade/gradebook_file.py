"""The gradebook file (``autograder/work/gradebook.db``, sqlite, which nbgrader reads through SQLAlchemy),
checked before ``make grade`` uses it, and its failures said in one line: which file, what is wrong, what to do.

A gradebook that is not a database (a truncated copy, a file overwritten) or whose pages are damaged is
refused with what rebuilding it costs: ``make grade LAB`` makes a new gradebook when there is none
(``nbgrader generate_assignment`` loads the lab's source cells) and grades every submitted student of LAB
again from ``autograder/work/submitted/``, so that lab's scores come back; the other labs' scores, and any
grading done by hand in nbgrader's formgrader, are only in the old file, and come back (the scores) when
``make grade`` is run for each of those labs. A gradebook that another program holds locked past the wait
is refused with what to wait for: moving a file that is being written loses what is written.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator, Optional

WAIT_SECONDS = 30.0  # for another program's write lock, before the gradebook is said to be locked


def problem(db: Path, error: BaseException, lab: str = "") -> str:
    """One line for the instructor about ``error`` (sqlite's, or SQLAlchemy's around it) met in gradebook ``db``
    while grading ``lab`` (named in what to run, when given)."""
    if not isinstance(db, Path) or not isinstance(error, BaseException) or not isinstance(lab, str):
        raise ValueError(f"problem takes the gradebook's Path, an exception and a lab, got {db!r}, {error!r}, {lab!r}")
    reason = str(getattr(error, "orig", None) or error).splitlines()[0] if str(error) else type(error).__name__
    if "locked" in reason or "busy" in reason:
        return (
            f"the gradebook {db} is locked by another program (another make grade, or nbgrader's formgrader, "
            f"still writing to it; sqlite: {reason}): let it finish or stop it, then run make grade again; do "
            "not move the file while it is being written"
        )
    return (
        f"the gradebook {db} is not a valid database (sqlite: {reason}): move it aside (mv {db} {db}.broken) "
        f"and run make grade LAB={lab or '<lab>'} again, which makes a new gradebook and grades every "
        "submitted student of that lab again; the other labs' scores and any grading done by hand are only "
        "in the old file: run make grade for each of those labs to get their scores back"
    )


def check(db: Path, lab: str = "", wait: float = WAIT_SECONDS) -> Optional[str]:
    """None when the gradebook ``db`` is missing (nbgrader makes it) or is an sqlite database whose pages
    read back and that this process may write within ``wait`` seconds; else ``problem``'s line (for ``lab``)."""
    if not isinstance(db, Path) or not (isinstance(wait, (int, float)) and wait >= 0):
        raise ValueError(f"check takes the gradebook's Path and a wait in seconds >= 0, got {db!r}, {wait!r}")
    if not db.exists():
        return None
    try:
        with closing(sqlite3.connect(str(db), timeout=wait)) as connection:
            verdict = connection.execute("PRAGMA quick_check").fetchall()
            connection.execute("BEGIN IMMEDIATE")  # the write lock make grade will need
            connection.execute("ROLLBACK")
    except sqlite3.DatabaseError as error:
        return problem(db, error, lab)
    if verdict != [("ok",)]:
        return problem(db, sqlite3.DatabaseError(f"damaged: {verdict[0][0]}"), lab)
    return None


@contextmanager
def errors(db: Path, lab: str = "") -> Iterator[None]:
    """Turn a database error met in gradebook ``db`` inside the block into SystemExit with ``problem``'s line
    for ``lab`` (instead of SQLAlchemy's traceback, which names neither the file nor what to do)."""
    from sqlalchemy.exc import DatabaseError as DriverError

    try:
        yield
    except (DriverError, sqlite3.DatabaseError) as error:
        raise SystemExit(f"error: {problem(db, error, lab)}") from None
