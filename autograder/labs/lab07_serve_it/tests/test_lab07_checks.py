"""Lab 07's grader, beyond what test_graders.py checks for every lab: each catalogued bug loses the
points of the checks it breaks, feedback names the step and gives a hint, and no form of delegating
``schedule``/``preempt`` to the reference scheduler earns anything."""

from __future__ import annotations

import inspect

import pytest

import paged_kv.engine.scheduler
from autograder.labs.lab07_serve_it import checks as grader
from autograder.labs.lab07_serve_it.tests import bugs as bugs

CHECKS = {
    name: f
    for name, f in inspect.getmembers(grader, inspect.isfunction)
    if name.startswith("check_") and f.__module__ == grader.__name__
}
Reference = paged_kv.engine.scheduler.Scheduler
Starter = bugs.SchedulerWithoutSchedule


def failures(cls):
    """{check name: message} for every check ``cls`` fails; an unwritten TODO counts as a failure."""
    failed = {}
    for name, check in CHECKS.items():
        try:
            check(cls)
        except (AssertionError, NotImplementedError) as error:
            failed[name] = f"{type(error).__name__}: {error}" if isinstance(error, NotImplementedError) else str(error)
    return failed


def test_the_grader_has_the_four_checks_the_notebook_calls():
    assert set(CHECKS) == {bugs.ADMISSION, bugs.DECODE, bugs.PREEMPTION, bugs.RANDOM}


@pytest.mark.parametrize("bug", bugs.ALL_BUGS)
def test_every_bug_loses_the_points_of_the_checks_it_breaks(bug):
    failed = failures(bugs.bug_class(bug))
    assert bugs.must_fail(bug) <= set(failed), (
        f"{bug}: expected {sorted(bugs.must_fail(bug))} to fail, got {sorted(failed)}"
    )
    assert all(message.startswith("[") for message in failed.values()), failed


def test_feedback_names_the_step_and_the_step_before_and_gives_a_hint():
    message = failures(bugs.bug_class("preempts the oldest"))[bugs.PREEMPTION]
    first, *rest = message.splitlines()
    assert first.startswith("[") and "step" in first and "scheduled" in first
    assert [line.split(":")[0].strip() for line in rest] == ["before", "expected", "got", "hint"]
    assert "NEWEST" in rest[-1]


def test_a_scheduler_stuck_in_a_loop_is_stopped_with_a_readable_message():
    class Stuck(Starter):
        def preempt(self, seq):
            self.block_manager.deallocate(seq)
            self.waiting.appendleft(seq)

        def schedule(self):
            while self.waiting and self.block_manager.can_allocate(self.waiting[0]) > -5:
                pass

    failed = failures(Stuck)
    assert set(failed) == set(CHECKS)
    assert all("a loop that never ends" in m for m in failed.values()), failed


# -- delegation ------------------------------------------------------------------------------------------
# Every form of handing the scheduler to the reference is read from the submitted text: test_provenance.py.


def test_super_reaches_a_stub_not_the_reference():
    class UsesSuper(Starter):
        def schedule(self):
            return super().schedule()

        def preempt(self, seq):
            return super().preempt(seq)

    failed = failures(UsesSuper)
    assert set(failed) == set(CHECKS)
    assert all(message.startswith("TodoNotWritten") for message in failed.values()), failed


# The lab's pitfall list, as the bug each one is in the catalogue, and two slips of our own that only a batch
# smaller than the running queue shows (scheduled ones back to the tail, a budget that never shrinks).
VISIBLE_MUST_CATCH = {
    "Skipping ahead of the head": "skips ahead of the head of the queue",
    "Preempting the oldest": "preempts the oldest",
    "Forgetting `deallocate`": "forgets to deallocate on preemption",
    "Preempted to the tail of `waiting`": "preempted sequence to the tail of waiting",
    "Mixing the phases": "prefill and decode in the same step",
    "Counting cached tokens against the budget": "budget counts cached tokens",
    "Decode checks on your own": "decode growth by hand, wrong for block size 1",
    "(slip) scheduled ones to the tail of running": "scheduled ones to the tail of running",
    "(slip) a budget that never shrinks": "budget compared with the total, not what is left",
}


def run_visible_cell(cls):
    """The notebook's visible test cell, run with ``cls`` as the student's Scheduler."""
    from notebook_code import run_visible_cell as run_cell

    imports = (
        "import paged_kv\nfrom paged_kv import BlockManager\nfrom paged_kv.lab.feedback import expect_equal, say\n"
        "from paged_kv.lab.scheduler_trace import (TraceRequest, TraceSpec, compare_with_reference, format_snapshot,\n"
        "                                          reference_snapshots)"
    )
    run_cell("07-serve-it", "lab07-visible", imports, {"Scheduler": cls})


def test_the_visible_cell_passes_the_solution(capsys):
    run_visible_cell(bugs.student_class(bugs.solution_source()))
    assert "Visible tests passed." in capsys.readouterr().out


@pytest.mark.parametrize("pitfall", sorted(VISIBLE_MUST_CATCH))
def test_the_visible_cell_catches_each_pitfall_with_one_short_block(pitfall, capsys):
    from paged_kv.lab.feedback import CheckFailed

    with pytest.raises(CheckFailed) as caught:
        run_visible_cell(bugs.bug_class(VISIBLE_MUST_CATCH[pitfall]))
    assert "Visible tests passed." not in capsys.readouterr().out
    lines = caught.value._render_traceback_()
    assert 2 <= len(lines) <= 6 and caught.value.hint, lines


def test_every_listed_pitfall_is_tried_on_the_visible_cell():
    import nbformat

    from autograder.course.layout import LABS, SOURCE_DIR

    lab = "07-serve-it"
    text = next(
        c.source
        for c in nbformat.read(SOURCE_DIR / lab / LABS[lab], as_version=4).cells
        if c.cell_type == "markdown" and "Pitfalls to remember" in c.source
    )
    listed = [line.split("**")[1].rstrip(".") for line in text.splitlines() if line.startswith("- **")]
    assert sorted(listed) == sorted(k for k in VISIBLE_MUST_CATCH if not k.startswith("(slip)")), listed
