"""Every handout, in every language, as nbgrader's Validate reads it: no read-only cell "has changed" (issue 48: a
class's handout rewrites every setup cell and once kept the release's checksum, so Validate said "The source of the
following cell has changed, but it should not have!" on every untouched notebook). And what a handout in Chinese
holds: a class's, its language's notebooks at the release's paths and a Chinese README; a self-study one, both
languages, its ``make lab`` opening the Chinese ones."""

from __future__ import annotations

import copy
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.validator import Validator

from autograder.course import handed_out, languages
from autograder.editions.manifest import BY_LAB
from autograder.handout import colab_class, handout

CLASS_HANDOUTS = [(lab, language) for lab in sorted(BY_LAB) for language in languages.LANGUAGES]


def _notebooks(archive: zipfile.ZipFile) -> dict:
    return {
        name: nbformat.reads(archive.read(name).decode(), as_version=4)
        for name in archive.namelist()
        if name.endswith(".ipynb")
    }


def _changed(nb) -> list:
    """What Validate reports as changed read-only cells (nbgrader's own check, without running the notebook)."""
    return [cell.source.split("\n")[0] for cell in Validator()._get_changed_cells(copy.deepcopy(nb))]


@pytest.mark.parametrize("lab,language", CLASS_HANDOUTS, ids=[f"{lab}-{lang}" for lab, lang in CLASS_HANDOUTS])
def test_every_read_only_cell_of_a_class_handout_matches_its_checksum(tmp_path, lab, language):
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab, language=language)) as archive:
        notebooks = _notebooks(archive)
    assert notebooks
    for name, nb in notebooks.items():
        assert _changed(nb) == [], f"{name}: Validate would say these cells changed"
        assert languages.notebook_language(nb) == language, name
        setup = [c for c in nb.cells if languages.is_setup_cell(c)]
        assert len(setup) == 1 and colab_class.COLAB_PATH in setup[0].source, f"{name}: not the class's setup cell"
        assert colab_class.MODELSCOPE_PATH in setup[0].source, f"{name}: no class route on ModelScope"
        said = [handed_out.UPLOAD_MESSAGES[route][language] for route in ("colab", "modelscope")]
        assert all(message in setup[0].source for message in said), f"{name}: not in the notebook's language"


def test_the_checksums_are_what_makes_validate_pass():
    """The negative control: the class's rewrite of a setup cell without ``reseal`` is what Validate refuses."""
    nb = nbformat.read(handout.REPO / "course" / "02-atomic-prefill" / "atomic_prefill.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = colab_class.class_setup_source(cell.source) if cell.cell_type == "code" else cell.source
    assert len(_changed(nb)) == 1
    assert handed_out.reseal(nb) == 1 and _changed(nb) == [] and handed_out.reseal(nb) == 0


def test_a_chinese_class_handout_holds_its_language_only_at_the_releases_paths(tmp_path):
    lab = "05-prefix-cache"
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab, language="zh_CN")) as archive:
        names = archive.namelist()
        readme = archive.read("paged-kv-course/README.md").decode()
        makefile = archive.read("paged-kv-course/Makefile").decode()
        notebooks = _notebooks(archive)
    assert not [n for n in names if "/course/zh_CN/" in n], "one language, at the English release's paths"
    assert {Path(n).parts[2] for n in notebooks} == {p.name for p in (handout.REPO / "course").glob("0[0-5]-*")}
    assert all(languages.notebook_language(nb) == "zh_CN" for nb in notebooks.values())
    assert "这份讲义是为实验 05-prefix-cache 准备的" in readme and "colab/paged-kv-class-edition.zip" in readme
    assert "LAB_LANG := zh_CN" in makefile and "COURSE_LANG ?=" not in makefile
    open_lab = notebooks[f"paged-kv-course/course/{lab}/prefix_cache.ipynb"]
    assert any("本实验开放期间" in c.source for c in open_lab.cells), "the open lab's practice note is Chinese"


def _dry_run(folder: Path, *args: str, locale: str = "C.UTF-8") -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL") and k[:3] != "LC_"}
    env["LANG"] = locale
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab", *args], cwd=folder, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line for line in done.stdout.splitlines() if "jupyter lab" in line)


@pytest.mark.parametrize("language", languages.LANGUAGES)
def test_a_self_study_handout_holds_both_languages_and_opens_its_own(tmp_path, language):
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", language=language)) as archive:
        names = archive.namelist()
        readme = archive.read("paged-kv-course/README.md").decode()
        archive.extractall(tmp_path)
    folder = tmp_path / "paged-kv-course"
    assert any("/course/zh_CN/" in n for n in names) and any(n.startswith("paged-kv-course/course/02-") for n in names)
    if language == "zh_CN":
        assert "--notebook-dir=course/zh_CN " in _dry_run(folder) and "course/zh_CN/" in readme
        assert "--notebook-dir=course " in _dry_run(folder, "COURSE_LANG=en")
    else:
        assert "--notebook-dir=course " in _dry_run(folder) and "COURSE_LANG=zh_CN" in readme
        assert "--notebook-dir=course/zh_CN " in _dry_run(folder, locale="zh_CN.UTF-8")
    assert _dry_run(folder) == _dry_run(handout.REPO, f"COURSE_LANG={language}").replace(str(handout.REPO), str(folder))


def test_a_chinese_class_on_the_hub_gets_the_chinese_notebooks(tmp_path):
    """``make hub-release LAB=05-... COURSE_LANG=zh_CN``: each notebook nbgrader released (the English one) is
    rewritten as the Chinese release has it, keeping its file mode; the open lab's practice note is Chinese too."""
    import os

    from autograder.exchange import exchange

    lab = "05-prefix-cache"
    released = tmp_path / "outbound" / lab / "prefix_cache.ipynb"
    released.parent.mkdir(parents=True)
    released.write_bytes((handout.REPO / "course" / lab / "prefix_cache.ipynb").read_bytes())
    os.chmod(released, 0o644)
    exchange.in_language(released, lab, "en")
    assert released.read_bytes() == (handout.REPO / "course" / lab / "prefix_cache.ipynb").read_bytes()
    exchange.in_language(released, lab, "zh_CN")
    assert released.read_bytes() == (handout.REPO / "course" / "zh_CN" / lab / "prefix_cache.ipynb").read_bytes()
    assert (released.stat().st_mode & 0o777) == 0o644
    exchange.leave_out_near_answers(released)
    nb = nbformat.read(released, as_version=4)
    assert languages.notebook_language(nb) == "zh_CN" and any("本实验开放期间" in c.source for c in nb.cells)
    with pytest.raises(ValueError, match="languages"):
        exchange.release([lab], tmp_path / "exchange", "course", language="fr")


@pytest.mark.parametrize(
    "target,expected",
    [
        (["handout", "LAB=05-prefix-cache", "COURSE_LANG=zh_CN"], "--lab 05-prefix-cache --language zh_CN"),
        (["handout"], None),
        (["hub-release", "LAB=05-prefix-cache", "COURSE_LANG=zh_CN"], "release 05-prefix-cache --language zh_CN"),
    ],
)
def test_the_makefile_passes_the_class_language_on(target, expected):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["LANG"] = "zh_CN.UTF-8"  # a handout's language is the class's, never the instructor's locale
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed-stamp", "-o", ".venv/.kernel-stamp", *target],
        cwd=handout.REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if expected is None:
        assert "autograder.handout.handout" in done.stdout and "--language" not in done.stdout, done.stdout
    else:
        assert expected in done.stdout, done.stdout
