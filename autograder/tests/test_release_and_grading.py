"""course/ is exactly what nbgrader makes from solutions/, and nbgrader's own commands, typed as docs/instructors.md
says (``nbgrader autograde``, ``generate_feedback``, ``export``), grade it as promised: the solution gets
full marks, the untouched release zero on every test cell, and a realistic bug submitted as a notebook
loses exactly the points of the part it breaks.

The commands are run on labs 00, 02 and 03 (the quick ones): every lab goes through the same grading
(``HardenedExecute``, from the same config) in the class simulation (``class_simulation.py``, graded in two halves), whose
solutions, untouched releases (no error outside the test cells either) and catalogued bugs cover all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.feedback.inert import live_markup
from autograder.course.languages import TRANSLATIONS
from autograder.course.layout import CONFIG_FILE, LABS, RELEASE_DIR, SOURCE_DIR

REPO = Path(__file__).resolve().parents[2]
CONFIG = CONFIG_FILE
CLI_LABS = ["00-start-here", "02-atomic-prefill", "03-decode-growth"]  # graded here by nbgrader's commands
GRADED_LABS = [lab for lab in CLI_LABS if lab != "00-start-here"]

# Buggy students: (lab, text in the solution cell, replacement, grade ids that must lose their points)
BUGS = {
    "refuses_exact_fit": (
        "02-atomic-prefill",
        "if needed > len(self.free_blocks):",
        "if needed >= len(self.free_blocks):",
        {"lab02-visible", "lab02-hidden-count", "lab02-hidden-atomic", "lab02-hidden-random"},
    ),
    "tutorial_formula": (
        "03-decode-growth",
        "if self.blocks_needed(new_seq_len) > len(req.block_table):",
        "if new_seq_len % self.block_size == 1:",
        {"lab03-visible", "lab03-hidden-block-size-one", "lab03-hidden-rollback", "lab03-hidden-random"},
    ),
}


def test_makefile_uses_the_configured_folders():
    makefile = (REPO / "Makefile").read_text()
    assert f"--notebook-dir={RELEASE_DIR.name}" in makefile
    assert f"wildcard {SOURCE_DIR.name}/" in makefile


def nbgrader(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PAGED_KV_COURSE_ROOT=str(root))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN", f"--NbGrader.config_file={CONFIG}"]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and "App | ERROR]" not in result.stderr, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def course_root(tmp_path_factory) -> Path:
    """A scratch course: solutions copied, course regenerated, the CLI labs' students graded."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(SOURCE_DIR, root / SOURCE_DIR.name)
    for lab in LABS:
        nbgrader(root, "generate_assignment", lab, "--force")
    submitted = root / "autograder" / "work" / "submitted"
    for lab in CLI_LABS:
        name = LABS[lab]
        for student, source in (("solution", root / SOURCE_DIR.name), ("untouched", root / RELEASE_DIR.name)):
            (submitted / student / lab).mkdir(parents=True)
            shutil.copy(source / lab / name, submitted / student / lab / name)
    for student, (lab, old, new, _) in BUGS.items():
        nb = nbformat.read(root / SOURCE_DIR.name / lab / LABS[lab], as_version=4)
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution") and old in c.source]
        assert len(cells) == 1, f"bug {student}: the solution text is not in exactly one answer cell"
        cells[0].source = cells[0].source.replace(old, new)
        (submitted / student / lab).mkdir(parents=True)
        nbformat.write(nb, submitted / student / lab / LABS[lab])
    for lab in CLI_LABS:
        nbgrader(root, "autograde", lab, "--create", "--force")
        nbgrader(root, "generate_feedback", lab, "--force")
    nbgrader(root, "export", f"--to={root / 'grades.csv'}")
    return root


def scores(root: Path, lab: str, student: str) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'autograder' / 'work' / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(LABS[lab][: -len(".ipynb")], lab, student)
        return {grade.name: (grade.score, grade.max_score) for grade in notebook.grades}


def test_committed_course_matches_a_fresh_generation(course_root):
    for lab, name in LABS.items():
        fresh = (course_root / RELEASE_DIR.name / lab / name).read_bytes()
        committed = (RELEASE_DIR / lab / name).read_bytes()
        assert fresh == committed, f"course/{lab}/{name} differs from solutions/: run `make release` and commit"
    extra = {p.name for p in RELEASE_DIR.iterdir()} - set(LABS) - set(TRANSLATIONS)
    assert not extra, f"course/ holds folders that no solution generates: {extra}"  # translations: tests/i18n/


@pytest.mark.parametrize("folder", [SOURCE_DIR, RELEASE_DIR], ids=["source", "release"])
def test_notebooks_are_committed_without_outputs(folder):
    for lab, name in LABS.items():
        nb = nbformat.read(folder / lab / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{folder}/{lab}: a cell has outputs"


@pytest.mark.parametrize("lab", GRADED_LABS)
def test_solution_gets_full_marks(course_root, lab):
    got = scores(course_root, lab, "solution")
    assert got and all(score == maximum for score, maximum in got.values()), got
    assert sum(maximum for _, maximum in got.values()) == 10


@pytest.mark.parametrize("lab", GRADED_LABS)
def test_untouched_release_gets_zero_and_no_error_elsewhere(course_root, lab):
    got = scores(course_root, lab, "untouched")
    assert got and all(score == 0 for score, _ in got.values()), got
    autograded = course_root / "autograder" / "work" / "autograded" / "untouched" / lab / LABS[lab]
    nb = nbformat.read(autograded, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"{lab}: a non-test cell fails on the untouched release:\n{cell.source[:300]}"


def test_start_here_runs_clean_as_released(course_root):
    autograded = (
        course_root / "autograder" / "work" / "autograded" / "untouched" / "00-start-here" / LABS["00-start-here"]
    )
    nb = nbformat.read(autograded, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("student", sorted(BUGS))
def test_a_submitted_bug_loses_exactly_the_points_of_its_part(course_root, student):
    lab, _, _, must_fail = BUGS[student]
    got = scores(course_root, lab, student)
    failed = {name for name, (score, maximum) in got.items() if score < maximum}
    assert failed == must_fail, got


def test_feedback_and_grade_export_work_as_the_instructors_guide_says(course_root):
    import csv

    feedback = course_root / "autograder" / "work" / "feedback" / "solution" / "02-atomic-prefill"
    assert (feedback / "atomic_prefill.html").exists(), sorted(p.name for p in feedback.parent.rglob("*"))
    page = (feedback / "atomic_prefill.html").read_text()  # nbgrader's own command writes it inert too
    assert live_markup(page) == [] and 'http-equiv="Content-Security-Policy"' in page and "<h1" in page
    with open(course_root / "grades.csv", newline="") as handle:
        rows = {(r["assignment"], r["student_id"]): float(r["score"]) for r in csv.DictReader(handle)}
    assert rows[("02-atomic-prefill", "solution")] == 10.0
    assert rows[("02-atomic-prefill", "untouched")] == 0.0
    assert 0 < rows[("03-decode-growth", "tutorial_formula")] < 10
