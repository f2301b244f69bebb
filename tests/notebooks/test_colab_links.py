"""The Colab and ModelScope badges and install lines all come from pyproject.toml's Repository and ModelScope
addresses, and stay in sync."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from modelscope_image import ENVIRONMENT
from tools.sync_colab import (
    COLAB_TEST,
    MODELSCOPE_TEST,
    TRITON_EXTRA,
    SyncError,
    load_modelscope_settings,
    load_settings,
    needs_triton,
    read_toml,
    sync,
    with_badge,
    with_colab_block,
    with_modelscope_block,
)

ROOT = Path(__file__).resolve().parents[2]


def scratch_course(tmp_path: Path, repository: str = None, branch: str = None, modelscope: str = None) -> Path:
    """A copy of what the script reads and writes, optionally pointing at another repository (or mirror)."""
    shutil.copytree(SOURCE_DIR, tmp_path / SOURCE_DIR.name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    pyproject = (ROOT / "pyproject.toml").read_text()
    settings = load_settings()
    if repository:
        pyproject = pyproject.replace(f'Repository = "{settings.repository_url}"', f'Repository = "{repository}"')
    if branch:
        pyproject = pyproject.replace(f'branch = "{settings.branch}"', f'branch = "{branch}"')
    if modelscope:
        pyproject = pyproject.replace(
            f'ModelScope = "{load_modelscope_settings().page_url}"', f'ModelScope = "{modelscope}"'
        )
    (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


def test_committed_notebooks_and_readme_are_in_sync_with_pyproject():
    result = subprocess.run(
        [sys.executable, "-m", "tools.sync_colab", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("which", ["github", "modelscope"])
def test_the_address_is_written_by_hand_in_one_place_only(which):
    """Outside pyproject.toml each address appears only in lines the script writes."""
    settings, mirror = load_settings(), load_modelscope_settings()
    address = f"{settings.owner}/{settings.repo}" if which == "github" else f"{mirror.namespace}/{mirror.name}"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    generated = ("[![Open In Colab](", "%pip install --quiet")
    by_hand = []
    for name in files.stdout.split():
        path = ROOT / name
        if path.suffix in (".png", ".whl") or not path.is_file():
            continue
        lines = [line for line in path.read_text(errors="replace").splitlines() if address in line]
        if name == "pyproject.toml":
            lines = [line for line in lines if not line.startswith(("Repository = ", "ModelScope = "))]
        by_hand += [f"{name}: {line.strip()[:120]}" for line in lines if not any(g in line for g in generated)]
    assert not by_hand, f"write the address only in pyproject.toml (or let `make sync-colab` write it): {by_hand}"


def test_every_release_notebook_opens_itself_in_colab_and_modelscope_and_installs_the_course_on_both():
    settings, mirror = load_settings(), load_modelscope_settings()
    for lab, name in LABS.items():
        notebook = nbformat.read(RELEASE_DIR / lab / name, as_version=4)
        title = notebook.cells[0].source
        path = f"{RELEASE_DIR.name}/{lab}/{name}"
        assert settings.badge(path) in title, f"{lab}: no Colab and ModelScope badges under the title"
        assert settings.modelscope_url(path) in settings.badge(path)
        setup = [c.source for c in notebook.cells if c.cell_type == "code" and COLAB_TEST in c.source]
        assert len(setup) == 1 and f"git+{settings.repository_url}@{settings.branch}" in setup[0], lab
        lines = setup[0].split("\n")
        modelscope = lines.index(MODELSCOPE_TEST)
        assert f"git+{mirror.git_url}@{mirror.branch}" in lines[modelscope + 1], f"{lab}: {lines[modelscope + 1]}"
        assert lines[modelscope + 2].startswith(COLAB_TEST), (
            f"{lab}: the ModelScope statement must come right before Colab's"
        )
        assert "import os" in lines[:modelscope], f"{lab}: the setup cell must import os before {MODELSCOPE_TEST!r}"
        assert "github.com" not in lines[modelscope + 1], f"{lab}: ModelScope's install must not reach GitHub"


def test_readmes_table_opens_each_english_lab_in_colab_and_in_modelscope_and_each_chinese_one_in_both():
    settings = load_settings()
    lines = (ROOT / "README.md").read_text().split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("| # | lab |"))
    table = lines[header : next(i for i in range(header, len(lines)) if not lines[i].startswith("|"))]
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table]
    assert cells[0][-3:] == ["Colab", "ModelScope", "中文"], cells[0]
    rows = {row[0]: row for row in cells[2:]}
    for lab, name in LABS.items():
        english, chinese = f"{RELEASE_DIR.name}/{lab}/{name}", f"{RELEASE_DIR.name}/zh_CN/{lab}/{name}"
        expected = [settings.colab_badge(english), settings.modelscope_badge(english), settings.badge(chinese)]
        assert rows[lab[:2]][-3:] == expected, lab
    with pytest.raises(SyncError, match="README column"):
        settings.badges(english, "gitee")


def test_a_new_address_rewrites_every_link_and_nothing_else(tmp_path):
    root = scratch_course(tmp_path, repository="https://github.com/someone/fork-of-course", branch="spring-2027")
    before = {lab: nbformat.read(root / SOURCE_DIR.name / lab / name, as_version=4) for lab, name in LABS.items()}
    changed = sync(root)
    assert len(changed) == len(LABS) + 1
    old_address = f"{load_settings().owner}/{load_settings().repo}"
    readme = (root / "README.md").read_text()
    assert old_address not in readme
    for lab, name in LABS.items():
        after = nbformat.read(root / SOURCE_DIR.name / lab / name, as_version=4)
        url = f"https://colab.research.google.com/github/someone/fork-of-course/blob/spring-2027/course/{lab}/{name}"
        assert url in after.cells[0].source and url in readme
        assert len(after.cells) == len(before[lab].cells)
        for old, new in zip(before[lab].cells, after.cells):
            assert (new.id, new.metadata) == (old.id, old.metadata), f"{lab}: a cell's id or metadata changed"
            if old.source != new.source:
                removed = set(old.source.split("\n")) - set(new.source.split("\n"))
                added = set(new.source.split("\n")) - set(old.source.split("\n"))
                assert all(old_address in line for line in removed), removed
                assert all("someone/fork-of-course" in line for line in added), added
        assert "git+https://github.com/someone/fork-of-course@spring-2027" in "".join(c.source for c in after.cells)
    assert sync(root) == [], "a second run changed files again"


def test_a_rerun_after_a_merge_only_fixes_what_the_merge_left_stale(tmp_path):
    root = scratch_course(tmp_path)
    lab, name = next(iter(LABS.items()))
    path = root / SOURCE_DIR.name / lab / name
    notebook = nbformat.read(path, as_version=4)
    setup = next(c for c in notebook.cells if c.cell_type == "code" and COLAB_TEST in c.source)
    setup.source = setup.source.replace("@main", "")  # an older install line
    notebook.cells[0].source = notebook.cells[0].source.split("\n")[0] + "\n\nNew intro without a badge."
    nbformat.write(notebook, path)
    assert sync(root) == [path]
    fixed = nbformat.read(path, as_version=4)
    assert "[![Open In Colab]" in fixed.cells[0].source and fixed.cells[0].source.endswith("New intro without a badge.")
    assert sync(root) == []


def test_a_lab_that_uses_triton_installs_it_on_colab():
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import triton\nimport triton.language as tl")]
    )
    block = load_settings().install_block(needs_triton(notebook))
    assert needs_triton(notebook) and f'"paged-kv-course[{TRITON_EXTRA}] @ git+' in block
    plain = load_settings().install_block(needs_triton(nbformat.v4.new_notebook()))
    assert f"[{TRITON_EXTRA}]" not in plain
    extras = read_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    assert any(dep.startswith("triton") for dep in extras[TRITON_EXTRA]), f"the {TRITON_EXTRA} extra must hold triton"


def test_a_setup_cell_without_a_colab_statement_is_refused():
    with pytest.raises(SyncError, match="exactly one line"):
        with_colab_block("import sys\nimport torch", "ignored", "lab99")
    with pytest.raises(SyncError, match="import sys"):
        with_colab_block('if "google.colab" in sys.modules:\n    pass', "ignored", "lab99")
    with pytest.raises(SyncError, match="title"):
        with_badge("No title here", "[badge]", "lab99")


def test_an_address_that_is_not_a_github_repository_is_refused(tmp_path):
    root = scratch_course(tmp_path, repository="https://gitlab.com/someone/course")
    with pytest.raises(SyncError, match="Repository"):
        sync(root, check=True)


def test_a_new_modelscope_mirror_rewrites_its_install_lines_and_nothing_else(tmp_path):
    root = scratch_course(tmp_path, modelscope="https://www.modelscope.cn/models/some-school/kv-course")
    before = {lab: nbformat.read(root / SOURCE_DIR.name / lab / name, as_version=4) for lab, name in LABS.items()}
    readme = (root / "README.md").read_text()
    assert len(sync(root)) == len(LABS)
    assert (root / "README.md").read_text() == readme
    for lab, name in LABS.items():
        after = nbformat.read(root / SOURCE_DIR.name / lab / name, as_version=4)
        changed = [(old.source, new.source) for old, new in zip(before[lab].cells, after.cells) if old != new]
        assert len(changed) == 1, f"{lab}: only the setup cell changes"
        removed = set(changed[0][0].split("\n")) - set(changed[0][1].split("\n"))
        added = set(changed[0][1].split("\n")) - set(changed[0][0].split("\n"))
        assert (
            len(removed) == len(added) == 1
            and "git+https://www.modelscope.cn/some-school/kv-course.git@" in added.pop()
        )
    assert sync(root) == []


def test_a_setup_cell_gets_its_modelscope_statement_before_colabs_with_os_imported_and_an_old_one_replaced():
    colab = load_settings().install_block(with_triton=False)
    modelscope = load_modelscope_settings().install_block(with_triton=False)
    bare = f"# setup\nimport sys\n\n{colab}\n\nimport torch"
    written = with_modelscope_block(bare, modelscope, "lab99")
    assert written == f"# setup\nimport os\nimport sys\n\n{modelscope}\n{colab}\n\nimport torch"
    older = written.replace(MODELSCOPE_TEST, 'if "MODELSCOPE_ENVIRONMENT" in os.environ:').replace("@master", "@old")
    assert with_modelscope_block(older, modelscope, "lab99") == written
    assert with_modelscope_block(written, modelscope, "lab99") == written
    with pytest.raises(SyncError, match="ModelScope statements"):
        with_modelscope_block(f"import os\nimport sys\n{modelscope}\n{modelscope}\n{colab}", modelscope, "lab99")
    with pytest.raises(SyncError, match="Colab"):
        with_modelscope_block("import os\nimport sys\n", modelscope, "lab99")


class _Environment:
    """Stands in for ``os`` where the setup cell's ModelScope test reads the environment."""

    def __init__(self, variables):
        self.environ = dict(variables)


@pytest.mark.parametrize(
    "variables, on_modelscope",
    [
        (ENVIRONMENT, True),  # a ModelScope notebook instance (modelscope_image.py)
        ({"MODELSCOPE_ENVIRONMENT": "dsw"}, True),  # the platform's variable alone
        ({"MODELSCOPE_CACHE": ENVIRONMENT["MODELSCOPE_CACHE"]}, True),  # the image's variable alone
        ({}, False),  # a student's own machine, Colab
        ({"MODELSCOPE_CACHE": "/home/student/.cache/modelscope"}, False),  # a ModelScope user's own machine
        ({"MODELSCOPE_ENVIRONMENT": ""}, False),
    ],
)
def test_the_setup_cell_takes_its_modelscope_branch_on_a_modelscope_instance_only(variables, on_modelscope):
    condition = MODELSCOPE_TEST[len("if ") : -len(":")]
    assert bool(eval(condition, {"os": _Environment(variables)})) is on_modelscope


def test_a_modelscope_address_that_is_not_a_modelscope_repository_is_refused(tmp_path):
    root = scratch_course(tmp_path, modelscope="https://github.com/someone/course")
    with pytest.raises(SyncError, match="ModelScope"):
        sync(root, check=True)
