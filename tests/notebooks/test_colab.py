"""The course as Colab runs it, checked without Colab (which these machines cannot reach).

- Colab's published image (colab_image.py) and ModelScope's images (modelscope_image.py: what their build
  scripts install) satisfy every range the package asks for, so installing the course replaces none of their
  packages (torch above all); the package admits Python 3.10-3.13 (ModelScope's 3.12.13 too) and its code
  compiles on each of them that this machine has. The ModelScope route itself: test_modelscope.py.
- In a fake Colab (fake_colab.py: torch present, Colab's ipywidgets 7.7.1 / IPython 7.34 /
  matplotlib / numpy, ``google.colab`` imported, course package absent), every release notebook with
  its solution typed in runs: the setup cell installs the course (from a wheel of this checkout, as
  pip would from GitHub) and changes no package that was there; a lab that uses Triton gets it on a
  CPU runtime and keeps a GPU runtime's own. The widgets' tests pass under ipywidgets 7.7.1.
- A notebook saved by Colab (its metadata rewritten as Colab rewrites it) still gets full marks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from autograder.course.layout import LABS, SOURCE_DIR
from colab_image import COLAB_CPU, COLAB_GPU, COLAB_PYTHON, as_saved_by_colab
from course_notebooks import (
    code_cells,
    is_answer,
    is_test,
    lab_code_cells,
    nbgrader_meta,
    release_path,
    solved_release,
    source_path,
)
from fake_colab import build_course_wheel, fake_colab_python, fresh_runtime, freeze, run_like_colab
from fake_runtime import changed_packages
from modelscope_image import MODELSCOPE_CPU, MODELSCOPE_GPU, MODELSCOPE_PYTHON
from test_release_and_grading import nbgrader
from tools.sync_colab import COLAB_TEST, TRITON_EXTRA, load_settings, needs_triton, read_toml

ROOT = Path(__file__).resolve().parents[2]
PROJECT = read_toml(ROOT / "pyproject.toml")["project"]
GRADED_LABS = [
    lab for lab in LABS if any(nbgrader_meta(c).get("grade") for c in nbformat.read(source_path(lab), 4).cells)
]


def course_requirements(extra: str = "") -> list:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    return reqs + [Requirement(r) for r in PROJECT["optional-dependencies"].get(extra, [])]


IMAGES = {
    "colab-cpu": COLAB_CPU,
    "colab-gpu": COLAB_GPU,
    "modelscope-cpu": MODELSCOPE_CPU,
    "modelscope-gpu": MODELSCOPE_GPU,
}


@pytest.mark.parametrize("image", sorted(IMAGES))
@pytest.mark.parametrize("extra", ["", TRITON_EXTRA], ids=["plain-lab", "triton-lab"])
def test_installing_the_course_keeps_every_package_the_platform_image_has(image, extra):
    runtime = IMAGES[image]
    for req in course_requirements(extra):
        if req.name in runtime:
            assert req.specifier.contains(Version(runtime[req.name]), prereleases=True), (
                f"pip would replace {image}'s {req.name} {runtime[req.name]}: the course asks for {req}"
            )
        else:
            assert req.name == "triton" and "triton" not in runtime, f"{image} lacks {req.name}; add it to its image"


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13", COLAB_PYTHON, MODELSCOPE_PYTHON])
def test_the_package_admits_every_supported_python(python):
    assert SpecifierSet(PROJECT["requires-python"]).contains(python)


def _interpreter(minor: str):
    """A Python ``minor`` (like "3.13") on this machine: pyenv's, else one on PATH (not a pyenv shim)."""
    candidates = sorted(Path.home().glob(f".pyenv/versions/{minor}.*/bin/python{minor}"))
    if candidates:
        return str(candidates[-1])
    found = shutil.which(f"python{minor}")
    return found if found and "/shims/" not in found else None


CHECK_SOURCES = r"""
import ast, importlib, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    compile(path.read_text(), str(path), "exec")
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names:
                importlib.import_module(name)
print("ok", sys.version.split()[0])
"""


