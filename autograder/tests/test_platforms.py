"""Gradescope and PrairieLearn graders (``autograder/platforms``): their formats against schemas written from the
platforms' specifications, their layouts, and (root only) the real scripts run in the platforms' own paths
(``platform_harness``) on the uploads a class does not have: the solution under another name, the untouched
release (where bubblewrap cannot run), a broken file and two unrelated notebooks. The class simulation
(``class_simulation.py``) puts a catalogued bug and one attack per lab through them, beside make grade.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

import platform_harness
from course_notebooks import answers
from autograder.course.notebook import BEGIN
from autograder.box import sandbox
from autograder.proof import classroom, report
from autograder.platforms import gradescope, prairielearn
from autograder.platforms.one_upload import Outcome, CellResult

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAB = "02-atomic-prefill"
SCHEMAS = platform_harness.SCHEMAS


INSTRUCTOR_LOG = [
    "file-name: Copy of atomic_prefill.ipynb graded as atomic_prefill.ipynb",
    "lab02-prefill: similar-to-reference: 94% like the reference's syntax tree: review it",
]
STUDENT_NOTE = "Your notebook was uploaded as 'Copy of atomic_prefill.ipynb'; it was graded as atomic_prefill.ipynb."


def _outcome(problem: str = "") -> Outcome:
    tests = [
        CellResult("lab02-visible", "3. Your task: visible tests (lab02-visible)", 2.0, 2.0, "passed", False),
        CellResult(
            "lab02-hidden-count",
            "3. Your task: hidden tests (lab02-hidden-count)",
            0.0,
            3.0,
            "[prompt of 9 tokens] took 3 blocks\n  hint:     ceil(N / N)",
            True,
        ),
    ]
    return Outcome(
        LAB,
        tests,
        [STUDENT_NOTE],
        problem,
        12.3,
        "bwrap",
        "Copy of atomic_prefill.ipynb",
        log=list(INSTRUCTOR_LOG),
        gradable=not problem,
    )


def test_results_follow_each_platforms_schema():
    """A graded upload and one with nothing to grade both give valid results; hidden tests follow the chosen
    visibility, visible ones are always visible; PrairieLearn's score is the fraction of the points."""
    for problem in ("", "No notebook to grade was found in your upload"):
        data = gradescope.results(_outcome(problem), "after_due_date")
        jsonschema.validate(data, SCHEMAS["gradescope"])
        assert [t["visibility"] for t in data["tests"]] == ["visible", "after_due_date"]
        assert data["score"] == 2.0 and [t["status"] for t in data["tests"]] == ["passed", "failed"]
        assert (problem in data["output"]) and "Grading notes:" in data["output"]
        pl = prairielearn.results(_outcome(problem))
        jsonschema.validate(pl, SCHEMAS["prairielearn"])
        assert pl["score"] == pytest.approx(2.0 / 5.0) and pl["tests"][1]["max_points"] == 3.0
        assert pl["gradable"] is (not problem), "an upload with nothing to grade costs no attempt"
        # hidden tests as Gradescope shows them: with any visibility but "visible", no test's detail
        assert pl["tests"][1]["name"] == "hidden tests (1)" and "ceil" not in json.dumps(pl)
        shown = prairielearn.results(_outcome(problem), "visible")
        assert shown["tests"][1]["name"].endswith("(lab02-hidden-count)") and "ceil" in shown["tests"][1]["output"]
    with pytest.raises(ValueError, match="visibility"):
        gradescope.results(_outcome(), "after_lunch")
    with pytest.raises(jsonschema.ValidationError):  # the schema has teeth: a test without max_score
        jsonschema.validate({"tests": [{"name": "x", "score": 1}]}, SCHEMAS["gradescope"])


def test_the_box_level_reaches_the_instructors_stdout_and_nothing_a_student_sees(tmp_path, monkeypatch, capsys):
    """PrairieLearn shows the student all of results.json; Gradescope all of it but ``extra_data`` (stdout is
    hidden): the level of the box the notebook ran in is named only where the instructor reads."""
    outcome = _outcome()
    outcome.isolation = "level-only-the-instructor-sees"
    for platform in (prairielearn, gradescope):
        monkeypatch.setattr(platform, "grade_or_failure", lambda lab, folder: outcome)
        data = platform.run(LAB, tmp_path, tmp_path / platform.__name__ / "results.json")
        shown = {
            k: v
            for k, v in json.loads((tmp_path / platform.__name__ / "results.json").read_text()).items()
            if k != "extra_data"
        }
        assert shown and "level-only" not in json.dumps(shown) and "box level" not in json.dumps(shown), platform
        assert "box level 'level-only-the-instructor-sees'" in capsys.readouterr().out, platform
        assert data.get("extra_data", {}).get("box_level") in (None, outcome.isolation)
    with pytest.raises(ValueError, match="Outcome"):
        prairielearn.results({"score": 1})


