"""The Makefile's own rules: its .PHONY line names only targets it has, and a clone whose .venv links to another
checkout's environment never installs into it (which would repoint that environment's editable install)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def test_every_phony_name_is_a_target():
    phony = re.search(r"^\.PHONY:(.*)$", MAKEFILE, re.M).group(1).split()
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+):", MAKEFILE, re.M))
    assert [name for name in phony if name not in targets] == []


def _checkout(folder: Path, env: Path, linked: bool) -> Path:
    """A checkout with the Makefile and what its install rules depend on, its lock newer than env's stamps."""
    for name in ("Makefile", "requirements-lock.txt", "pyproject.toml", "paged_kv/lab/notebook_kernel.py"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, folder / name)
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    (env / "bin" / "python").chmod(0o755)
    for stamp in (".installed-stamp", ".kernel-stamp"):
        (env / stamp).touch()
        os.utime(env / stamp, (1, 1))  # older than everything: a clone's files look newer
    if linked:
        (folder / ".venv").symlink_to(env)
    else:
        shutil.copytree(env, folder / ".venv")
        for stamp in (".installed-stamp", ".kernel-stamp"):
            os.utime(folder / ".venv" / stamp, (1, 1))
    return folder


@pytest.mark.parametrize("linked", [True, False], ids=["borrowed", "own"])
def test_a_borrowed_environment_is_never_installed_into(tmp_path, linked):
    """``make -n test`` (what it would run): with .venv a link to another checkout's environment, no pip
    install; with an environment of its own whose stamp is older than the lock, the install runs (the rule
    this guards)."""
    folder = _checkout(tmp_path / "clone", tmp_path / "env", linked)
    done = subprocess.run(["make", "-n", "test"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ("pip install" in done.stdout) is (not linked), done.stdout


@pytest.mark.parametrize("broken", [False, True], ids=["imports", "cannot-import"])
def test_a_borrowed_environment_without_its_stamps_is_only_checked(tmp_path, broken):
    """A linked .venv whose stamps are missing: ``make env`` (run for real; its python is a stub) checks that
    the environment imports the course's packages and installs nothing; where it cannot, make fails saying so."""
    folder = _checkout(tmp_path / "clone", tmp_path / "env", linked=True)
    for stamp in (".installed-stamp", ".kernel-stamp"):
        (tmp_path / "env" / stamp).unlink()
    (tmp_path / "env" / "bin" / "python").write_text(f"#!/bin/sh\nexit {int(broken)}\n")
    planned = subprocess.run(["make", "-n", "env"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert "pip install" not in planned.stdout, planned.stdout
    done = subprocess.run(["make", "env"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert (done.returncode != 0) is broken, done.stdout + done.stderr
    assert ("cannot import" in done.stdout) is broken, done.stdout
    assert not (tmp_path / "env" / ".installed-stamp").exists()  # nothing written into the borrowed environment


def test_make_check_with_a_lab_runs_lint_and_that_labs_marked_tests(tmp_path):
    """``make check LAB=NN-name``: ruff, then pytest on the tests marked ``labNN`` (conftest.py marks them:
    autograder/labs/markers.py) without the class simulation; a LAB that is no folder of solutions/ is refused,
    naming the labs; ``make help`` says so."""
    folder = _checkout(tmp_path / "clone", tmp_path / "env", linked=True)
    (folder / "solutions" / "09-chunked-prefill").mkdir(parents=True)
    done = subprocess.run(
        ["make", "-n", "check", "LAB=09-chunked-prefill"], cwd=folder, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    commands = done.stdout.splitlines()
    assert any("ruff check" in c for c in commands) and any("ruff format --check" in c for c in commands)
    pytest_line = next(c for c in commands if "-m pytest" in c)
    assert "-m lab09 " in pytest_line and "test_class_simulation_a.py" in pytest_line, pytest_line
    assert "tests/cache" not in pytest_line, "with LAB, make check runs that lab's tests, not the package's"
    refused = subprocess.run(["make", "-n", "check", "LAB=10-nope"], cwd=folder, capture_output=True, text=True)
    assert refused.returncode != 0 and "09-chunked-prefill" in refused.stderr, refused.stderr
    helped = subprocess.run(["make", "help"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert "make check LAB=" in helped.stdout


def test_the_slow_files_make_test_starts_first_exist_and_start_first():
    """conftest.SLOW_FIRST orders make test's files (Makefile: --no-loadscope-reorder): a renamed file would drop
    out of that order silently and start last, when one worker may be nearly done."""
    import conftest

    missing = [name for name in conftest.SLOW_FIRST if not (ROOT / name).is_file()]
    assert not missing, f"conftest.SLOW_FIRST names files that are not there: {missing}"

    class Item:
        def __init__(self, path):
            self.path = ROOT / path

    items = [Item("tests/cache/test_manager.py"), Item(conftest.SLOW_FIRST[1]), Item(conftest.SLOW_FIRST[0])]
    conftest._slow_first(items)
    assert [i.path for i in items] == [
        ROOT / conftest.SLOW_FIRST[0],
        ROOT / conftest.SLOW_FIRST[1],
        ROOT / "tests/cache/test_manager.py",
    ]
