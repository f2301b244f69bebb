"""Gradescope and PrairieLearn graders (``autograder/platforms``): their formats against schemas written from the
platforms' specifications, their layouts, and (root only) the real scripts run in the platforms' own paths.

The harness plays the platform: the Gradescope zip is unpacked into ``<root>/source`` and ``<root>`` is
bind-mounted at ``/autograder`` in a private mount namespace (``unshare -m``), so ``setup.sh`` and
``run_autograder`` run with their real paths; ``setup.sh`` reuses this checkout's environment
(``PAGED_KV_REUSE_PYTHON``) instead of installing. The same for PrairieLearn's question at ``/grade``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from autograder.pipeline import classroom
from autograder.platforms import gradescope, prairielearn
from autograder.platforms.one_upload import Outcome, CellResult

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAB = "02-atomic-prefill"
SCHEMAS = {name: json.loads((HERE / "schemas" / f"{name}_results.schema.json").read_text())
           for name in ("gradescope", "prairielearn")}


def _outcome(problem: str = "") -> Outcome:
    tests = [CellResult("lab02-visible", "3. Your task: visible tests (lab02-visible)", 2.0, 2.0, "passed", False),
             CellResult("lab02-hidden-count", "3. Your task: hidden tests (lab02-hidden-count)", 0.0, 3.0,
                        "[prompt of 9 tokens] took 3 blocks\n  hint:     ceil(N / N)", True)]
    return Outcome(LAB, tests, ["file-name: Copy of atomic_prefill.ipynb graded as atomic_prefill.ipynb"], problem,
                   12.3, "bwrap", "Copy of atomic_prefill.ipynb")


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
    with pytest.raises(ValueError, match="visibility"):
        gradescope.results(_outcome(), "after_lunch")
    with pytest.raises(jsonschema.ValidationError):  # the schema has teeth: a test without max_score
        jsonschema.validate({"tests": [{"name": "x", "score": 1}]}, SCHEMAS["gradescope"])


def test_the_gradescope_zip_is_laid_out_as_the_spec_asks(tmp_path):
    """setup.sh and run_autograder at the root, executable; the course under course/ with the lab's source and
    release notebooks, the package and the grading machinery; no tests, no work folder, no caches."""
    target = gradescope.build_zip(LAB, tmp_path)
    with zipfile.ZipFile(target) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    for script in ("setup.sh", "run_autograder"):
        assert (infos[script].external_attr >> 16) & 0o111, f"{script} is not executable"
    names = set(infos)
    for must in ("course/autograder/nbgrader_config.py", "course/autograder/graders/lab02_prefill.py",
                 "course/paged_kv/__init__.py", "course/requirements-lock.txt", "course/pyproject.toml",
                 f"course/solutions/{LAB}/atomic_prefill.ipynb", f"course/course/{LAB}/atomic_prefill.ipynb"):
        assert must in names, must
    assert not any("/autograder/tests/" in n or "/autograder/work/" in n or "__pycache__" in n for n in names)
    assert not any(n.startswith("course/solutions/") and LAB not in n for n in names)


def test_the_prairielearn_question_names_its_image_and_entrypoint(tmp_path):
    folder = prairielearn.build_question(LAB, tmp_path)
    info = json.loads((folder / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["externalGradingOptions"]["enabled"] is True
    entry = info["externalGradingOptions"]["entrypoint"]
    assert entry == "/grade/tests/run_grader" and os.access(folder / "tests" / "run_grader", os.X_OK)
    assert 'file-names="atomic_prefill.ipynb"' in (folder / "question.html").read_text()
    assert (folder / "tests" / "course" / "autograder" / "nbgrader_config.py").exists()
    assert info["uuid"] == json.loads((prairielearn.build_question(LAB, tmp_path) / "info.json").read_text())["uuid"]


# ----------------------------------------------------------------------------- the harness (root only)

def _can_mount() -> str:
    if os.geteuid() != 0:
        return "needs root (a private mount namespace and bind mounts)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return "" if probe.returncode == 0 else "unshare -m is not allowed here"


def _in_platform(root: Path, mount_at: str, script: str, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    """``script`` (bash) with ``root`` bind-mounted at ``mount_at`` in a private mount namespace."""
    Path(mount_at).mkdir(exist_ok=True)
    wrapped = (f"mount --make-rprivate / && mount --bind {root} {mount_at} && {script}")
    return subprocess.run(["unshare", "-m", "bash", "-c", wrapped], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _uploads(tmp_path: Path) -> dict:
    """``{label: (folder, expected)}`` of the uploads the harness grades: the total, the hidden cells a catalogued
    bug loses (a set), or None for 'not graded'."""
    solution = nbformat.read(REPO / "solutions" / LAB / "atomic_prefill.ipynb", as_version=4)
    release = nbformat.read(REPO / "course" / LAB / "atomic_prefill.ipynb", as_version=4)
    out = {}

    def folder(label: str, files: dict) -> Path:
        path = tmp_path / "uploads" / label
        path.mkdir(parents=True)
        for name, data in files.items():
            (path / name).write_bytes(data)
        return path

    out["the solution, renamed 'Copy of'"] = (folder("copy", {"Copy of atomic_prefill.ipynb":
                                                            nbformat.writes(solution).encode()}), 10.0)
    out["the untouched release"] = (folder("release", {"atomic_prefill.ipynb": nbformat.writes(release).encode()}), 0.0)
    lab = classroom.load_lab(LAB, REPO / "solutions", REPO / "course")
    label, bug, failing = next(entry for entry in classroom.catalogue_students(lab) if entry[2])
    out[f"a catalogued bug ({label})"] = (folder("bug", {"atomic_prefill.ipynb": nbformat.writes(
        nbformat.from_dict(bug)).encode()}), set(failing))
    out["a broken JSON file"] = (folder("broken", {"atomic_prefill.ipynb": b'{"cells": [ oops'}), None)
    out["two unrelated notebooks"] = (folder("two", {"notes.ipynb": nbformat.writes(release).encode(),
                                                     "scratch.ipynb": nbformat.writes(release).encode()}), None)
    return out


def _hidden_text() -> list:
    """Lines of the lab's hidden tests that must never reach a student (longer than trivial)."""
    source = json.loads((REPO / "solutions" / LAB / "atomic_prefill.ipynb").read_text())
    lines = []
    for cell in source["cells"]:
        text = "".join(cell.get("source", ""))
        if "### BEGIN HIDDEN TESTS" in text:
            inner = text.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            lines += [line.strip() for line in inner.splitlines() if len(line.strip()) > 12]
    return lines + ["BEGIN HIDDEN TESTS"]