def test_students_read_sentences_and_the_instructor_reads_the_codes_and_flags(tmp_path, monkeypatch, capsys):
    """On both platforms, what the student sees holds the Grading notes as their feedback words them, and no
    internal code (``file-name``) or instructor's flag (``similar-to-reference``); the job's stdout, which only
    the course's staff read, holds every one of the instructor's lines."""
    for platform in (prairielearn, gradescope):
        monkeypatch.setattr(platform, "grade_or_failure", lambda lab, folder: _outcome())
        platform.run(LAB, tmp_path, tmp_path / platform.__name__ / "results.json")
        shown = {
            k: v
            for k, v in json.loads((tmp_path / platform.__name__ / "results.json").read_text()).items()
            if k != "extra_data"
        }
        text = json.dumps(shown)
        assert STUDENT_NOTE in " ".join(str(v) for v in shown.values()), platform
        assert "similar-to-reference" not in text and "file-name" not in text, (platform, text)
        out = capsys.readouterr().out
        assert all(line in out for line in INSTRUCTOR_LOG), (platform, out)


def test_a_refused_grading_is_an_autograder_failure_never_a_zero(tmp_path, monkeypatch, capsys):
    """Where the isolation check refuses to grade (nothing ran), neither platform records a score: Gradescope gets
    no results.json and a non-zero exit (its "The autograder failed to execute correctly", which the instructor
    reruns), PrairieLearn a submission that is not gradable (no score, no attempt used) telling the student so;
    the job's stdout, the instructor's, says REFUSED and why."""
    outcome = _outcome()
    outcome.refused = "grading kernels would run as root; a student's code never runs as root"
    for platform in (prairielearn, gradescope):
        monkeypatch.setattr(platform, "grade_or_failure", lambda lab, folder: outcome)
        target = tmp_path / platform.__name__ / "results.json"
        target.parent.mkdir()
        target.write_text('{"score": 0.0}')  # an earlier run's results never stand for this one
        code = platform.main(
            [
                "run",
                LAB,
                "--" + ("student" if platform is prairielearn else "submission"),
                str(tmp_path),
                "--results",
                str(target),
            ]
        )
        out = capsys.readouterr().out
        assert out.startswith(f"REFUSED: {LAB}: nothing was graded") and "never runs as root" in out, out
        if platform is gradescope:
            assert code == gradescope.REFUSED_EXIT and not target.exists()
        else:
            data = json.loads(target.read_text())
            jsonschema.validate(data, SCHEMAS["prairielearn"])
            assert code == 0 and data["gradable"] is False and "score" not in data, data
            assert "nothing was graded" in data["format_errors"][0] and "never runs as root" not in json.dumps(data)


def test_the_student_notes_are_read_from_the_feedbacks_grading_notes(tmp_path):
    """``student_notes`` gives the Grading notes cell's lines as the feedback renders them (markup undone)."""
    from autograder.verdict import plain_text
    from autograder.platforms.one_upload import student_notes

    quoted = "Your cell `x < 1` ran for 30 s: it was stopped."
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(
                "## Grading notes\n\nThe autograder changed or noticed the following. Points were given for what ran.\n\n"
                + plain_text.note_lines(["- " + quoted, "- " + STUDENT_NOTE]),
                id="grading-notes",
            )
        ]
    )
    nbformat.write(nb, tmp_path / "graded.ipynb")
    assert student_notes(tmp_path / "graded.ipynb") == [quoted, STUDENT_NOTE]
    assert student_notes(tmp_path / "missing.ipynb") == []


