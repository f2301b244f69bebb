"""One lab through the whole pipeline, fast (``make check``'s end-to-end step): an export of two students
collected, graded in the box and checked; the solution earns full marks, the untouched release 0, both with
feedback pages. (The class simulation does this for every lab and every kind of student.)"""
from __future__ import annotations

import os

from autograder.pipeline import classroom, report

LAB = "02-atomic-prefill"


def test_the_solution_earns_full_marks_and_the_release_nothing(tmp_path):
    root = report.prepare_root(tmp_path / "course")
    info = classroom.load_lab(LAB, root / "solutions", root / "course")
    students = [s for s in classroom.build_class(info, root) if s.kind in ("solution", "untouched")]
    result = report.run_lab(LAB, root, dict(os.environ), students=students)
    assert {s.kind for s in students} == {"solution", "untouched"}
    assert all(problems == [] for problems in result.problems.values()), result.problems
    totals = {s.kind: sum(result.scores[s.sid].values()) for s in students}
    assert totals == {"solution": 10.0, "untouched": 0.0}
