"""What a platform's grader carries of the course: the files grading one lab needs, read from this checkout.

The package (``paged_kv``, editions are built from it), the graders and the grading machinery
(``autograder/`` without its tests, each lab's ``tests/``, the proof harness and the work folder), the lab's source notebook without its solutions (the
tests' text, hidden tests included, is what grading needs) and its releases (English and the translations: an
upload in any of the course's languages is graded), the lock
and the project file (``pip install -e`` reads ``README.md``), and ``autograder/BUILT_FROM`` (the commit).
Caches, checkpoints and compiled files are left out.

What a builder writes of it holds the hidden tests and the whole package, so it is its owner's only
(``private_files``, ``close_tree``: folders 0700, files 0600): another account of the machine (a hub's student)
reads none of it (issue 47).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Tuple

LEFT_OUT_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis"}
LEFT_OUT_TOP = {("autograder", "work"), ("autograder", "tests"), ("autograder", "proof")}


def _repo() -> Path:
    return Path(__file__).resolve().parents[2]


def graded_labs() -> List[str]:
    from autograder.course.layout import SOURCE_DIR
    from autograder.course.layout import graded_labs as labs

    return labs(SOURCE_DIR)


def cells_of(lab: str) -> list:
    """The lab's graded cells (``autograder.course.notebook.lab_cells``), or [] when its notebook cannot be read."""
    from autograder.course.layout import LABS, SOURCE_DIR
    from autograder.course.notebook import lab_cells

    try:
        return lab_cells(SOURCE_DIR / lab / LABS[lab])
    except (KeyError, OSError, ValueError):
        return []


def _entries(folder: Path, base: Path) -> Iterator[Tuple[str, bytes]]:
    """Every file below ``folder`` as ``(path relative to base, bytes)``, leaving out caches and links."""
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(base)
        parts = relative.parts
        if (
            any(p in LEFT_OUT_DIRS for p in parts)
            or tuple(parts[:2]) in LEFT_OUT_TOP
            or (parts[:2] == ("autograder", "labs") and "tests" in parts[2:])
        ):
            continue
        if path.is_file() and not path.is_symlink() and path.suffix not in (".pyc", ".pyo"):
            yield str(relative), path.read_bytes()


def course_files(lab: str) -> Iterator[Tuple[str, bytes]]:
    """``(relative path, bytes)`` of every file the lab's grader needs."""
    from autograder.course.languages import TRANSLATIONS, release_folder
    from autograder.course.layout import RELEASE_DIR, SOURCE_DIR

    repo = _repo()
    for name in ("pyproject.toml", "requirements-lock.txt", "README.md"):
        yield name, (repo / name).read_bytes()
    for folder in (repo / "paged_kv", repo / "autograder"):
        yield from _entries(folder, repo)
    translated = [release_folder(RELEASE_DIR, language) / lab for language in TRANSLATIONS]  # a Chinese upload too
    for folder in [SOURCE_DIR / lab, RELEASE_DIR / lab] + [f for f in translated if f.is_dir()]:
        for relative, data in _entries(folder, SOURCE_DIR.parent):
            yield (
                relative,
                (without_solutions(data) if folder.parent == SOURCE_DIR and relative.endswith(".ipynb") else data),
            )
    yield "autograder/BUILT_FROM", _commit(repo).encode()


def without_solutions(notebook: bytes) -> bytes:
    """The source notebook with every ``### BEGIN SOLUTION`` region's lines replaced by one
    ``raise NotImplementedError()`` (the markers kept, so that nbgrader makes the same release from it): the
    grader needs the tests' text (hidden tests included), never the solutions."""
    import nbformat

    nb = nbformat.reads(notebook.decode("utf-8"), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        kept, inside = [], False
        for line in cell.source.split("\n"):
            if line.strip() == "### BEGIN SOLUTION":
                inside = True
                kept += [line, line[: len(line) - len(line.lstrip())] + "raise NotImplementedError()"]
            elif line.strip() == "### END SOLUTION":
                inside = False
                kept.append(line)
            elif not inside:
                kept.append(line)
        cell.source = "\n".join(kept)
    return nbformat.writes(nb).encode("utf-8")


def _commit(repo: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        )
        return done.stdout.strip() or "unknown commit"
    except (OSError, subprocess.SubprocessError):
        return "unknown commit"


def prepare_gradebook(course: Path, lab: str) -> None:
    """Load ``lab`` into the gradebook of the course copy at ``course`` (``autograder/work/gradebook.db``), as
    the first ``make grade`` does, so that grading an upload starts at once (what Gradescope's setup.sh runs)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(course),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    env.pop("PAGED_KV_COURSE_ROOT", None)
    done = subprocess.run(
        [sys.executable, "-m", "autograder.platforms.gradescope", "prepare", lab],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"loading {lab} into the gradebook failed:\n{(done.stdout + done.stderr)[-3000:]}")


@contextmanager
def private_files() -> Iterator[None]:
    """While open, whatever this process and its children create is their owner's only (umask 077)."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


def private_folder(path: Path) -> Path:
    """``path`` made (with its missing parents) and closed to other accounts (0700); returns it."""
    with private_files():
        path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def close_tree(path: Path) -> Path:
    """``path`` and everything below it made its owner's only: folders 0700, files 0600 (0700 where the owner
    may run them); links are left as they are. Returns ``path``."""
    for item in [path, *path.rglob("*")]:
        info = item.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        runs = stat.S_ISDIR(info.st_mode) or info.st_mode & stat.S_IXUSR
        os.chmod(item, 0o700 if runs else 0o600)
    return path