def test_the_gradescope_zip_is_laid_out_as_the_spec_asks(tmp_path):
    """setup.sh and run_autograder at the root, executable; the course under course/ with the lab's source and
    release notebooks, the package and the grading machinery, root's only (a kernel imports a copy of its
    edition); the source notebook without a line of its solutions; no tests, no work folder, no caches."""
    target = gradescope.build_zip(LAB, tmp_path / "dist" / "gradescope")
    _only_its_owner_reads(tmp_path / "dist")
    with zipfile.ZipFile(target) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    for script in ("setup.sh", "run_autograder"):
        assert (infos[script].external_attr >> 16) & 0o111, f"{script} is not executable"
    shared = [n for n, i in infos.items() if n.startswith("course/") and (i.external_attr >> 16) & 0o077]
    assert shared == [], f"open to other accounts (a grading kernel's uid) once unzipped: {shared[:3]}"
    setup = zipfile.ZipFile(target).read("setup.sh").decode()
    assert 'chmod 700 "$COURSE"' in setup, "setup.sh closes the course folder"
    names = set(infos)
    for must in (
        "course/autograder/nbgrader_config.py",
        "course/autograder/labs/lab02_atomic_prefill/checks.py",
        "course/paged_kv/__init__.py",
        "course/requirements-lock.txt",
        "course/pyproject.toml",
        f"course/solutions/{LAB}/atomic_prefill.ipynb",
        f"course/course/{LAB}/atomic_prefill.ipynb",
        f"course/course/zh_CN/{LAB}/atomic_prefill.ipynb",  # a Chinese upload is graded in Chinese
    ):
        assert must in names, must
    assert not any("/autograder/tests/" in n or "/autograder/work/" in n or "__pycache__" in n for n in names)
    assert not any(n.startswith("course/solutions/") and LAB not in n for n in names)
    with zipfile.ZipFile(target) as archive:
        shipped = archive.read(f"course/solutions/{LAB}/atomic_prefill.ipynb").decode()
    solution = nbformat.read(REPO / "solutions" / LAB / "atomic_prefill.ipynb", as_version=4)
    release = (REPO / "course" / LAB / "atomic_prefill.ipynb").read_text()
    answers = [
        line.strip()
        for c in solution.cells
        if "### BEGIN SOLUTION" in c.source
        for line in c.source.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0].splitlines()
        if len(line.strip()) > 12 and json.dumps(line.strip())[1:-1] not in release
    ]
    assert answers and not [line for line in answers if json.dumps(line)[1:-1] in shipped], "a solution line shipped"
    assert BEGIN in shipped, "the hidden tests' text is what the grader needs"


def _only_its_owner_reads(top: Path) -> None:
    """Issue 47: what a builder writes holds the hidden tests: every folder 0700, every file 0600 (0700 to run),
    and another account of the machine (``nobody``, where this runs as root) reads none of it."""
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [top, *top.rglob("*")]}
    assert [p for p, m in modes.items() if p.is_dir() and m != 0o700] == []
    assert [p for p, m in modes.items() if p.is_file() and m not in (0o600, 0o700)] == []
    if os.geteuid() == 0:
        files = [str(p) for p in modes if p.is_file()]
        read = subprocess.run(["runuser", "-u", "nobody", "--", "cat", files[0]], capture_output=True, text=True)
        assert read.returncode != 0 and "ermission denied" in read.stderr, read


