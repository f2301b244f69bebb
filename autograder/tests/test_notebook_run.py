"""A notebook's grading as a value (``autograder.grade.notebook_run``): the limits resolved once per lab, the run's
events and time budget, the record it leaves (``grading_record.record``), and the executor as the port."""

from __future__ import annotations

from time import monotonic

import nbformat
import pytest

from autograder.grade import grading_record
from autograder.grade.hardened import HardenedExecute
from autograder.grade.notebook_run import KernelPort, Limits, NotebookRun
from autograder.verdict import cells as verdicts
from autograder.verdict.events import EventKind, VerdictKind

SETTINGS = dict(
    cell_timeout=30, notebook_timeout=120, memory_mb=2048, file_mb=512, ram_mb=4096, pids=256, cpus=1.0, scratch_mb=1024
)


class Settings:
    def __init__(self, **changes):
        for name, value in dict(SETTINGS, **changes).items():
            setattr(self, name, value)


def _limits(**changes) -> Limits:
    return Limits(**dict(SETTINGS, **changes))


def test_a_labs_own_limits_win_over_the_settings_and_only_for_that_lab():
    lab_limits = {"06-x": {"notebook_timeout": 240, "memory_mb": 131072, "cpus": 2}}
    own = Limits.resolve(Settings(), lab_limits, "06-x")
    assert (own.notebook_timeout, own.memory_mb, own.cell_timeout) == (240, 131072, 30)
    assert isinstance(own.cpus, float) and own.cpus == 2.0
    assert Limits.resolve(Settings(), lab_limits, "02-y") == _limits()


def test_limits_are_frozen():
    with pytest.raises(AttributeError):
        _limits().cell_timeout = 1


@pytest.mark.parametrize("bad", [{"cell_timeout": 0}, {"ram_mb": -1}, {"pids": True}])
def test_a_limit_that_is_not_a_positive_number_is_refused_with_its_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        _limits(**bad)


def test_a_labs_limit_with_a_name_no_limit_has_is_refused():
    with pytest.raises(ValueError, match="notebook_timout"):
        Limits.resolve(Settings(), {"06-x": {"notebook_timout": 240}}, "06-x")


def _nb():
    test = nbformat.v4.new_code_cell("assert True")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "lab02-visible", "points": 2}
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), test])


def test_an_event_is_named_by_the_cells_grade_id_or_its_index():
    nb = _nb()
    run = NotebookRun(lab="02-y", nb=nb, limits=_limits(), deadline=monotonic() + 60)
    run.event(nb.cells[0], 0, EventKind.TIMEOUT, "> 30 s")
    run.event(nb.cells[1], 1, EventKind.MEMORY, "> 2048 MiB")
    assert [(e["cell"], e["kind"], e["graded"]) for e in run.events] == [
        ("cell 0", EventKind.TIMEOUT, False),
        ("lab02-visible", EventKind.MEMORY, True),
    ]


def test_once_the_notebooks_time_is_spent_a_cell_says_so_and_is_an_event():
    nb = _nb()
    live = NotebookRun(lab="02-y", nb=nb, limits=_limits(), deadline=monotonic() + 60)
    assert not live.budget_spent(nb.cells[0], 0) and live.events == [] and 59 < live.remaining() <= 60
    spent = NotebookRun(lab="02-y", nb=nb, limits=_limits(notebook_timeout=90), deadline=monotonic() - 1)
    assert spent.budget_spent(nb.cells[0], 0)
    assert nb.cells[0].outputs[0]["ename"] == "TimeBudgetExceeded" and "90 s" in nb.cells[0].outputs[0]["evalue"]
    assert [e["kind"] for e in spent.events] == [EventKind.NOT_RUN]
    assert spent.model(0) is None  # (no source read)


def test_the_record_of_a_run_holds_its_language_events_phases_and_verdicts():
    run = NotebookRun(lab="02-y", nb=_nb(), limits=_limits(), deadline=monotonic() + 60, language="zh_CN")
    run.verdicts["lab02-visible"] = verdicts.Verdict("lab02-visible", False, VerdictKind.CHECK, "CheckFailed", ["no"])
    run.event(run.nb.cells[1], 1, EventKind.TIMEOUT, "> 30 s")
    run.phases.add("kernel start", 1.234)
    record = grading_record.record({"nbgrader": {"student": "s1", "assignment": "02-y"}}, run, "bwrap", 3.456, 1)
    assert (record["student"], record["assignment"], record["language"]) == ("s1", "02-y", "zh_CN")
    assert (record["isolation"], record["seconds"], record["spare_kernels"]) == ("bwrap", 3.46, 1)
    assert record["phases"] == {"kernel start": 1.23} and record["events"] == run.events
    assert (
        record["verdicts"]["lab02-visible"]["kind"] == "check"
        and record["verdicts"]["lab02-visible"]["message"] == "no"
    )


def test_the_executor_is_the_kernel_port_and_resolves_its_settings_per_lab():
    executor = HardenedExecute(cell_timeout=20, lab_limits={"06-x": {"file_mb": 65536}})
    assert isinstance(executor, KernelPort)
    executor.resources = {"nbgrader": {"assignment": "06-x"}}
    limits = executor.limits()
    assert (limits.cell_timeout, limits.file_mb, limits.notebook_timeout) == (20, 65536, executor.notebook_timeout)
