"""The course as a ModelScope (魔搭) notebook runs it, checked without ModelScope (which these machines cannot
reach) and without GitHub (which ModelScope's instances often cannot reach).

- In a fake instance (fake_modelscope.py, from modelscope_image.py: the CPU image's packages, its pip.conf
  pointed at a local stand-in for Aliyun's PyPI mirror, MODELSCOPE_ENVIRONMENT set, every connection out
  refused), every Chinese release notebook (``course/zh_CN/``: ModelScope's readers read Chinese; the English
  ones run under nbval, in the browser and in Colab) with its solution typed in runs top to bottom, which is also
  how make test runs every translated notebook with the solution's answers: its setup cell installs the
  course from the course's ModelScope mirror (a git repository of this checkout stands in for it) and changes
  no package the image had; a lab that uses Triton gets it from the PyPI mirror on the CPU image and keeps the
  GPU image's own.
- A class's handout (``make handout LAB=...``) takes the class's edition there instead: its setup cell installs
  ``colab/paged-kv-class-edition.zip`` uploaded to the instance (lab 05's edition, its TODOs left out), changing no
  image package, and says in the notebook's language what to upload when nothing is there.
- The fake instance really is cut off: its pip knows only the mirrors, and GitHub does not answer there.
- That the image's packages satisfy the course's ranges is checked beside Colab's (test_colab.py); the links
  and install lines themselves, by test_colab_links.py.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.course import languages
from autograder.course.handed_out import EDITION_ZIP, MODELSCOPE_PATH, UPLOAD_MESSAGES
from autograder.course.layout import LABS
from course_notebooks import lab_code_cells, solved_release
from fake_modelscope import fake_modelscope_python, git_mirror, in_instance, pypi_mirror, run_like_modelscope
from fake_runtime import changed_packages, fresh_runtime, freeze
from modelscope_image import MODELSCOPE_GPU, PIP_CONFIG
from tools.sync_colab import COLAB_TEST, load_modelscope_settings, load_settings, needs_triton, read_toml

ROOT = Path(__file__).resolve().parents[2]
VERSION = read_toml(ROOT / "pyproject.toml")["project"]["version"]
MIRROR = load_modelscope_settings()
TRITON_LABS = [lab for lab in LABS if needs_triton(solved_release(lab))]


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    """(python of the fake instance, the git repository that stands in for the course's ModelScope mirror)."""
    return fake_modelscope_python(), git_mirror(tmp_path_factory.mktemp("modelscope-mirror"), MIRROR.branch)


def _from_mirror(source: str, mirror: Path) -> str:
    """The setup cell with its ModelScope install address pointed at the local mirror (same branch). The address
    names a host, ``localhost``, as the instance's pip 23 wants of a URL in a requirement (git reads it as
    the local path)."""
    address = f"git+{MIRROR.git_url}@{MIRROR.branch}"
    assert address in source, f"the setup cell does not install from {address}"
    return source.replace(f"git+{MIRROR.git_url}@", f"git+file://localhost{mirror}@")


@pytest.fixture(scope="module")
def modelscope_session(instance, tmp_path_factory):
    """Every lab of each translated release, solved, run top to bottom in the fake instance from a fresh CPU image
    (in the labs' order, as a student works through them). Returns the report and the packages installed before
    and after."""
    python, mirror = instance
    fresh_runtime(python)
    before = freeze(python)
    notebooks = {
        f"solved {lab} in {language}": lab_code_cells(
            lab, lambda source: _from_mirror(source, mirror), language=language
        )
        for language in languages.TRANSLATIONS
        for lab in LABS
    }
    report = run_like_modelscope(python, notebooks, tmp_path_factory.mktemp("modelscope-run"))
    return report, before, freeze(python)


def test_every_solved_lab_runs_on_a_modelscope_cpu_instance_and_its_setup_cell_changes_no_image_package(
    modelscope_session,
):
    report, before, after = modelscope_session
    failures = {name: [(i, r["error"]) for i, r in enumerate(cells) if not r["ok"]] for name, cells in report.items()}
    for language in languages.TRANSLATIONS:  # each ran in its language: its setup cell sets it
        for lab in LABS:
            setup = next(c.source for c in solved_release(lab, language).cells if languages.is_setup_cell(c))
            assert languages.language_line(language) in setup, f"{lab} in {language}: no language line"
    assert len(failures) == len(LABS) * len(languages.TRANSLATIONS), sorted(failures)
    assert not any(failures.values()), f"cells that fail on ModelScope: {failures}"
    changed = changed_packages(before, after)
    added = {"paged-kv-course", "triton"} if TRITON_LABS else {"paged-kv-course"}
    assert set(changed) == added and all(old is None for old, _ in changed.values()), changed
    assert after["paged-kv-course"] == VERSION


def test_a_lab_that_uses_triton_gets_it_from_the_pypi_mirror_on_the_cpu_image(modelscope_session):
    after = modelscope_session[2]
    if not TRITON_LABS:
        pytest.skip("no lab uses Triton")
    assert f">triton-{after['triton']}-" in (pypi_mirror() / "triton" / "index.html").read_text()


def test_a_lab_that_uses_triton_keeps_the_gpu_images_triton(instance, modelscope_session, tmp_path):
    python, mirror = instance
    assert TRITON_LABS, "lab 06 uses Triton: needs_triton must find it"
    gpu_triton = MODELSCOPE_GPU["triton"]
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"triton=={gpu_triton}"], check=True)
    setup_cells = {
        lab: [next(c for c in lab_code_cells(lab, lambda source: _from_mirror(source, mirror)) if COLAB_TEST in c)]
        for lab in TRITON_LABS
    }
    report = run_like_modelscope(python, setup_cells, tmp_path)
    assert all(r["ok"] for cells in report.values() for r in cells), report
    assert freeze(python)["triton"] == gpu_triton, "the setup cell replaced the GPU image's Triton"


