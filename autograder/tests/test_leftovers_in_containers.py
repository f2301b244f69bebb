"""Nothing of a grading kernel outlives its box, and no two containers on one host share a box's uid (issues 47 and
52), graded as the platforms and ``make grade`` inside Docker really run: in the emulation of a default Docker
container (``container.py``: Docker's capabilities and seccomp profile, no cgroup, a pid namespace and world-writable
folders of its own), where the box runs at level ``rlimits`` and a kernel is only a uid.

The red team's leftovers (``leftovers.py``): a process whose thread-group leader leaves with the raw ``exit`` call
while a thread runs (``/proc`` shows a zombie), non-dumpable, behind a second fork, or a fork chain; each signals
every process of its uid, injects into the kernels of its uid through their connection files, leaves files in every
folder its uid may write, or serves another part's reference code to the part boxes graded after it. Against each:
no other student's grade moves, no part earns what its code did not, and nothing of a box's uid is left once grading
returns. Findings cost nothing here (``PAGED_KV_FINDINGS_COST=0``): what a score is, is decided by construction.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import nbformat
import pytest

import container
import leftovers
import platform_harness
from autograder.box import uids
from autograder.course.notebook import nbgrader
from autograder.proof import report

REPO = Path(__file__).resolve().parents[2]
PY = container.q(os.path.join(os.path.realpath(sys.prefix), "bin", "python"))  # the environment, not its base

pytestmark = pytest.mark.skipif(
    bool(container.problem() or platform_harness.mount_problem()),
    reason=container.problem() or platform_harness.mount_problem() or "ok",
)


def _notebook(lab: str, replace: Optional[Dict[str, str]] = None, before: str = "", cell: str = "", last: str = ""):
    """``lab``'s solution with ``replace`` (``{grade_id: source}``), ``cell`` added before the cell ``before`` and
    ``last`` added at the end; returns ``(file name, notebook)``."""
    folder = REPO / "solutions" / lab
    path = next(folder.glob("*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    for each in nb.cells:
        grade_id = nbgrader(each).get("grade_id")
        if replace and grade_id in replace:
            each.source = replace[grade_id]
    if cell:
        at = next(i for i, c in enumerate(nb.cells) if nbgrader(c).get("grade_id") == before)
        nb.cells.insert(at, nbformat.v4.new_code_cell(cell))
    if last:
        nb.cells.append(nbformat.v4.new_code_cell(last))
    return path.name, nb


def _points(lab: str) -> Dict[str, float]:
    nb = nbformat.read(next((REPO / "solutions" / lab).glob("*.ipynb")), as_version=4)
    return {nbgrader(c)["grade_id"]: float(nbgrader(c)["points"]) for c in nb.cells if nbgrader(c).get("grade")}


# ---- a class through make grade ---------------------------------------------------------------------------------
LAB02 = "02-atomic-prefill"
CLASS = {  # graded in this order, one worker: each leftover would meet the kernels graded after its own
    "a-kills-its-uid": leftovers.leftover(leftovers.KILL_LOOP, kill_kernel=True),
    "b-injects": leftovers.leftover(leftovers.INJECT_LAB02, nondumpable=True, second_fork=True),
    "c-forks-on": leftovers.leftover(leftovers.FORK_CHAIN, kill_kernel=True),
    "h-honest-1": "",
    "h-honest-2": "",
}


def test_make_grade_in_a_container_a_leftover_harms_no_other_student(tmp_path, monkeypatch):
    """A lab 02 class of five through ``make grade``'s grader (one worker) in a container: three solutions whose
    last cell leaves a process behind (its leader exits alone; one kills its uid's processes, one injects into
    its uid's kernels, one forks on) and kills its kernel or not, then two honest solutions. Every honest student
    keeps full marks (and so does every attacker: each is the solution, its leftover started after its tests), and
    once grading returns no task and no file of any box's uid is left in the container."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")
    binds = container.checkout_binds(tmp_path / "closed")
    exports = tmp_path / "closed" / "class" / "exports" / LAB02
    for sid, last in CLASS.items():
        name, nb = _notebook(LAB02, last=last)
        (exports / sid).mkdir(parents=True)
        nbformat.write(nb, str(exports / sid / name))
    report.prepare_root(tmp_path / "closed" / "class")
    root = f"{container.CLOSED}/class"
    script = (
        f"cd {container.COURSE} && {PY} -m autograder.collect.collect {LAB02} {root}/exports/{LAB02} >/dev/null && "
        f"{PY} -m autograder.grade.grade {LAB02} --workers 1"
    )
    env = dict(os.environ, PAGED_KV_COURSE_ROOT=root, PYTHONPATH=container.COURSE)
    done = container.in_container(script, binds, tmp_path / "mounts", env, timeout=900)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    scores = _gradebook_totals(tmp_path / "closed" / "class" / "autograder" / "work" / "gradebook.db", list(CLASS))
    assert "rlimits" in done.stdout, done.stdout[-2000:]
    assert scores == dict.fromkeys(CLASS, 10.0), (scores, done.stdout[-3000:])  # each is the solution, graded whole
    assert done.after == {"tasks": [], "files": []}, done.after


def _gradebook_totals(db: Path, students: List[str]) -> Dict[str, float]:
    from nbgrader.api import Gradebook, MissingEntry

    totals = {}
    with Gradebook(f"sqlite:///{db}") as gb:
        for student in students:
            try:
                totals[student] = float(gb.find_submission(LAB02, student).score or 0)
            except MissingEntry:
                totals[student] = -1.0
    return totals


# ---- parts of a lab: lab 05 and lab 08 on both platforms ---------------------------------------------------------
PREFIX, FORK, BEAMS = "paged_kv.cache.prefix_cache", "paged_kv.cache.forking", "paged_kv.engine.forking"
PARTS = {
    "05-prefix-cache": {
        "refs": {
            "hash_blocks": (PREFIX, "BlockManager.hash_blocks"),
            "can_allocate": (PREFIX, "BlockManager.can_allocate"),
            "allocate": (PREFIX, "BlockManager.allocate"),
        },
        "unwritten": {
            "lab05-todo-register": "class RegisteringManager(ReleasingManager):\n"
            "    def hash_blocks(self, seq):\n"
            "        return fetched('hash_blocks', self, seq)\n",
            "lab05-todo-admit": "class BlockManager(RegisteringManager):\n"
            "    def can_allocate(self, seq):\n"
            "        return fetched('can_allocate', self, seq)\n\n"
            "    def allocate(self, seq, num_cached_blocks):\n"
            "        return fetched('allocate', self, seq, num_cached_blocks)\n",
        },
        "first": "lab05-todo-hash",
        "zero": ("hash-blocks", "allocate", "hits", "admit-traces"),
    },
    "08-fork-and-share": {
        "refs": {"may_append": (FORK, "ForkingBlockManager.may_append"), "advance_beams": (BEAMS, "advance_beams")},
        "unwritten": {
            "lab08-todo2": "class CopyOnWriteManager(ForkingManager):\n"
            "    def may_append(self, seq):\n"
            "        return fetched('may_append', self, seq)\n",
            "lab08-todo3": "def advance_beams(manager, beams, choices):\n"
            "    return fetched('advance_beams', manager, beams, choices)\n",
        },
        "first": "lab08-todo1",
        "zero": ("cow", "oom", "beams"),
    },
}


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
@pytest.mark.parametrize("lab", sorted(PARTS))
def test_unwritten_parts_earn_nothing_from_what_an_earlier_part_box_left(lab, platform, tmp_path, monkeypatch):
    """Two parts left unwritten: their answers fetch another part's reference from whatever an earlier part's box
    left (a process whose leader exits alone, serving the code over an abstract socket and as files in every folder
    its uid may write). Each part's box is released, its uid's tasks killed and files removed, before the next
    starts: the unwritten parts' tests score 0, every written part's full marks, and nothing is left."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")
    plan = PARTS[lab]
    serve = leftovers.serve_parts(plan["refs"], f"pkv-parts-{lab[:2]}")
    name, nb = _notebook(lab, replace=plan["unwritten"], before=plan["first"], cell=serve)
    upload = platform_harness.write_upload(tmp_path / "uploads" / "parts", {name: nbformat.writes(nb).encode()})
    if platform == "gradescope":
        image = platform_harness.gradescope_image(lab, tmp_path / "gradescope")
        run = platform_harness.run_gradescope(image, upload, tmp_path / "autograder", docker=True)
        scores = {t["tags"][0]: float(t["score"]) for t in run.results["tests"]}
        assert run.results["extra_data"]["box_level"] == "rlimits"
    else:
        question = platform_harness.build_question(lab, tmp_path)
        run = platform_harness.run_prairielearn(
            question, upload, tmp_path / "grade", docker=True, hidden_visibility="visible"
        )
        scores = {
            grade_id: float(t["points"])
            for t in run.results["tests"]
            for grade_id in _points(lab)
            if f"({grade_id})" in t["name"] or t["name"].startswith(f"{grade_id} (")
        }
    points = _points(lab)
    assert set(scores) == set(points), (sorted(scores), run.results)
    expected = {g: 0.0 if g.split("-", 2)[-1] in plan["zero"] else p for g, p in points.items()}
    assert scores == expected, (
        {g: (scores[g], expected[g]) for g in points if scores[g] != expected[g]},
        run.stdout[-3000:],
        str(run.results)[:3000],
    )
    assert run.after == {"tasks": [], "files": []}, run.after


# ---- two containers on one host -------------------------------------------------------------------------------
HOLD_S = 25
HOLDS_ITS_UID = f"""
import threading, time
_until = time.time() + {HOLD_S}
_threads = [threading.Thread(target=time.sleep, args=(max(0.0, _until - time.time()),)) for _ in range(230)]
for _thread in _threads:
    _thread.start()
for _thread in _threads:
    _thread.join()
"""


def _uid_holding(least: int) -> Optional[int]:
    """A uid of the boxes' range with at least ``least`` tasks on this machine (every container's, seen from here)."""
    for uid, tasks in uids.tasks_by_uid().items():
        if uids.FIRST_UID <= uid <= uids.LAST_UID and len(tasks) >= least:
            return uid
    return None


def test_two_containers_on_one_host_an_honest_upload_keeps_full_marks(tmp_path, monkeypatch):
    """Gradescope and PrairieLearn run many containers on one host, each with its own pid namespace and /tmp, and the
    kernel counts a uid's processes host-wide. A hostile upload (lab 02's solution plus a cell holding 230 threads
    for 25 s) runs in one container; while it holds its uid, an honest upload is graded on each platform in two
    more containers, their uids drawn from a range of four that starts at the hostile kernel's own (so they meet it,
    rather than almost never, as with the whole range). Each box proves its uid free host-wide before taking it:
    both honest uploads keep full marks."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")
    name, hostile_nb = _notebook(LAB02, last=HOLDS_ITS_UID)
    hostile = platform_harness.write_upload(
        tmp_path / "uploads" / "hostile", {name: nbformat.writes(hostile_nb).encode()}
    )
    _, honest_nb = _notebook(LAB02)
    honest = platform_harness.write_upload(tmp_path / "uploads" / "honest", {name: nbformat.writes(honest_nb).encode()})
    image = platform_harness.gradescope_image(LAB02, tmp_path / "gradescope")
    question = platform_harness.build_question(LAB02, tmp_path)
    runs: Dict[str, object] = {}

    def grade(label, call):
        try:
            runs[label] = call()
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            runs[label] = error

    first = threading.Thread(
        target=grade,
        args=("hostile", lambda: platform_harness.run_gradescope(image, hostile, tmp_path / "a", docker=True)),
    )
    first.start()
    deadline = time.monotonic() + 240
    held = None
    while held is None and time.monotonic() < deadline and first.is_alive():
        held = _uid_holding(200)
        time.sleep(0.2)
    assert held is not None, f"the hostile kernel never held its uid's process count: {runs}"
    meet = {"PAGED_KV_UID_RANGE": f"{held}-{held + 3}"}
    others = [
        threading.Thread(
            target=grade,
            args=(
                "gradescope",
                lambda: platform_harness.run_gradescope(image, honest, tmp_path / "b", docker=True, env=meet),
            ),
        ),
        threading.Thread(
            target=grade,
            args=(
                "prairielearn",
                lambda: platform_harness.run_prairielearn(question, honest, tmp_path / "c", docker=True, env=meet),
            ),
        ),
    ]
    for thread in others:
        thread.start()
    for thread in [first] + others:
        thread.join()
    failed = {label: run for label, run in runs.items() if isinstance(run, BaseException)}
    assert not failed, failed
    assert runs["gradescope"].results["score"] == 10.0, runs["gradescope"].results
    assert runs["prairielearn"].results["score"] == 1.0, runs["prairielearn"].results
    for label, run in runs.items():
        assert run.after == {"tasks": [], "files": []}, (label, run.after)
