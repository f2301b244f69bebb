"""Names, LMS ids and late flags travel from an LMS's download through collection into grades.csv, and into
the files Canvas and Moodle import (``autograder.collect.entry_names``, ``collect``, ``lms_gradebook``).

Every download here is synthetic (no network, no real student): zips named as Canvas's "Download
Submissions" and Moodle's "Download all submissions" name their entries, collected with ``collect.collect``;
the gradebook is made with nbgrader's own API and scored by hand, so no notebook is run."""

from __future__ import annotations

import csv
import json
import re
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Dict, Optional

import pytest
from nbgrader.api import Gradebook

from autograder.collect import collect, entry_names

from autograder.grade import grade, lms_gradebook  # grade: alembic on PATH
from autograder.course.layout import RELEASE_DIR

# nbgrader's add_submission warns of its own session use (SAWarning) when a test scores by hand
pytestmark = pytest.mark.filterwarnings("ignore:Object of type:sqlalchemy.exc.SAWarning")

LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
HONEST = (RELEASE_DIR / LAB / NOTEBOOK).read_bytes()
MAX = 10.0
# Canvas's importer reads an assignment column's title and id with this (Assignment.title_and_id)
CANVAS_TITLE_AND_ID = re.compile(r"\A(.*)\s\((\d+)\)\Z")

CANVAS_ENTRIES = {  # lib/content_zipper.rb: [slug of the sortable name, "LATE" when late, user id], attachment id
    "doejane_LATE_12345_987001_atomic_prefill.ipynb": HONEST,
    "smithbob_23456_987002_atomic_prefill.ipynb": HONEST,
    "smithbob_23456_987003_notes.txt": b"my notes",
    "LATE_anon_Ab3De_987004_atomic_prefill.ipynb": HONEST,  # anonymous grading: no name, no user id
}
MOODLE_ENTRIES = {  # mod/assign's download_submissions: a folder per student and plugin
    "Doe, Jane_4242_assignsubmission_file_/atomic_prefill.ipynb": HONEST,
    "Participant_77_assignsubmission_file_/atomic_prefill.ipynb": HONEST,  # blind marking: no name
    "Zoë Ng_5151_assignsubmission_file_/atomic_prefill.ipynb": HONEST,
}


