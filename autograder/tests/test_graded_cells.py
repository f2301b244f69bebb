"""``GradedCells`` alone (as nbgrader tests a preprocessor alone): a real lab's release notebook read against its
source (``submission.read``), its graded cells decided with a fake ``KernelPort`` and no kernel at all. What each
outcome of the kernel costs, which verdict and event it leaves, and which cells wait for their part's own box."""

from __future__ import annotations

from time import monotonic

import nbformat
import pytest

from autograder.course.layout import RELEASE_DIR, SOURCE_DIR
from autograder.editions import manifest
from autograder.grade import submission
from autograder.grade.graded_cells import GradedCells
from autograder.grade.notebook_run import KernelPort, Limits, NotebookRun
from autograder.verdict.events import EventKind, VerdictKind

LIMITS = Limits(
    cell_timeout=5, notebook_timeout=60, memory_mb=2048, file_mb=64, ram_mb=4096, pids=64, cpus=1.0, scratch_mb=64
)


class RefusingClient:
    """A kernel client that takes no request (its kernel is gone)."""

    def execute(self, *args, **kwargs):
        raise RuntimeError("no kernel")


class FakePort:
    """The kernels, faked: the visible run's outcome is ``visible``; the main kernel takes no request; a part's
    kernel never starts. Every call is recorded."""

    def __init__(self, visible: str = "ok"):
        self.visible, self.calls = visible, []

    def run_visible(self, cell, index):
        self.calls.append(("run_visible", index))
        return self.visible

    def main_kernel(self):
        from autograder.grade.silent_runs import Kernel

        self.calls.append(("main_kernel",))
        return Kernel(km=None, kc=RefusingClient(), channel=None)

    def start_part_kernel(self, part):
        self.calls.append(("start_part_kernel", part))
        raise RuntimeError("no box here")


def _run(lab: str, notebook: str, seconds_left: float = 60.0) -> NotebookRun:
    nb = nbformat.read(str(RELEASE_DIR / lab / notebook), as_version=4)
    read = submission.read(nb, SOURCE_DIR / lab / notebook)
    return NotebookRun(
        lab=lab,
        nb=nb,
        limits=LIMITS,
        deadline=monotonic() + seconds_left,
        todos=manifest.BY_LAB.get(lab),
        view=read.view,
        rules=read.rules,
    )


def _index(run: NotebookRun, grade_id: str) -> int:
    return next(c.index for c in run.view if c.grade_id == grade_id)


def test_the_fake_port_is_a_kernel_port():
    assert isinstance(FakePort(), KernelPort)


@pytest.mark.parametrize("outcome, kind", [("dead", VerdictKind.KERNEL), ("skipped", VerdictKind.TIMEOUT)])
def test_a_visible_test_whose_run_did_not_finish_scores_0_without_asking_the_kernel(outcome, kind):
    run = _run("02-atomic-prefill", "atomic_prefill.ipynb")
    port = FakePort(visible=outcome)
    index = _index(run, "lab02-visible")
    assert GradedCells(run, port, deferred=False).grade(run.nb.cells[index], index) == outcome
    assert port.calls == [("run_visible", index)]
    assert run.verdicts["lab02-visible"].kind == kind and not run.verdicts["lab02-visible"].passed


def test_a_hidden_test_after_the_notebooks_time_is_spent_is_not_run_and_says_so():
    run = _run("02-atomic-prefill", "atomic_prefill.ipynb", seconds_left=-1.0)
    port = FakePort()
    index = _index(run, "lab02-hidden-count")
    cell = run.nb.cells[index]
    assert GradedCells(run, port, deferred=False).grade(cell, index) == "skipped"
    assert port.calls == []  # a hidden test never runs in the kernel for what it shows
    assert run.verdicts["lab02-hidden-count"].kind == VerdictKind.TIMEOUT
    assert [(e["cell"], e["kind"]) for e in run.events] == [("lab02-hidden-count", EventKind.NOT_RUN)]
    assert cell.outputs[0]["ename"] == "TimeBudgetExceeded" and "60 s" in cell.outputs[0]["evalue"]


def test_a_hidden_test_whose_kernel_takes_no_request_scores_0_as_a_dead_kernel():
    run = _run("02-atomic-prefill", "atomic_prefill.ipynb")
    port = FakePort()
    index = _index(run, "lab02-hidden-count")
    assert GradedCells(run, port, deferred=False).grade(run.nb.cells[index], index) == "dead"
    assert port.calls == [("main_kernel",)]
    verdict = run.verdicts["lab02-hidden-count"]
    assert (verdict.passed, verdict.kind) == (False, VerdictKind.KERNEL)
    assert [e["kind"] for e in run.events] == [EventKind.KERNEL_DIED]
    assert "while the grader tested it" in run.events[0]["detail"]


def test_a_cell_the_source_does_not_grade_scores_0_with_a_grading_error():
    run = _run("02-atomic-prefill", "atomic_prefill.ipynb")
    index = next(c.index for c in run.view if c.kind == "given")
    cell = run.nb.cells[index]
    assert GradedCells(run, FakePort(), deferred=False).grade(cell, index) == "error"
    assert cell.outputs[0]["ename"] == "GradingError"
    assert [v.kind for v in run.verdicts.values()] == [VerdictKind.ERROR]


def test_a_parts_hidden_test_waits_for_the_main_kernel_and_then_its_own_box_which_is_tried_twice():
    run = _run("05-prefix-cache", "prefix_cache.ipynb")
    part = next(p for p in run.todos.parts if p.own_box)
    grade_id = next(g for g in part.cells if "hidden" in g)
    index = _index(run, grade_id)
    port = FakePort()
    graded = GradedCells(run, port, deferred=True)
    assert graded.grade(run.nb.cells[index], index) == "deferred"
    assert grade_id not in run.verdicts and graded.parts_used == {part.name}
    graded.decide_deferred()
    assert port.calls == [("start_part_kernel", part.name)] * 2
    verdict = run.verdicts[grade_id]
    assert (verdict.passed, verdict.kind) == (False, VerdictKind.KERNEL)
    assert "could not start" in verdict.message
