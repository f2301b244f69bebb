"""Lab 09's grader, beyond what test_graders.py checks for every lab: each catalogued bug loses the points of the
checks it breaks, feedback names the step and gives a hint, the visible cell catches each pitfall the notebook
lists, and super() reaches a stub."""

from __future__ import annotations

import inspect

import pytest

from autograder.labs.lab09_chunked_prefill import checks as grader
from autograder.labs.lab09_chunked_prefill.tests import bugs as bugs
from paged_kv.engine.chunked import ChunkedScheduler
from paged_kv.lab.chunked_trace import make_chunk_trace, check_rules

CHECKS = {
    name: f
    for name, f in inspect.getmembers(grader, inspect.isfunction)
    if name.startswith("check_") and f.__module__ == grader.__name__
}
Starter = bugs.ChunkedSchedulerWithoutSchedule


def failures(cls):
    failed = {}
    for name, check in CHECKS.items():
        try:
            check(cls)
        except (AssertionError, NotImplementedError) as error:
            failed[name] = f"{type(error).__name__}: {error}" if isinstance(error, NotImplementedError) else str(error)
    return failed


def test_the_grader_has_the_four_checks_the_notebook_calls():
    assert set(CHECKS) == {bugs.BUDGET, bugs.BLOCKS, bugs.CACHE, bugs.RANDOM}


def test_the_catalogue_holds_at_least_eight_bugs_and_two_variants():
    assert len(bugs.BUGS) >= 8 and len(bugs.VARIANTS) >= 2


@pytest.mark.parametrize("seed", range(40))
def test_the_reference_keeps_every_rule_on_random_traces(seed):
    spec = make_chunk_trace(
        seed,
        12,
        num_blocks=6 + seed % 9,
        block_size=(1, 2, 3, 4)[seed % 4],
        budget=(1, 3, 5, 8, 13, 40)[seed % 6],
        max_num_seqs=1 + seed % 6,
    )
    check_rules(ChunkedScheduler, spec, f"seed {seed}")


@pytest.mark.parametrize("bug", bugs.ALL_BUGS)
def test_every_bug_loses_the_points_of_the_checks_it_breaks(bug):
    failed = failures(bugs.bug_class(bug))
    assert bugs.must_fail(bug) <= set(failed), (
        f"{bug}: expected {sorted(bugs.must_fail(bug))} to fail, got {sorted(failed)}"
    )
    assert all(message.startswith("[") for message in failed.values()), failed


def test_feedback_names_the_step_and_gives_a_hint():
    message = failures(bugs.bug_class("blocks for the whole prompt at admission"))[bugs.BUDGET]
    first, *rest = message.splitlines()
    assert first.startswith("[") and "step" in first and "blocks" in first
    assert [line.split(":")[0].strip() for line in rest] == ["expected", "got", "hint"]
    assert "allocate_slots" in rest[-1]


def test_super_reaches_a_stub_not_the_reference():
    class UsesSuper(Starter):
        def schedule(self):
            return super().schedule()

    failed = failures(UsesSuper)
    assert set(failed) == set(CHECKS)
    assert all(message.startswith("TodoNotWritten") for message in failed.values()), failed


# The pitfalls the notebook lists, each as the bug that commits it.
VISIBLE_MUST_CATCH = {
    "A chunk that overruns the budget": "a running chunk overruns the budget",
    "Blocks for the whole prompt at admission": "blocks for the whole prompt at admission",
    "Registering a partly computed block": "registering the chunk's blocks at allocation",
    "Counting a cached prefix as budget": "counting the cached prefix as budget",
    "Starving decodes behind prefill": "waiting admitted before running (starves decodes)",
}


def run_visible_cell(cls):
    """The notebook's visible test cell, run with ``cls`` as the student's ChunkedScheduler."""
    from notebook_code import run_visible_cell as run_cell

    imports = (
        "from paged_kv.lab.chunked_trace import ChunkTraceSpec, check_rules, describe\n"
        "from paged_kv.lab.scheduler_trace import TraceRequest"
    )
    run_cell(bugs.LAB, "lab09-visible", imports, {"ChunkedScheduler": cls})


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

    text = next(
        c.source
        for c in nbformat.read(SOURCE_DIR / bugs.LAB / LABS[bugs.LAB], as_version=4).cells
        if c.cell_type == "markdown" and "Pitfalls to remember" in c.source
    )
    listed = [line.split("**")[1].rstrip(".") for line in text.splitlines() if line.startswith("- **")]
    assert sorted(listed) == sorted(VISIBLE_MUST_CATCH), listed
