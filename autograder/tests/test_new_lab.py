"""A new lab is one folder and one notebook: ``make new-lab`` scaffolds a throwaway lab in a copy of this
checkout, touching nothing outside the lab's homes, and the copy's own grading gives its solution full marks
and its release 0 (the lab model, the editions and the box need no other edit)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB, PACKAGE = "09-throwaway", "lab09_throwaway"

GRADE = """
import json, os, sys
from pathlib import Path
from autograder.proof import classroom, report
root = report.prepare_root(Path(sys.argv[1]))
info = classroom.load_lab("{lab}", root / "solutions", root / "course")
students = [s for s in classroom.build_class(info, root) if s.kind in ("solution", "untouched")]
result = report.run_lab("{lab}", root, dict(os.environ), students=students)
print(json.dumps({{"totals": {{s.kind: sum(result.scores[s.sid].values()) for s in students}},
                  "problems": result.problems}}))
"""


def _copy_of_the_checkout(target: Path) -> None:
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not p.relative_to(root).as_posix().startswith("autograder/work/")
    }  # nbgrader's gradebook (ignored)


def _run(args, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(cwd))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    copy = tmp_path_factory.mktemp("checkout")
    _copy_of_the_checkout(copy)
    before = _snapshot(copy)
    done = _run(
        [
            sys.executable,
            "-m",
            "tools.new_lab",
            LAB,
            "--title",
            "a throwaway lab",
            "--todo",
            "cache/ledger.py:blocks_per_request",
            "--example",
            "10, 4",
        ],
        copy,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return copy, before, _snapshot(copy)


def test_the_scaffold_touches_only_the_labs_own_homes(scaffolded):
    copy, before, after = scaffolded
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    homes = (f"solutions/{LAB}/", f"autograder/labs/{PACKAGE}/", f"course/{LAB}/")
    assert changed and all(p.startswith(homes) for p in changed), sorted(p for p in changed if not p.startswith(homes))
    assert any(p.startswith(f"course/{LAB}/") and p.endswith(".ipynb") for p in changed), "no release generated"


def test_the_scaffolded_lab_grades_its_solution_full_and_its_release_zero(scaffolded, tmp_path):
    copy, _, _ = scaffolded
    done = _run([sys.executable, "-c", GRADE.format(lab=LAB), str(tmp_path / "course")], copy, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["totals"] == {"solution": 10.0, "untouched": 0.0}, outcome
    assert all(problems == [] for problems in outcome["problems"].values()), outcome["problems"]


def test_the_scaffold_refuses_a_lab_that_exists_and_a_todo_that_does_not(scaffolded):
    copy, _, _ = scaffolded
    again = _run(
        [
            sys.executable,
            "-m",
            "tools.new_lab",
            LAB,
            "--title",
            "x",
            "--todo",
            "cache/ledger.py:blocks_per_request",
            "--example",
            "1, 1",
            "--no-release",
        ],
        copy,
        timeout=120,
    )
    assert again.returncode != 0 and "exists already" in again.stderr
    missing = _run(
        [
            sys.executable,
            "-m",
            "tools.new_lab",
            "10-other",
            "--title",
            "x",
            "--todo",
            "cache/ledger.py:no_such_function",
            "--example",
            "1",
            "--no-release",
        ],
        copy,
        timeout=120,
    )
    assert missing.returncode != 0 and "has no function 'no_such_function'" in missing.stderr
    assert (
        not (copy / "solutions" / "10-other").exists() and not (copy / "autograder" / "labs" / "lab10_other").exists()
    )
