"""One student's grading of one lab as every view shows it (``autograder.verdict.result``, read from a work folder
by ``autograder.verdict.lab_results``): built from the grading record, the gradebook's points and collection's
record; a refused grading is no grade at all."""

from __future__ import annotations

import json

import pytest

from autograder.verdict import lab_results
from autograder.verdict.events import EventGroup, EventKind, VerdictKind, event, write_record
from autograder.verdict.result import Status, Student, build

LAB = "02-atomic-prefill"
CELLS = [
    {"grade_id": "lab02-visible", "points": 2.0, "section": "3. Your task", "hidden": False},
    {"grade_id": "lab02-hidden-count", "points": 8.0, "section": "3. Your task", "hidden": True},
]


def _record(events=(), verdicts=None) -> dict:
    return {
        "student": "s1",
        "assignment": LAB,
        "isolation": "rlimits",
        "seconds": 4.0,
        "phases": {"notebook cells": 3.0},
        "events": list(events),
        "verdicts": verdicts or {},
    }


def test_a_graded_result_holds_each_cells_points_verdict_and_events_by_typed_kind():
    record = _record(
        [event("lab02-hidden-count", EventKind.TIMEOUT, "30 s", graded=True)],
        {"lab02-hidden-count": {"passed": False, "kind": "timeout", "message": "Time limit"}},
    )
    result = build(
        LAB,
        Student("s1", "张三", late=True),
        CELLS,
        record,
        {"lab02-visible": 2.0, "lab02-hidden-count": 0.0},
        penalty=0.5,
    )
    assert result.status is Status.GRADED and result.raw_score == 2.0 and result.score == 1.5
    assert [c.grade_id for c in result.cells] == ["lab02-visible", "lab02-hidden-count"]
    assert result.cells[1].kind is VerdictKind.TIMEOUT and result.cells[1].passed is False and result.cells[0].full
    assert result.kinds == {EventKind.TIMEOUT} and result.events[0].kind.group is EventGroup.LIMIT
    assert result.student.shown == "张三" and result.student.late_word == "yes" and result.score_text() == "1.5"


def test_a_refused_grading_has_no_score_whatever_the_gradebook_says():
    """``lab_boxes.refuse`` scores every cell 0 in the gradebook and notes an isolation event: that is no grade."""
    record = _record([event("notebook", EventKind.ISOLATION, "grading kernels would run as root")])
    result = build(LAB, Student("s1"), CELLS, record, {"lab02-visible": 0.0, "lab02-hidden-count": 0.0})
    assert result.status is Status.REFUSED and result.refused and result.score is None
    assert result.score_text() == "refused" and result.why == "grading kernels would run as root"
    failed = build(LAB, Student("s2"), CELLS, None, {"lab02-visible": 0.0}, failed="reports/x/error-s2.log")
    assert failed.status is Status.FAILED and failed.score is None and failed.score_text() == "failed"
    assert build(LAB, Student("s3"), CELLS).status is Status.NOT_GRADED


def test_build_refuses_what_is_not_a_result():
    with pytest.raises(ValueError, match="a lab and a Student"):
        build(LAB, "s1")
    with pytest.raises(ValueError):  # a kind no enum declares
        build(LAB, Student("s1"), CELLS, _record([{"cell": "c", "kind": "made-up", "graded": False}]))


def test_a_labs_results_are_read_from_records_collection_and_error_logs(tmp_path):
    events = tmp_path / "events" / LAB
    write_record(events / "s1.json", _record([event("notebook", EventKind.ISOLATION, "no uid")]))
    write_record(events / "s2.json", dict(_record(), student="s2"))
    (events / "junk.json").write_text("{not json")
    reports = tmp_path / "reports" / LAB
    reports.mkdir(parents=True)
    (reports / "error-s3.log").write_text("Traceback")
    collected = [
        {
            "student": "s1",
            "name": "张三",
            "file": "a.ipynb",
            "repairs": [],
            "lms": "canvas",
            "lms_id": "7",
            "late": True,
        },
        {"student": "s4", "name": "ｂｏｂ", "file": "b.ipynb", "repairs": [["file-name", "b"]]},
    ]
    (reports / "collected.json").write_text(json.dumps(collected, ensure_ascii=False), encoding="utf-8")
    results = lab_results.read(tmp_path, LAB)
    assert {s: r.status.value for s, r in results.items()} == {
        "s1": "refused",
        "s2": "graded",
        "s3": "failed",
        "s4": "not-graded",
    }
    assert results["s1"].student == Student("s1", "张三", "", "canvas", "7", True)
    row = lab_results.summary_row(results["s1"], seconds=2.0)
    assert (row["status"], row["score"], row["ok"], row["name"], row["late"]) == ("refused", None, False, "张三", "yes")
    assert lab_results.records(tmp_path, LAB)[1] == ["junk.json"]


def test_the_terminal_table_shows_names_late_flags_and_refused_students(tmp_path):
    """make grade's table: each student's name as written (a CJK name takes two columns a character, and the
    columns stay aligned), ``late`` where the download says so, and ``refused`` (never 0.0) with what to do."""
    from autograder.grade import grade

    graded = build(LAB, Student("s1", "张三", late=True), CELLS, _record(), {"lab02-visible": 2.0})
    refused = build(
        LAB, Student("s2", "Bob Lee"), CELLS, _record([event("notebook", EventKind.ISOLATION, "no uid of its own")])
    )
    summary = {
        "lab": LAB,
        "students": [lab_results.summary_row(r) for r in (graded, refused)],
        "seconds": 3.0,
        "workers": 1,
        "cpu_seconds": 1.0,
        "work": str(tmp_path),
    }
    lines = grade.table(summary).splitlines()
    assert lines[1].split() == ["s1", "张三", "late", "2.0", "4.0"] and lines[2].split()[:4] == [
        "s2",
        "Bob",
        "Lee",
        "refused",
    ]
    ends = [
        grade._width(lines[1][: lines[1].index("2.0") + 3]),
        grade._width(lines[2][: lines[2].index("refused") + 7]),
    ]
    assert ends[0] == ends[1], lines  # the score column ends at the same column, whatever script the names are in
    assert "0.0" not in lines[2] and any(line.startswith("REFUSED: 1 of 2 students were not graded") for line in lines)
    assert "no uid of its own" in lines[-1] and "--probe" in lines[-1]
