"""What the collection tests hand to ``autograder.collect``: lab 02's release (``HONEST``) and solved (``SOLVED``)
notebooks, zip entries that unpack as links, and a scratch course that can hold ``collect``'s output."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

from autograder.course.layout import RELEASE_DIR, SOURCE_DIR

LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
HONEST = (RELEASE_DIR / LAB / NOTEBOOK).read_bytes()
SOLVED = (SOURCE_DIR / LAB / NOTEBOOK).read_bytes()  # its answers must never be graded as someone else's


def link_entry(zf: zipfile.ZipFile, name: str, target: str, kind: int = stat.S_IFLNK) -> None:
    """An entry whose Unix mode makes ``unzip`` create a symbolic link (or a FIFO, with ``kind``)."""
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (kind | 0o777) << 16
    zf.writestr(info, target)


def write_class(lab_root: Path) -> Path:
    """A scratch course that can hold ``collect``'s output: only the release is needed."""
    (lab_root / "course" / LAB).mkdir(parents=True)
    (lab_root / "course" / LAB / NOTEBOOK).write_bytes(HONEST)
    return lab_root
