"""One lab through the whole pipeline, fast (``make check``'s end-to-end step): an export of two students
collected, graded in the box and checked; the solution earns full marks, the untouched release 0, both with
feedback pages, and both reach grades.csv and the LMS's import file with the ids their download gave.
(The class simulation does this for every lab and every kind of student.)"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from autograder.proof import classroom, report
from autograder.grade import lms_gradebook

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
    # the export names the first student as Canvas does, the second as Moodle does (classroom.write_export)
    work = Path(result.summary["work"])
    with open(work / "reports" / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == LAB}
    canvas, moodle = (result.ids[s.sid] for s in students)
    assert (rows[canvas]["lms"], rows[canvas]["lms_id"], rows[canvas]["late"]) == ("canvas", canvas, "no")
    assert (rows[moodle]["lms"], rows[moodle]["full_name"], rows[moodle]["late"]) == ("moodle", "Student 1", "")
    by_id = {result.ids[s.sid]: f"{totals[s.kind]:g}" for s in students}
    canvas_rows, _ = lms_gradebook.canvas_gradebook(work, LAB, "4321")
    assert [(r[1], r[5]) for r in canvas_rows[1:]] == [(canvas, by_id[canvas])]
    moodle_rows, _ = lms_gradebook.moodle_worksheet(work, LAB)
    assert [(r[0], r[4]) for r in moodle_rows[1:]] == [(f"Participant {moodle}", by_id[moodle])]