def test_the_prairielearn_question_names_its_image_and_entrypoint(tmp_path):
    folder = prairielearn.build_question(LAB, tmp_path / "dist" / "prairielearn")
    _only_its_owner_reads(tmp_path / "dist")
    solutions = folder / "tests" / "course" / "solutions" / LAB / "atomic_prefill.ipynb"
    assert BEGIN in solutions.read_text() and stat.S_IMODE(solutions.stat().st_mode) == 0o600
    info = json.loads((folder / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["externalGradingOptions"]["enabled"] is True
    entry = info["externalGradingOptions"]["entrypoint"]
    assert entry == "/grade/tests/run_grader" and os.access(folder / "tests" / "run_grader", os.X_OK)
    assert 'file-names="atomic_prefill.ipynb"' in (folder / "question.html").read_text()
    assert (folder / "tests" / "course" / "autograder" / "nbgrader_config.py").exists()
    assert info["uuid"] == prairielearn.question_uuid(LAB) != prairielearn.question_uuid("03-decode-growth")
    assert (folder / "tests" / "course" / "autograder" / "work" / "gradebook.db").exists(), "the lab's gradebook"
    # the job's timeout fits the lab (its notebook budget and the job's start), not PrairieLearn's 600 s maximum
    assert info["externalGradingOptions"]["timeout"] == 120 + prairielearn.JOB_OVERHEAD_S
    assert prairielearn.job_timeout_s("06-triton-paged-attention") == 240 + prairielearn.JOB_OVERHEAD_S


# ----------------------------------------------------------------------------- the harness (root only)


def _uploads(tmp_path: Path) -> dict:
    """``{label: (folder, expected total or None for 'not graded')}``: the uploads no class simulation has (the
    container tests use them too)."""
    solution = nbformat.writes(nbformat.read(REPO / "solutions" / LAB / "atomic_prefill.ipynb", as_version=4))
    release = nbformat.writes(nbformat.read(REPO / "course" / LAB / "atomic_prefill.ipynb", as_version=4))
    chinese = nbformat.read(REPO / "course" / "zh_CN" / LAB / "atomic_prefill.ipynb", as_version=4)
    for cell in chinese.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers(LAB)[cell.metadata["nbgrader"]["grade_id"]]
    folder = lambda label, files: platform_harness.write_upload(tmp_path / "uploads" / label, files)  # noqa: E731
    return {
        "the solution, renamed 'Copy of'": (folder("copy", {"Copy of atomic_prefill.ipynb": solution.encode()}), 10.0),
        "the solution in Chinese (course/zh_CN/)": (
            folder("chinese", {"atomic_prefill.ipynb": nbformat.writes(chinese).encode()}),
            10.0,
        ),
        "a broken JSON file": (folder("broken", {"atomic_prefill.ipynb": b'{"cells": [ oops'}), None),
        "two unrelated notebooks": (
            folder("two", {"notes.ipynb": release.encode(), "scratch.ipynb": release.encode()}),
            None,
        ),
    }


def _secret_lines() -> list:
    info = classroom.load_lab(LAB, REPO / "solutions", REPO / "course")
    return report.secret_lines(info) + [BEGIN.removeprefix("### ")]


@pytest.mark.skipif(bool(platform_harness.mount_problem()), reason=platform_harness.mount_problem() or "ok")
def test_gradescope_runs_its_zip_at_autograder_on_what_a_class_does_not_upload(tmp_path):
    """setup.sh then run_autograder, at /autograder, for each upload: the solution under another name full marks
    in every test, at this machine's box level; a broken file and two unrelated notebooks 0 with what to upload;
    every results.json valid, none with hidden-test text. (Where bubblewrap cannot run, as in Gradescope's own
    containers: ``test_platform_containers.py``.)"""
    image = platform_harness.gradescope_image(LAB, tmp_path / "gradescope")
    secret = _secret_lines()
    here = sandbox.probe()[0]
    for label, (upload, expected) in _uploads(tmp_path).items():
        run = platform_harness.run_gradescope(image, upload, tmp_path / "autograder")
        data = run.results
        if expected is not None:
            assert data["extra_data"]["box_level"] == here, (label, data["extra_data"])
        jsonschema.validate(data, SCHEMAS["gradescope"])
        scores = [t["score"] for t in data["tests"]]
        if expected is None:
            assert data["score"] == 0 and set(scores) == {0.0} and "upload" in data["output"].lower(), (label, data)
        else:
            assert scores == [t["max_score"] for t in data["tests"]] and data["score"] == expected, (label, data)
        assert platform_harness.leaked(run, secret) == [], label


def test_a_grader_that_stops_for_the_instructor_still_gives_the_student_a_result(monkeypatch, capsys):
    """grade() stops with SystemExit for what only the instructor can fix (a damaged gradebook): the platform
    still writes a 0 that says to tell the instructor, without the instructor's detail (that is on stdout)."""
    from autograder.platforms import one_upload

    def stops(lab, folder):
        raise SystemExit("error: the gradebook /autograder/source/course/autograder/work/gradebook.db is damaged")

    monkeypatch.setattr(one_upload, "grade_upload", stops)
    outcome = one_upload.grade_or_failure(LAB, Path("/nowhere"))
    assert outcome.score == 0 and outcome.tests and "instructor" in outcome.problem
    assert "gradebook.db" not in outcome.problem and "gradebook.db" in capsys.readouterr().out
