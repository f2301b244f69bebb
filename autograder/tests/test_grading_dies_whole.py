"""Grading dies whole: ``python -m autograder.grade.grade`` killed with SIGKILL in the middle of a class (as
the OOM killer would) leaves, within seconds, no worker, no kernel, no cgroup of its own; a re-run meets no
live leftover and gives the grades a clean run gives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List, Set

import pytest

from autograder.box import limits
from autograder.proof import classroom, report

LAB = "01-capacity-ledger"
BUDGETS = {"PAGED_KV_CELL_TIMEOUT": "10", "PAGED_KV_NOTEBOOK_TIMEOUT": "60"}


def _children(pid: int) -> Set[int]:
    found: Set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found |= {int(p) for p in handle.read().split()}
    except OSError:
        pass
    return found


def _cgroups_of(owners: Set[int]) -> List[Path]:
    version = limits.cgroup_version()
    parents = (
        [limits.CGROUP_ROOT / limits.PARENT]
        if version == "v2"
        else [limits.CGROUP_ROOT / c / limits.PARENT for c in limits.V1_CONTROLLERS]
        if version == "v1"
        else []
    )
    return [
        child
        for parent in parents
        for child in parent.glob("pkv-*")
        if child.name.split("-")[1].isdigit() and int(child.name.split("-")[1]) in owners
    ]


def _busy(cgroups: List[Path]) -> List[int]:
    pids = []
    for folder in cgroups:
        try:
            pids += [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            pass
    return pids


def _marked(mark: str) -> List[int]:
    """Processes whose environment carries ``mark`` (the grader, its workers, multiprocessing's tracker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if mark.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A scratch course with lab 01's class collected: the solution, the untouched release, a catalogued bug
    and a TODO that loops until its cell's time limit (so kernels are busy when grading is killed)."""
    root = report.prepare_root(tmp_path_factory.mktemp("dies-whole"))
    info = classroom.load_lab(LAB, root / "solutions", root / "course")
    wanted = {"solution", "untouched", "bug"}
    students, kinds = [], set()
    for student in classroom.build_class(info, root):
        if (student.kind in wanted - kinds) or student.label == "endless loop in the TODO":
            students.append(student)
            kinds.add(student.kind)
    assert {"solution", "untouched", "bug"} <= kinds and any(s.loops for s in students)
    env = dict(os.environ, PAGED_KV_COURSE_ROOT=str(root), **BUDGETS)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(report.REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    ids = classroom.write_export(students, root / "exports" / LAB)
    report._run("autograder.collect.collect", LAB, str(root / "exports" / LAB), env=env)
    return root, env, students, ids


def _score_problems(root: Path, students, ids) -> List[str]:
    """How the gradebook's scores differ from what the class simulation grades each student in a clean run."""
    from nbgrader.api import Gradebook, MissingEntry

    info = classroom.load_lab(LAB, root / "solutions", root / "course")
    problems = []
    with Gradebook(f"sqlite:///{root / 'autograder' / 'work' / 'gradebook.db'}") as gb:
        for student in students:
            try:
                nb = gb.find_submission_notebook(info.notebook[: -len(".ipynb")], LAB, ids[student.sid])
                cells = {g.name: float(g.score or 0) for g in nb.grades}
            except MissingEntry:
                problems.append(f"{student.label}: not graded")
                continue
            expect, total = student.expect, sum(cells.values())
            if expect.total is not None and total != pytest.approx(expect.total):
                problems.append(f"{student.label}: total {total}, expected {expect.total}")
            problems += [f"{student.label}: {g} scored {cells.get(g)}, expected 0" for g in expect.zero if cells.get(g)]
            problems += [
                f"{student.label}: {g} scored {cells.get(g)}, expected {info.grade_cells[g]}"
                for g in expect.full
                if cells.get(g) != info.grade_cells[g]
            ]
    return problems


def _workers(grader: int) -> Set[int]:
    """The grader's pool workers (multiprocessing's spawned children)."""
    found = set()
    for pid in _children(grader):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"spawn_main" in handle.read():
                    found.add(pid)
        except OSError:
            continue
    return found


def test_grading_killed_mid_class_leaves_nothing_running_and_a_rerun_grades_as_a_clean_run(course):
    root, env, students, ids = course
    mark = f"PKV_DIES_WHOLE_{uuid.uuid4().hex}"
    grader = subprocess.Popen(
        [sys.executable, "-m", "autograder.grade.grade", LAB, "--workers", "2"],
        cwd=report.REPO,
        env=dict(env, **{mark: "1"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: Set[int] = set()
    deadline = time.monotonic() + 240
    try:  # kill it once both workers have a kernel at work
        while time.monotonic() < deadline and grader.poll() is None:
            workers |= _workers(grader.pid)
            if len(workers) >= 2 and len(_busy(_cgroups_of(workers))) >= 2:
                break
            time.sleep(0.2)
        assert grader.poll() is None, "grading ended before a kernel was seen at work"
        assert workers and _busy(_cgroups_of(workers)), "no worker's kernel was seen at work in 240 s"
        os.kill(grader.pid, signal.SIGKILL)
    finally:
        grader.wait()
    gone = time.monotonic() + 20
    while time.monotonic() < gone and (_marked(mark) or _cgroups_of(workers)):
        time.sleep(0.2)
    assert _marked(mark) == [], "a worker (or multiprocessing's tracker) outlived the grader"
    assert _busy(_cgroups_of(workers)) == [], "a kernel outlived the grader"
    assert _cgroups_of(workers) == [], "a cgroup of the grader's kernels was left behind"

    rerun = subprocess.run(
        [sys.executable, "-m", "autograder.grade.grade", LAB],
        cwd=report.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode in (0, 1) and "Traceback" not in rerun.stderr, rerun.stderr[-3000:]
    assert _score_problems(root, students, ids) == []
