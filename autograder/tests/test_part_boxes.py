"""``PartBox`` alone: a part's own box, with a fake ``KernelPort`` whose kernel records what it is asked to run.
Before a part's graded cell it replays the student's cells whole and, of the given cells, only what the student's
cells read; once caught up it replays nothing twice; a box that cannot catch up grades nothing."""

from __future__ import annotations

from time import monotonic

import nbformat

from autograder.course.layout import SOURCE_DIR
from autograder.editions import manifest
from autograder.grade import submission
from autograder.grade.notebook_run import Limits, NotebookRun
from autograder.grade.part_boxes import PartBox
from autograder.grade.silent_runs import Kernel
from autograder.verdict import cells as verdicts
from autograder.verdict.events import VerdictKind

LAB, NOTEBOOK = "05-prefix-cache", "prefix_cache.ipynb"
LIMITS = Limits(
    cell_timeout=5, notebook_timeout=60, memory_mb=2048, file_mb=64, ram_mb=4096, pids=64, cpus=1.0, scratch_mb=64
)


class RecordingClient:
    """A kernel client that runs nothing and answers every request ``status``, recording the code."""

    def __init__(self, status: str = "ok"):
        self.ran, self.status, self.pending = [], status, []
        self.shell_channel = self

    def stop_channels(self):
        self.stopped = True

    def close(self):  # (the grading channel's)
        pass

    def execute(self, code, **kwargs):
        self.ran.append(code)
        msg_id = f"m{len(self.ran)}"
        self.pending.append(msg_id)
        return msg_id

    async def get_msg(self, timeout=None):
        return {"parent_header": {"msg_id": self.pending.pop(0)}, "content": {"status": self.status}}


class Port:
    def __init__(self, client):
        self.client, self.started = client, 0

    def run_visible(self, cell, index):
        raise AssertionError("a part's box never runs a visible cell")

    def main_kernel(self):
        raise AssertionError("a part's box never uses the main kernel")

    def start_part_kernel(self, part):
        self.started += 1
        return Kernel(km=None, kc=self.client, channel=self.client)


def _run(seconds_left: float = 60.0) -> NotebookRun:
    """The solution notebook of lab 05 graded as a submission, every code cell that is no test run without error."""
    nb = nbformat.read(str(SOURCE_DIR / LAB / NOTEBOOK), as_version=4)
    read = submission.read(nb, SOURCE_DIR / LAB / NOTEBOOK)
    run = NotebookRun(
        lab=LAB,
        nb=nb,
        limits=LIMITS,
        deadline=monotonic() + seconds_left,
        todos=manifest.BY_LAB[LAB],
        view=read.view,
        rules=read.rules,
    )
    run.replayable.extend(c.index for c in read.view if c.kind in ("given", "answer") and c.source.strip())
    return run


def _graded(run: NotebookRun, grade_id: str):
    return next(c for c in run.view if c.grade_id == grade_id)


def _passes(model, kernel):
    return verdicts.Verdict(model.grade_id, True, VerdictKind.PASS), False


def test_a_parts_box_replays_the_students_cells_whole_and_of_the_given_cells_only_what_they_read():
    run, client = _run(), RecordingClient()
    port = Port(client)
    box = PartBox(run, port, "release", _passes)
    model = _graded(run, "lab05-hidden-release")
    assert box.verdict(model, model.index).passed
    answers = [c.index for c in run.view if c.kind == "answer" and c.index < model.index]
    assert client.ran[1:] == [run.nb.cells[i].source for i in answers]
    setup = run.nb.cells[run.view[1].index].source
    assert "from paged_kv.lab.starters import" in client.ran[0] and len(client.ran[0]) < len(setup)
    assert not any("draw_" in code for code in client.ran)  # the pictures' cells are not drawn again
    ran = len(client.ran)
    later = _graded(run, "lab05-hidden-release-traces")
    assert box.verdict(later, later.index).passed
    assert (len(client.ran), port.started) == (ran, 1)  # caught up: nothing new to replay, the same box
    box.close()
    assert box.verdict(later, later.index).passed
    assert (len(client.ran), port.started) == (2 * ran, 2)  # a box started again replays from the top


def test_a_parts_box_that_cannot_catch_up_grades_nothing_and_says_why():
    run, client = _run(seconds_left=-1.0), RecordingClient()
    box = PartBox(run, Port(client), "release", _passes)
    model = _graded(run, "lab05-hidden-release")
    verdict = box.verdict(model, model.index)
    assert (verdict.passed, verdict.kind) == (False, VerdictKind.KERNEL)
    assert "grading time was spent" in verdict.message and client.ran == []


def test_a_parts_box_whose_kernel_died_while_it_was_tested_grades_no_more_of_the_part():
    run, decided = _run(), []

    def dies_after(model, kernel):
        decided.append(model.grade_id)
        return verdicts.Verdict(model.grade_id, True, VerdictKind.PASS), True

    box = PartBox(run, Port(RecordingClient()), "release", dies_after)
    model = _graded(run, "lab05-hidden-release")
    assert box.verdict(model, model.index).passed  # the verdict stands: the kernel died after it
    again = box.verdict(model, model.index)
    assert decided == [model.grade_id]
    assert not again.passed and "stopped while it was tested" in again.message