@pytest.mark.parametrize("minor", ["3.10", "3.12", "3.13"])
def test_the_package_compiles_and_finds_its_standard_library_on(minor, tmp_path):
    """No torch for these Pythons here (only 3.11's CPU wheel is on disk), so: syntax and stdlib."""
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no Python {minor} on this machine (pyenv install {minor} to run this check)")
    shutil.copytree(ROOT / "paged_kv", tmp_path / "paged_kv", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([python, "-c", CHECK_SOURCES, str(tmp_path / "paged_kv")], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith(f"ok {minor}"), result.stdout + result.stderr


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """(python of the fake Colab, the course wheel that stands in for the GitHub repository)."""
    return fake_colab_python(), build_course_wheel(tmp_path_factory.mktemp("wheel"))


def _from_wheel(source: str, wheel: Path) -> str:
    """The setup cell with its GitHub install address pointed at the local wheel."""
    settings = load_settings()
    address = f"git+{settings.repository_url}@{settings.branch}"
    assert address in source, f"the setup cell does not install from {address}"
    return source.replace(address, wheel.as_uri())


def _lab_cells(lab: str, wheel: Path, solved: bool = True) -> list:
    return lab_code_cells(lab, lambda source: _from_wheel(source, wheel), solved)


@pytest.fixture(scope="module")
def colab_session(colab, tmp_path_factory):
    """Every lab that needs no Triton, run in the fake Colab from a fresh runtime: solved (every
    cell), then untouched (up to its first failing cell, like Run All). Returns the report and
    the packages installed before and after."""
    python, wheel = colab
    fresh_runtime(python)
    labs = [lab for lab in LABS if not needs_triton(solved_release(lab))]
    notebooks = {f"solved {lab}": _lab_cells(lab, wheel) for lab in labs}
    untouched = {
        f"untouched {lab}": _lab_cells(lab, wheel, solved=False)
        for lab in labs
        if any(is_answer(c) for c in nbformat.read(release_path(lab), 4).cells)
    }
    before = freeze(python)
    report = run_like_colab(
        python, {**notebooks, **untouched}, tmp_path_factory.mktemp("colab-run"), stop_on_error=untouched
    )
    return report, before, freeze(python)


def test_every_solved_lab_runs_in_colab_and_its_setup_cell_changes_no_colab_package(colab_session):
    report, before, after = colab_session
    failures = {
        name: [(i, r["error"]) for i, r in enumerate(cells) if not r["ok"]]
        for name, cells in report.items()
        if name.startswith("solved ")
    }
    assert failures and not any(failures.values()), f"cells that fail in the fake Colab: {failures}"
    assert changed_packages(before, after) == {"paged-kv-course": (None, PROJECT["version"])}
    assert after["ipywidgets"] == COLAB_CPU["ipywidgets"] and after["ipython"] == COLAB_CPU["ipython"]


def test_an_untouched_lab_stops_at_its_todo_with_one_short_block_in_colab(colab_session):
    """Colab's IPython (7.34) shows the TODO's NotImplementedError as the course's short block too."""
    report = colab_session[0]
    for name, ran in report.items():
        if not name.startswith("untouched "):
            continue
        cells = code_cells(nbformat.read(release_path(name.split()[1]), 4))
        stop = len(ran) - 1
        assert not ran[stop]["ok"] and all(r["ok"] for r in ran[:stop]), f"{name}: {[r['error'] for r in ran]}"
        assert is_test(cells[stop]) and ran[stop]["error"].startswith("NotImplementedError"), (name, ran[stop])
        shown = [line for line in ran[stop]["shown"].splitlines() if line.strip()]
        assert 0 < len(shown) <= 6 and "Traceback" not in ran[stop]["shown"], f"{name} shows:\n{ran[stop]['shown']}"


def test_a_lab_that_uses_triton_gets_it_on_a_cpu_runtime_and_keeps_a_gpu_runtimes_own(colab, tmp_path):
    python, wheel = colab
    fresh_runtime(python)
    triton_labs = {lab: _lab_cells(lab, wheel) for lab in LABS if needs_triton(solved_release(lab))}
    if not triton_labs:  # no lab uses Triton yet: a setup cell as the script writes it for one
        block = load_settings().install_block(with_triton=True)
        triton_labs = {
            "triton-lab": [_from_wheel(f"import sys\n\n{block}\n\nimport triton\nprint(triton.__version__)", wheel)]
        }
    before = freeze(python)
    assert "triton" not in before
    cpu = run_like_colab(python, triton_labs, tmp_path / "cpu")
    after = freeze(python)
    assert all(r["ok"] for cells in cpu.values() for r in cells), cpu
    assert set(changed_packages(before, after)) == {"paged-kv-course", "triton"} and after["torch"] == before["torch"]

    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"triton=={COLAB_GPU['triton']}"], check=True)
    setup_cells = {name: [next(c for c in cells if COLAB_TEST in c)] for name, cells in triton_labs.items()}
    gpu = run_like_colab(python, setup_cells, tmp_path / "gpu")
    assert all(r["ok"] for cells in gpu.values() for r in cells), gpu
    assert freeze(python)["triton"] == COLAB_GPU["triton"], "the setup cell replaced the GPU runtime's Triton"


