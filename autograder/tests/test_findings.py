"""What a provenance finding costs (``autograder.grade.findings``), on lab 02's release read against its source:
a finding in a TODO zeroes the tests that read what it binds (or every test below it), says why in those cells,
and is an event; with findings costing nothing it is only an event; without the source no test is decided."""

from __future__ import annotations

from time import monotonic

import nbformat

from autograder.course.layout import RELEASE_DIR, SOURCE_DIR
from autograder.grade import submission
from autograder.grade.findings import apply_findings
from autograder.grade.notebook_run import Limits, NotebookRun
from autograder.verdict import cells as verdicts
from autograder.verdict.events import EventKind, VerdictKind
from autograder.verdict.provenance_rules import BELOW, TODO, Finding

LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
LIMITS = Limits(
    cell_timeout=5, notebook_timeout=60, memory_mb=2048, file_mb=64, ram_mb=4096, pids=64, cpus=1.0, scratch_mb=64
)


def _run(with_source: bool = True) -> NotebookRun:
    nb = nbformat.read(str(RELEASE_DIR / LAB / NOTEBOOK), as_version=4)
    read = submission.read(nb, SOURCE_DIR / LAB / NOTEBOOK)
    run = NotebookRun(LAB, nb, LIMITS, monotonic() + 60, view=read.view if with_source else None)
    for cell in read.view:
        if cell.kind == "graded":
            run.verdicts[cell.grade_id] = verdicts.Verdict(cell.grade_id, True, VerdictKind.PASS)
    return run


def _finding(run: NotebookRun, grade_id: str, scope: str) -> Finding:
    cell = next(c for c in run.view if c.grade_id == grade_id)
    return Finding(cell.index, grade_id, 3, "import paged_kv.cache.manager", "imports the reference", scope)


def test_a_finding_in_a_todo_zeroes_the_tests_that_read_its_class_and_says_why():
    run = _run()
    apply_findings(run, [_finding(run, "lab02-prefill", TODO)], [], cost_points=True)
    zeroed = sorted(g for g, v in run.verdicts.items() if v.kind == VerdictKind.INTEGRITY)
    assert zeroed == ["lab02-hidden-atomic", "lab02-hidden-count", "lab02-hidden-random", "lab02-visible"]
    visible = run.nb.cells[next(c.index for c in run.view if c.grade_id == "lab02-visible")]
    assert visible.outputs[-1]["ename"] == "IntegrityError" and "imports the reference" in visible.outputs[-1]["evalue"]
    assert [(e["kind"], e["cost_points"], e["line"]) for e in run.events] == [(EventKind.INTEGRITY, True, 3)]


def test_a_finding_below_the_tests_costs_nothing_but_the_tests_below_it():
    run = _run()
    apply_findings(run, [_finding(run, "lab02-stretch", BELOW)], [], cost_points=True)
    assert all(v.passed for v in run.verdicts.values())  # every graded cell lies above the stretch


def test_findings_that_cost_nothing_are_only_reported_and_a_similar_todo_is_an_event():
    run = _run()
    similar = [("lab02-prefill", "KVCacheManager.allocate_for_prefill", 0.93)]
    apply_findings(run, [_finding(run, "lab02-prefill", TODO)], similar, cost_points=False)
    assert all(v.passed for v in run.verdicts.values())
    assert [(e["kind"], e.get("cost_points")) for e in run.events] == [
        (EventKind.INTEGRITY, False),
        (EventKind.SIMILAR, None),
    ]
    assert "93% like" in run.events[1]["detail"]


def test_without_the_labs_source_every_test_says_it_could_not_be_decided():
    run = _run(with_source=False)
    apply_findings(run, [], [], cost_points=True)
    tests = [c for c in run.nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    assert len(tests) == 4 and all(c.outputs[0]["ename"] == "GradingError" for c in tests)
