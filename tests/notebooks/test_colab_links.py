"""The Colab badges and install lines all come from pyproject.toml's Repository, and stay in sync."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from tools.sync_colab import (
    COLAB_TEST,
    TRITON_EXTRA,
    SyncError,
    load_settings,
    needs_triton,
    read_toml,
    sync,
    with_badge,
    with_colab_block,
)

ROOT = Path(__file__).resolve().parents[2]


def scratch_course(tmp_path: Path, repository: str = None, branch: str = None) -> Path:
    """A copy of what the script reads and writes, optionally pointing at another repository."""
    shutil.copytree(SOURCE_DIR, tmp_path / SOURCE_DIR.name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    pyproject = (ROOT / "pyproject.toml").read_text()
    settings = load_settings()
    if repository:
        pyproject = pyproject.replace(settings.repository_url, repository)
    if branch:
        pyproject = pyproject.replace(f'branch = "{settings.branch}"', f'branch = "{branch}"')
    (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


def test_committed_notebooks_and_readme_are_in_sync_with_pyproject():
    result = subprocess.run(
        [sys.executable, "-m", "tools.sync_colab", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_address_is_written_by_hand_in_one_place_only():
    """Outside pyproject.toml the address appears only in lines the script writes."""
    settings = load_settings()
    address = f"{settings.owner}/{settings.repo}"
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
            lines = [line for line in lines if not line.startswith("Repository = ")]
        by_hand += [f"{name}: {line.strip()[:120]}" for line in lines if not any(g in line for g in generated)]
    assert not by_hand, f"write the address only in pyproject.toml (or let `make sync-colab` write it): {by_hand}"


def test_every_release_notebook_opens_itself_in_colab_and_installs_the_course():
    settings = load_settings()
    for lab, name in LABS.items():
        notebook = nbformat.read(RELEASE_DIR / lab / name, as_version=4)
        title = notebook.cells[0].source
        assert settings.badge(f"{RELEASE_DIR.name}/{lab}/{name}") in title, f"{lab}: no Colab badge under the title"
        setup = [c.source for c in notebook.cells if c.cell_type == "code" and COLAB_TEST in c.source]
        assert len(setup) == 1 and f"git+{settings.repository_url}@{settings.branch}" in setup[0], lab


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
