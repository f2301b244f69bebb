"""What a lab's boxes are given and kept from (``autograder.grade.lab_boxes``), without starting a box: what no
box may read, and a refused grader grading nothing (every test 0, saying to tell the instructor)."""

from __future__ import annotations

import nbformat

from autograder.box import trust
from autograder.editions.build import editions_dir
from autograder.grade import lab_boxes
from autograder.verdict.events import EventKind, VerdictKind


def test_no_box_may_read_the_trusted_paths_the_editions_the_source_notebook_or_the_canary(tmp_path):
    source = tmp_path / "solutions" / "02-x" / "lab.ipynb"
    kept = lab_boxes.trusted([str(tmp_path / "solutions"), str(tmp_path / "solutions")], source, str(tmp_path / "ev"))
    canary = tmp_path / "ev" / trust.CANARY_NAME
    assert kept == [str(tmp_path / "solutions"), str(editions_dir()), str(source), str(canary)]
    assert canary.exists()
    assert lab_boxes.trusted([], None, "") == [str(editions_dir())]


def test_a_refused_grader_grades_nothing_and_every_test_says_to_tell_the_instructor():
    test = nbformat.v4.new_code_cell("assert f() == 1")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "lab02-visible", "points": 2}
    given = nbformat.v4.new_code_cell("x = 1")
    given.outputs = [nbformat.v4.new_output("stream", text="old")]
    nb = nbformat.v4.new_notebook(cells=[given, test])
    verdicts, events = {}, []
    report = trust.Report(level="rlimits", uid=0, problem="the kernel would run as root")
    lab_boxes.refuse(nb, verdicts, events, report)
    assert given.outputs == [] and test.outputs[0]["ename"] == "GradingRefused"
    assert verdicts["lab02-visible"].kind == VerdictKind.ERROR and not verdicts["lab02-visible"].passed
    assert [(e["kind"], e["detail"]) for e in events] == [(EventKind.ISOLATION, "the kernel would run as root")]
    assert nb.cells[0].cell_type == "markdown" and "could not be isolated" in nb.cells[0].source  # the notes