@pytest.mark.skipif(bool(_can_mount()), reason=_can_mount() or "ok")
def test_gradescope_runs_its_zip_at_autograder_and_grades_as_make_grade(tmp_path):
    """setup.sh then run_autograder, at /autograder, for each upload: the solution full marks in every test, the
    untouched release 0 in every test (as make grade gives them: the class simulation), a catalogued bug exactly
    the hidden checks it breaks (as the graders' own tests say), a broken file and two unrelated notebooks 0
    with what to upload; every results.json valid, none with hidden-test text."""
    zip_path = gradescope.build_zip(LAB, tmp_path / "dist")
    hidden = _hidden_text()
    env = dict(os.environ, PAGED_KV_REUSE_PYTHON=sys.executable)
    env.pop("PAGED_KV_COURSE_ROOT", None)
    image = tmp_path / "image"  # what Gradescope builds once: the zip unpacked, setup.sh run
    (image / "source").mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(image / "source")
    done = _in_platform(image, "/autograder", "bash /autograder/source/setup.sh && "
                                              "cp /autograder/source/run_autograder /autograder/run_autograder && "
                                              "chmod +x /autograder/run_autograder", env)
    assert done.returncode == 0, f"setup.sh:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (image / "source" / "course" / "autograder" / "work" / "gradebook.db").exists(), "setup.sh made no gradebook"
    for label, (upload, expected) in _uploads(tmp_path).items():
        root = tmp_path / "autograder" / upload.name  # a fresh container from that image per upload
        shutil.copytree(image, root, symlinks=True)
        shutil.copytree(upload, root / "submission")
        (root / "results").mkdir()
        done = _in_platform(root, "/autograder", "cd /autograder && /autograder/run_autograder", env)
        assert done.returncode == 0, f"{label}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        data = json.loads((root / "results" / "results.json").read_text())
        jsonschema.validate(data, SCHEMAS["gradescope"])
        scores = [t["score"] for t in data["tests"]]
        if expected is None:
            assert data["score"] == 0 and set(scores) == {0.0} and "upload" in data["output"].lower(), (label, data)
        elif isinstance(expected, set):  # a catalogued bug: exactly the hidden checks it breaks are lost
            hidden_tests = {t["tags"][0]: t for t in data["tests"] if "hidden" in t["tags"][0]}
            assert {g for g, t in hidden_tests.items() if t["score"] == 0} == expected, (label, data)
            assert all(t["score"] == t["max_score"] for g, t in hidden_tests.items() if g not in expected), label
        elif expected:
            assert scores == [t["max_score"] for t in data["tests"]] and data["score"] == expected, (label, data)
        else:
            assert data["score"] == 0 and set(scores) == {0.0}, (label, data)
        text = json.dumps(data) + done.stdout
        assert not [line for line in hidden if line in text], label


@pytest.mark.skipif(bool(_can_mount()), reason=_can_mount() or "ok")
def test_prairielearn_runs_its_entrypoint_at_grade(tmp_path):
    """The question's run_grader at /grade grades the solution (score 1.0) and a broken file (0, gradable, what
    to upload); both results valid; no hidden-test text."""
    question = prairielearn.build_question(LAB, tmp_path / "dist")
    hidden = _hidden_text()
    env = dict(os.environ, PAGED_KV_PYTHON=sys.executable)
    env.pop("PAGED_KV_COURSE_ROOT", None)
    uploads = _uploads(tmp_path)
    for label in ("the solution, renamed 'Copy of'", "a broken JSON file"):
        upload, expected = uploads[label]
        root = tmp_path / "grade" / upload.name
        shutil.copytree(question / "tests", root / "tests", symlinks=True)
        shutil.copytree(upload, root / "student")
        done = _in_platform(root, "/grade", "/grade/tests/run_grader", env)
        assert done.returncode == 0, f"{label}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        data = json.loads((root / "results" / "results.json").read_text())
        jsonschema.validate(data, SCHEMAS["prairielearn"])
        assert data["gradable"] is True and data["score"] == (1.0 if expected else 0.0), (label, data)
        assert not [line for line in hidden if line in json.dumps(data) + done.stdout], label