def _zip(path: Path, entries: Dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return path


def _course(root: Path) -> Path:
    """A scratch course that can hold ``collect``'s output: only the release is needed."""
    (root / "course" / LAB).mkdir(parents=True)
    (root / "course" / LAB / NOTEBOOK).write_bytes(HONEST)
    return root


def _collect(tmp_path: Path, entries: Dict[str, bytes], root: Optional[Path] = None) -> Path:
    """Collect a zip of ``entries`` into a scratch course; its work folder."""
    root = root or _course(tmp_path / "course-root")
    archive = _zip(tmp_path / f"download-{len(list(tmp_path.glob('download-*')))}.zip", entries)
    collect.collect(LAB, archive, root, root / "course", NOTEBOOK)
    return root / "autograder" / "work"


def _score(work: Path, scores: Dict[str, Optional[float]], people: Optional[Dict[str, dict]] = None) -> None:
    """Make the lab's gradebook in ``work`` by nbgrader's API: one grade cell out of ``MAX``; each student of
    ``scores`` added (``people``: their gradebook fields), those with a score given a submission scored so."""
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        gb.add_assignment(LAB)
        gb.add_notebook(NOTEBOOK[:-6], LAB)
        gb.add_grade_cell("cell-a", NOTEBOOK[:-6], LAB, max_score=MAX, cell_type="code")
        for sid, score in scores.items():
            gb.update_or_create_student(sid, **(people or {}).get(sid, {}))
            if score is None:
                continue
            gb.add_submission(LAB, sid)
            gb.find_grade("cell-a", NOTEBOOK[:-6], LAB, sid).auto_score = score
            gb.db.commit()


def _rows(path: Path) -> list:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def _roster(work: Path) -> Dict[str, dict]:
    with open(work / "reports" / LAB / "roster.csv", newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def test_canvas_late_submission_keeps_its_late_flag_and_name(tmp_path):
    """Canvas's LATE marker is carried, not dropped: the late student is "yes", the one on time "no", both
    keep Canvas's user id and the slug Canvas wrote; the slug is no full name, so full_name stays empty."""
    work = _collect(tmp_path, CANVAS_ENTRIES)
    roster = _roster(work)
    assert roster["12345"] == {
        "student_id": "12345",
        "name": "doejane",
        "file": NOTEBOOK,
        "lms": "canvas",
        "lms_id": "12345",
        "full_name": "",
        "late": "yes",
    }
    assert (roster["23456"]["late"], roster["23456"]["lms_id"], roster["23456"]["name"]) == ("no", "23456", "smithbob")
    records = {r["student"]: r for r in json.loads((work / "reports" / LAB / "collected.json").read_text())}
    assert records["12345"]["late"] is True and records["23456"]["late"] is False


def test_canvas_anonymous_submission_is_late_but_has_no_user_id(tmp_path):
    """Anonymous grading: Canvas writes LATE first and no name; the student is known by the anonymous id,
    and no user id is made up for it."""
    reading = entry_names.read_entry("LATE_anon_Ab3De_987004_atomic_prefill.ipynb", folder=False)
    assert (reading.student, reading.lms_id, reading.name, reading.late) == ("anon_Ab3De", "", "", True)
    roster = _roster(_collect(tmp_path, CANVAS_ENTRIES))
    assert roster["anon_Ab3De"]["lms"] == "canvas" and roster["anon_Ab3De"]["lms_id"] == ""
    assert roster["anon_Ab3De"]["late"] == "yes"


def test_moodle_folders_carry_the_full_name_and_participant_id_but_no_late_flag(tmp_path):
    """Moodle's folder names hold the full name (kept whole, a comma and all, never split into first and last)
    and the participant id; blind marking's "Participant" is no name; Moodle's download says nothing of
    lateness, so late is empty, not "no"."""
    roster = _roster(_collect(tmp_path, MOODLE_ENTRIES))
    assert roster["4242"] == {
        "student_id": "4242",
        "name": "Doe, Jane",
        "file": NOTEBOOK,
        "lms": "moodle",
        "lms_id": "4242",
        "full_name": "Doe, Jane",
        "late": "",
    }
    assert roster["5151"]["full_name"] == "Zoë Ng"
    assert (roster["77"]["name"], roster["77"]["full_name"]) == ("Participant", "")


def test_a_plain_folder_says_nothing_of_names_ids_or_lateness(tmp_path):
    export = tmp_path / "export"
    for sid in ("alice", "bob"):  # two: a folder of one folder is a class zipped in a folder
        (export / sid).mkdir(parents=True)
        (export / sid / NOTEBOOK).write_bytes(HONEST)
    root = _course(tmp_path / "course-root")
    collect.collect(LAB, export, root, root / "course", NOTEBOOK)
    alice = _roster(root / "autograder" / "work")["alice"]
    assert (alice["lms"], alice["lms_id"], alice["full_name"], alice["late"]) == ("", "", "", "")


def test_grades_csv_carries_real_names_and_late_flags(tmp_path):
    """grades.csv: nbgrader's columns, then status, full_name, download_name, lms, lms_id and late; a full name with
    a comma stays one field; the Canvas slug is never a last name; the gradebook's own names (the
    instructor's) stay in first_name/last_name; a student without a submission scores 0."""
    root = _course(tmp_path / "course-root")
    _collect(tmp_path, CANVAS_ENTRIES, root)
    work = _collect(tmp_path, MOODLE_ENTRIES, root)  # another download of the same lab: both are kept
    _score(
        work,
        {"12345": 7.5, "23456": 10.0, "4242": 4.0, "nobody": None},
        people={"4242": {"first_name": "Jane", "last_name": "Doe", "email": "jd@example.org"}},
    )
    count = lms_gradebook.write_grades_csv(work, work / "reports" / "grades.csv")
    with open(work / "reports" / "grades.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == lms_gradebook.NBGRADER_COLUMNS + [
            "status",
            "full_name",
            "download_name",
            "lms",
            "lms_id",
            "late",
        ]
        rows = {r["student_id"]: r for r in reader}
    assert count == len(rows) == 4
    assert rows["12345"]["late"] == "yes" and rows["23456"]["late"] == "no" and rows["4242"]["late"] == ""
    assert (rows["12345"]["last_name"], rows["12345"]["full_name"], rows["12345"]["download_name"]) == (
        "",
        "",
        "doejane",
    )
    assert (rows["4242"]["full_name"], rows["4242"]["last_name"], rows["4242"]["email"]) == (
        "Doe, Jane",
        "Doe",
        "jd@example.org",
    )
    assert (rows["4242"]["lms"], rows["4242"]["lms_id"]) == ("moodle", "4242")
    assert float(rows["12345"]["score"]) == 7.5 and float(rows["nobody"]["score"]) == 0.0
    assert rows["nobody"]["lms"] == "" and rows["nobody"]["late"] == ""


def test_add_students_keeps_the_instructors_names_and_records_the_canvas_user_id(tmp_path):
    """make grade adds students without writing a slug as a last name: the names the instructor imported stay,
    and a Canvas student's user id becomes nbgrader's lms_user_id (a Moodle participant id, the assignment's,
    does not)."""
    work = _collect(tmp_path, {**CANVAS_ENTRIES, **MOODLE_ENTRIES})
    _score(work, {"12345": None}, people={"12345": {"first_name": "Jane", "last_name": "Doe"}})
    grade.add_students(["12345", "4242"], grade.read_roster(work / "reports" / LAB), work / "gradebook.db")
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        jane, moodle = gb.find_student("12345"), gb.find_student("4242")
        assert (jane.first_name, jane.last_name, jane.lms_user_id) == ("Jane", "Doe", "12345")
        assert (moodle.last_name, moodle.lms_user_id) == (None, None)


def test_canvas_gradebook_round_trips_the_download_ids(tmp_path):
    """The Canvas file's ID is the user id the download's file names gave, its one assignment column reads back
    (as Canvas's importer reads it) as the assignment id given, and every student Canvas cannot be told
    about is left out with its reason: a Moodle student, an anonymous one, one not graded."""
    root = _course(tmp_path / "course-root")
    _collect(tmp_path, {**CANVAS_ENTRIES, "leeann_34567_987005_atomic_prefill.ipynb": HONEST}, root)
    work = _collect(tmp_path, MOODLE_ENTRIES, root)
    _score(work, {"12345": 7.5, "23456": 10.0, "anon_Ab3De": 3.0, "4242": 4.0})
    target, left_out = lms_gradebook.write(work, LAB, "canvas", assignment_id="918273")
    rows = _rows(target)
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and len(rows[0]) == 6
    assert CANVAS_TITLE_AND_ID.match(rows[0][5]).groups() == (LAB, "918273")
    assert rows[1:] == [["doejane", "12345", "", "", "", "7.5"], ["smithbob", "23456", "", "", "", "10"]]
    reasons = dict(left_out)
    assert set(reasons) == {"anon_Ab3De", "34567", "4242", "5151", "77"}
    assert "anonymously graded" in reasons["anon_Ab3De"] and "Moodle's download" in reasons["4242"]
    assert "not graded yet" in reasons["34567"]
    assert _rows(target.with_name("canvas-left-out.csv"))[1:] == [list(pair) for pair in left_out]


def test_moodle_worksheet_keeps_identifier_column(tmp_path):
    """The worksheet's Identifier is "Participant <id>" with the id of the download's folder name (what
    Moodle's upload strips to find the student), its headers are Moodle's own, its grade and maximum the
    scores, Last modified (grade) the time it was written; Canvas students are left out."""
    root = _course(tmp_path / "course-root")
    _collect(tmp_path, CANVAS_ENTRIES, root)
    work = _collect(tmp_path, MOODLE_ENTRIES, root)
    _score(work, {"4242": 4.0, "77": 9.25, "5151": 0.0, "12345": 7.5})
    written = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))
    target, left_out = lms_gradebook.write(work, LAB, "moodle", now=written)
    with open(target, newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == [
            "Identifier",
            "Full name",
            "Email address",
            "Status",
            "Grade",
            "Maximum Grade",
            "Grade can be changed",
            "Last modified (submission)",
            "Last modified (grade)",
        ]
        rows = {r["Identifier"]: r for r in reader}
    assert set(rows) == {"Participant 4242", "Participant 77", "Participant 5151"}
    assert (rows["Participant 4242"]["Full name"], rows["Participant 4242"]["Grade"]) == ("Doe, Jane", "4")
    assert (rows["Participant 77"]["Full name"], rows["Participant 77"]["Grade"]) == ("", "9.25")
    assert {r["Maximum Grade"] for r in rows.values()} == {"10"}
    assert {r["Last modified (grade)"] for r in rows.values()} == {"2025-03-04T03:06:07+00:00"}
    assert {r["Email address"] + r["Status"] for r in rows.values()} == {""}  # the download gives neither
    assert {sid for sid, _ in left_out} >= {"12345", "23456", "anon_Ab3De"}


def test_points_scale_each_score_to_the_lms_maximum(tmp_path):
    work = _collect(tmp_path, MOODLE_ENTRIES)
    _score(work, {"4242": 7.5, "77": 10.0, "5151": 1 / 3})
    rows, _ = lms_gradebook.moodle_worksheet(work, LAB, points=100)
    assert {r[0]: (r[4], r[5]) for r in rows[1:]} == {
        "Participant 4242": ("75", "100"),
        "Participant 77": ("100", "100"),
        "Participant 5151": ("3.33", "100"),
    }


def test_an_id_several_entries_gave_is_left_out_of_the_lms_files(tmp_path):
    """Participant 42 under two names is refused at collection (id-collision); the worksheet never sends the
    0 it was graded to participant 42, whose it is not being known."""
    work = _collect(
        tmp_path,
        {
            "Ann Lee_42_assignsubmission_file_/atomic_prefill.ipynb": HONEST,
            "Bo Chan_42_assignsubmission_file_/atomic_prefill.ipynb": HONEST,
            "Cy Dee_43_assignsubmission_file_/atomic_prefill.ipynb": HONEST,
        },
    )
    assert _roster(work)["42"]["lms_id"] == ""
    _score(work, {"42": 0.0, "43": 5.0})
    rows, left_out = lms_gradebook.moodle_worksheet(work, LAB)
    assert [r[0] for r in rows[1:]] == ["Participant 43"]
    assert "id-collision" in dict(left_out)["42"]


def test_a_failed_grading_is_left_out_until_graded_again(tmp_path):
    work = _collect(tmp_path, MOODLE_ENTRIES)
    _score(work, {"4242": 4.0, "77": 9.0, "5151": 0.0})
    (work / "reports" / LAB / "summary.json").write_text(
        json.dumps({"lab": LAB, "students": [{"student": "5151", "ok": False}, {"student": "4242", "ok": True}]})
    )
    rows, left_out = lms_gradebook.moodle_worksheet(work, LAB)
    assert sorted(r[0] for r in rows[1:]) == ["Participant 4242", "Participant 77"]
    assert "grading failed" in dict(left_out)["5151"]


def test_nothing_for_the_lms_is_an_error_and_writes_no_file(tmp_path):
    work = _collect(tmp_path, MOODLE_ENTRIES)
    _score(work, {"4242": 4.0})
    with pytest.raises(ValueError, match="no student of 02-atomic-prefill can go into Canvas's file"):
        lms_gradebook.write(work, LAB, "canvas", assignment_id="5")
    assert not (work / "reports" / LAB / "canvas-gradebook.csv").exists()


@pytest.mark.parametrize("assignment_id", [None, "", "0", "12a", "007", 12])
def test_canvas_needs_the_assignment_id_the_download_does_not_carry(tmp_path, assignment_id):
    work = _collect(tmp_path, CANVAS_ENTRIES)
    _score(work, {"12345": 7.5})
    with pytest.raises(ValueError, match="/assignments/"):
        lms_gradebook.write(work, LAB, "canvas", assignment_id=assignment_id)


def test_the_lms_files_refuse_bad_arguments(tmp_path):
    work = _collect(tmp_path, MOODLE_ENTRIES)
    _score(work, {"4242": 4.0})
    for points in (0, -1, float("nan"), float("inf"), True, "10"):
        with pytest.raises(ValueError, match="points"):
            lms_gradebook.moodle_worksheet(work, LAB, points=points)
    with pytest.raises(ValueError, match="time zone"):
        lms_gradebook.moodle_worksheet(work, LAB, now=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="lms is one of"):
        lms_gradebook.write(work, LAB, "blackboard")
    with pytest.raises(ValueError, match="no assignment id"):
        lms_gradebook.write(work, LAB, "moodle", assignment_id="5")
    with pytest.raises(ValueError, match="has no 03-decode-growth"):
        lms_gradebook.graded_students(work, "03-decode-growth")
    with pytest.raises(ValueError, match="no gradebook"):
        lms_gradebook.graded_students(tmp_path, LAB)
    with pytest.raises(ValueError, match="late is True, False or None"):
        collect.late_word("yes")
    with pytest.raises(ValueError, match="takes a Reading"):
        collect.submission_for({}, "doejane_12345_1_x.ipynb")
    with pytest.raises(ValueError, match="add_students takes a list of student ids"):
        grade.add_students("4242", {}, work / "gradebook.db")
    (work / "reports" / LAB / "collected.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        lms_gradebook.graded_students(work, LAB)


def test_display_names_in_any_script_reach_both_lms_files_as_written(tmp_path):
    """A Canvas name Canvas kept in its file name (张三) and a Moodle full name (李四, and 'Zoë Ng') are the names
    the LMS files carry, written as UTF-8."""
    entries = {
        f"张三_LATE_12345_987001_{NOTEBOOK}": HONEST,
        f"李四_4242_assignsubmission_file_/{NOTEBOOK}": HONEST,
        **{k: v for k, v in MOODLE_ENTRIES.items() if k.startswith("Zoë")},
    }
    work = _collect(tmp_path, entries)
    _score(work, {"12345": 6.0, "4242": 7.0, "5151": 8.0})
    target, _ = lms_gradebook.write(work, LAB, "canvas", assignment_id="11")
    with open(target, newline="", encoding="utf-8") as handle:
        assert [r[:2] for r in csv.reader(handle)][1:] == [["张三", "12345"]]
    target, _ = lms_gradebook.write(work, LAB, "moodle")
    with open(target, newline="", encoding="utf-8") as handle:
        assert sorted((r[0], r[1]) for r in list(csv.reader(handle))[1:]) == [
            ("Participant 4242", "李四"),
            ("Participant 5151", "Zoë Ng"),
        ]


def test_a_refused_student_is_left_out_of_the_lms_file_and_make_gradebook_exits_non_zero(tmp_path, monkeypatch, capsys):
    """Grading refused for one student (the record's isolation event; the gradebook holds the 0 refuse() wrote):
    grades.csv says refused with no score, the LMS file leaves them out and names why, and make gradebook writes
    the others but exits 1 saying who is missing."""
    from autograder.course import layout
    from autograder.verdict.events import EventKind, event, write_record

    work = _collect(tmp_path, MOODLE_ENTRIES)
    _score(work, {"4242": 0.0, "77": 9.0, "5151": 4.0})
    write_record(
        work / "events" / LAB / "4242.json",
        {
            "student": "4242",
            "assignment": LAB,
            "isolation": "rlimits",
            "seconds": 0.3,
            "events": [event("notebook", EventKind.ISOLATION, "no uid of its own")],
            "verdicts": {},
        },
    )
    lms_gradebook.write_grades_csv(work, work / "reports" / "grades.csv")
    with open(work / "reports" / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert (rows["4242"]["status"], rows["4242"]["score"], rows["4242"]["raw_score"]) == ("refused", "", "")
    assert (rows["77"]["status"], float(rows["77"]["score"])) == ("graded", 9.0)
    monkeypatch.setattr(layout, "ROOT", work.parents[1])
    assert lms_gradebook.main([LAB, "--lms", "moodle"]) == 1
    err = capsys.readouterr().err
    assert "4242: its grading was refused" in err and "no uid of its own" in err
    assert "have no grade yet (their grading was refused: 4242)" in err
    with open(work / "reports" / LAB / "moodle-grading-worksheet.csv", newline="", encoding="utf-8") as handle:
        assert sorted(r[0] for r in list(csv.reader(handle))[1:]) == ["Participant 5151", "Participant 77"]