def test_the_widgets_work_with_colabs_ipywidgets_7(colab, tmp_path):
    python, _ = colab
    shutil.copy(ROOT / "tests" / "lab" / "test_widgets.py", tmp_path / "test_widgets.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    check = "import ipywidgets, sys; sys.exit(ipywidgets.__version__ != %r)" % COLAB_CPU["ipywidgets"]
    assert subprocess.run([str(python), "-c", check]).returncode == 0
    result = subprocess.run(
        [str(python), "-m", "pytest", "-q", str(tmp_path / "test_widgets.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0 and re.search(r"\d+ passed", result.stdout), (
        result.stdout[-3000:] + result.stderr[-2000:]
    )


def _most_graded_lab() -> str:
    """The graded lab with the most answer and test cells: the most nbgrader metadata to lose."""

    def graded_cells(lab):
        return sum(
            1
            for c in nbformat.read(source_path(lab), 4).cells
            if nbgrader_meta(c).get("grade") or nbgrader_meta(c).get("solution")
        )

    return max(GRADED_LABS, key=graded_cells)


COLAB_STUDENTS = {"colab-nbformat-4-5": 5, "colab-nbformat-4-0": 0}


@pytest.fixture(scope="module")
def graded_colab_students(tmp_path_factory):
    """A scratch course where students saved the solved lab in Colab (both ways Colab saves), autograded.

    One lab only: what Colab rewrites is the same in every lab, and each autograde costs a minute."""
    root, lab = tmp_path_factory.mktemp("colab-course"), _most_graded_lab()
    shutil.copytree(SOURCE_DIR, root / SOURCE_DIR.name)
    nbgrader(root, "generate_assignment", lab, "--force")
    solved = json.loads(nbformat.writes(solved_release(lab)))
    for student, minor in COLAB_STUDENTS.items():
        folder = root / "autograder" / "work" / "submitted" / student / lab
        folder.mkdir(parents=True)
        (folder / LABS[lab]).write_text(json.dumps(as_saved_by_colab(solved, minor), indent=2))
    nbgrader(root, "autograde", lab, "--create", "--force")
    return root, lab


@pytest.mark.parametrize("student", sorted(COLAB_STUDENTS))
def test_a_notebook_saved_by_colab_gets_full_marks(graded_colab_students, student):
    from nbgrader.api import Gradebook

    root, lab = graded_colab_students
    with Gradebook(f"sqlite:///{root / 'autograder' / 'work' / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(LABS[lab][: -len(".ipynb")], lab, student)
        scores = {grade.name: (grade.score, grade.max_score) for grade in notebook.grades}
    assert scores and all(score == maximum for score, maximum in scores.values()), f"{lab}: {scores}"
    assert sum(maximum for _, maximum in scores.values()) == 10