def test_the_fake_instance_installs_only_through_its_mirrors_and_github_does_not_answer(instance, tmp_path):
    python, _ = instance
    config = in_instance(python, "-m", "pip", "config", "list")
    settings = dict(line.split("=", 1) for line in config.stdout.split())
    assert settings["global.index-url"].strip("'") == pypi_mirror().as_uri(), config.stdout
    assert not any(key.endswith(("find-links", "constraint")) for key in settings), config.stdout
    assert settings["install.trusted-host"].strip("'") == PIP_CONFIG["install"]["trusted-host"]
    github = load_settings()
    for args in (
        ["-c", "import urllib.request; urllib.request.urlopen('https://github.com', timeout=10)"],
        ["-m", "pip", "download", "--no-deps", "-d", str(tmp_path), f"paged-kv-course @ git+{github.repository_url}"],
    ):
        result = in_instance(python, *args)
        said = (result.stdout + result.stderr).lower()
        assert result.returncode != 0 and ("refused" in said or "failed to connect" in said), (
            f"{args} was not refused its connection to GitHub in the fake instance:\n{said[-2000:]}"
        )


def test_a_class_handouts_setup_cell_installs_its_labs_edition_uploaded_to_the_instance(instance, tmp_path):
    """``make handout LAB=05-... COURSE_LANG=zh_CN`` on ModelScope: with nothing uploaded, the notebook's setup cell
    stops and says in Chinese what to upload; with the handout's ``colab/paged-kv-class-edition.zip`` uploaded to
    /mnt/workspace (a folder named with a space and Chinese stands in for it) it installs lab 05's edition from
    there, whose TODOs are left out, and changes no package the image had."""
    from autograder.editions.build import LEFT_OUT, edition_sources
    from autograder.handout import handout

    python, _ = instance
    lab = "05-prefix-cache"
    workspace = tmp_path / "mnt workspace 工作区"
    workspace.mkdir()
    with zipfile.ZipFile(handout.build(tmp_path / "handout.zip", lab=lab, language="zh_CN")) as archive:
        notebook = nbformat.reads(archive.read(f"paged-kv-course/course/{lab}/{LABS[lab]}").decode(), as_version=4)
        (workspace / EDITION_ZIP).write_bytes(archive.read(f"paged-kv-course/colab/{EDITION_ZIP}"))
    setup = next(c.source for c in notebook.cells if languages.is_setup_cell(c))
    assert f'"{MODELSCOPE_PATH}"' in setup, "not the class's setup cell"
    uploaded = setup.replace(f'"{MODELSCOPE_PATH}"', json.dumps(str(workspace / EDITION_ZIP), ensure_ascii=False))
    fresh_runtime(python)
    before = freeze(python)
    where = "import paged_kv.cache.prefix_cache as installed\nprint(installed.__file__)"
    beside = (  # the upload beside the notebook (its kernel's working folder), after the one above is uninstalled
        "%pip uninstall --yes --quiet paged-kv-course\nimport shutil\n"
        f"shutil.copy({json.dumps(str(workspace / EDITION_ZIP), ensure_ascii=False)}, {EDITION_ZIP!r})"
    )
    notebooks = {
        "nothing uploaded": [setup],
        "uploaded to /mnt/workspace": [uploaded, where],
        "uploaded beside the notebook": [beside, setup, where],
    }
    report = run_like_modelscope(python, notebooks, tmp_path / "run", timeout_s=600)
    refused = report.pop("nothing uploaded")[0]
    assert not refused["ok"] and UPLOAD_MESSAGES["modelscope"]["zh_CN"] in refused["error"], refused
    for name, cells in report.items():
        assert all(cell["ok"] for cell in cells), (name, cells)
        installed = Path(cells[-1]["shown"].strip().splitlines()[-1]).read_text()
        assert installed == edition_sources(lab)["cache/prefix_cache.py"].decode() and LEFT_OUT in installed, name
    assert changed_packages(before, freeze(python)) == {"paged-kv-course": (None, VERSION)}
