"""A translated notebook through the whole pipeline (``make collect`` + ``make grade``): a Chinese lab 02 notebook
with the solution's answers gets 10/10, as its English twin does, in its own language: the trusted side and the
box grade it in Chinese (the record says so), the graded notebook and the feedback keep its Chinese prose and its
setup cell (nbgrader's restoring of locked cells would put the English back: ``KeepHandedOutCells``), the feedback
renders that prose as the course's own markdown, and its Grading notes are Chinese.

Notebooks of a class's handout (issue 48), English and Chinese, are graded and shown with the class's setup cell.

The scratch course's catalog translates two cells of lab 02 (the committed catalogs fill in as translators work);
its Chinese release is generated from it as ``make release`` does."""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import polib
import pytest

from autograder.course import languages
from autograder.handout import colab_class
from autograder.proof import classroom, report
from tools import translations

LAB = "02-atomic-prefill"
TITLE = "# 实验 02 · 原子预填充"
SECTION = "## 1. 块表"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _translate_two_cells(root: Path) -> None:
    path = translations.catalog_path(root / "solutions" / LAB, "zh_CN")
    catalog = polib.pofile(str(path), wrapwidth=0)
    entries = [e for e in catalog if not e.obsolete]
    badge = next(line for line in entries[0].msgid.split("\n") if line.startswith("[![Open In Colab]"))
    entries[0].msgstr = f"{TITLE}\n\n{badge}\n\n请求带着 `prompt_len` 个 token 的提示词到来。"
    entries[1].msgstr = f"{SECTION}\n\n块池是一个固定的数组。"
    catalog.save(str(path))


def _answered(root: Path, nb) -> bytes:
    """``nb`` as a student who typed the solution's answers has it."""
    source = nbformat.read(root / "solutions" / LAB / "atomic_prefill.ipynb", 4)
    typed = {c.metadata["nbgrader"]["grade_id"]: _typed(c.source) for c in source.cells if _is_answer(c)}
    for cell in nb.cells:
        if _is_answer(cell):
            cell.source = typed[cell.metadata["nbgrader"]["grade_id"]]
    return nbformat.writes(nb).encode()


def _chinese_solution(root: Path) -> bytes:
    """The Chinese release with the solution's answers, plus a cell whose output is cut (the grader writes Grading
    notes for it)."""
    nb = nbformat.read(languages.release_notebook(root / "course", LAB, "atomic_prefill.ipynb", "zh_CN"), 4)
    nb.cells.append(nbformat.v4.new_code_cell('print("x" * 300_000)'))
    return _answered(root, nb)


def _from_class_handout(root: Path, language: str, folder: Path) -> bytes:
    """Lab 02's notebook of a class's handout for lab 02 in ``language``, with the solution's answers."""
    from autograder.handout import handout

    with zipfile.ZipFile(handout.build(folder / f"{language}.zip", repo=root, lab=LAB, language=language)) as zipped:
        text = zipped.read(f"paged-kv-course/course/{LAB}/atomic_prefill.ipynb").decode()
    return _answered(root, nbformat.reads(text, as_version=4))


def _is_answer(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))


def _typed(source: str) -> str:
    """An answer cell as a student who wrote the solution has it: without nbgrader's solution markers."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in classroom.SOLUTION_MARKERS)


def _grading_notes_in_chinese_exist() -> bool:
    """Whether the trusted side has Chinese texts for the Grading notes (``autograder.verdict.student_text``)."""
    from autograder.grade.grading_record import add_grading_notes
    from autograder.verdict.events import EventKind, event

    nb = nbformat.v4.new_notebook()
    add_grading_notes(nb, [event("cell 3", EventKind.OUTPUT_CUT, "> 200000 bytes")], language="zh_CN")
    return bool(CJK.search(nb.cells[0].source))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = report.prepare_root(tmp_path_factory.mktemp("course"))
    shutil.copy(report.REPO / "pyproject.toml", root / "pyproject.toml")
    _translate_two_cells(root)
    assert translations.release(root), "the scratch catalog's translations make a new Chinese release"
    info = classroom.load_lab(LAB, root / "solutions", root / "course")
    folder = tmp_path_factory.mktemp("handouts")
    submitted = {
        "zh-solution": ("translated", _chinese_solution(root), "zh_CN"),
        "zh-class": ("translated", _from_class_handout(root, "zh_CN", folder), "zh_CN"),
        "en-class": ("solution", _from_class_handout(root, "en", folder), "en"),
    }
    students = [
        classroom.Student(sid, kind, sid, info.notebook, content, classroom.Expect(total=10.0, language=language))
        for sid, (kind, content, language) in submitted.items()
    ]
    result = report.run_lab(LAB, root, dict(os.environ), students=students)
    return root, result


def _graded_notebook(result, sid):
    work = Path(result.summary["work"])
    return nbformat.read(work / "autograded" / result.ids[sid] / LAB / "atomic_prefill.ipynb", as_version=4)


def test_a_chinese_notebook_with_the_solution_gets_full_marks_in_chinese(graded):
    _, result = graded
    assert {sid: problems for sid, problems in result.problems.items() if problems} == {}
    assert {sid: sum(scores.values()) for sid, scores in result.scores.items()} == dict.fromkeys(
        ("zh-solution", "zh-class", "en-class"), 10.0
    )
    assert all(scores == result.maxima for scores in result.scores.values()), "every cell's points, as in English"


def test_the_graded_chinese_notebook_keeps_its_prose_and_its_setup_cell(graded):
    _, result = graded
    zh = _graded_notebook(result, "zh-solution")
    markdown = "\n".join(c.source for c in zh.cells if c.cell_type == "markdown")
    assert TITLE in markdown and SECTION in markdown and "course/zh_CN/02-atomic-prefill" in markdown
    setup = next(c for c in zh.cells if languages.is_setup_cell(c))
    assert languages.language_line("zh_CN") in setup.source.split("\n")
    english = "\n".join(c.source for c in _graded_notebook(result, "en-class").cells if c.cell_type == "markdown")
    assert TITLE not in english and "# Lab 02 · Atomic prefill" in english


def test_the_feedback_shows_the_chinese_prose_as_the_courses_own(graded):
    _, result = graded
    work = Path(result.summary["work"])
    html = (work / "feedback" / result.ids["zh-solution"] / LAB / "atomic_prefill.html").read_text()
    assert re.search(r"<h1[^>]*>\s*实验 02 · 原子预填充", html), "the Chinese title is rendered as a heading"
    assert re.search(r"<h2[^>]*>\s*1\. 块表", html)


@pytest.mark.parametrize("sid", ["zh-class", "en-class"])
def test_a_class_handouts_notebook_is_graded_and_shown_with_its_own_setup_cell(graded, sid):
    """Issue 48: no "edited" repair of the class's setup cell, which the graded notebook and its feedback keep (the
    class edition's install, not the public package's)."""
    _, result = graded
    work = Path(result.summary["work"])
    collected = {r["student"]: r for r in json.loads((work / "reports" / LAB / "collected.json").read_text())}
    assert not [kind for kind, _ in collected[result.ids[sid]]["repairs"] if kind.startswith(("edited", "restored"))]
    setup = next(c for c in _graded_notebook(result, sid).cells if languages.is_setup_cell(c))
    assert colab_class.COLAB_PATH in setup.source and "git+https" not in setup.source
    html = (work / "feedback" / result.ids[sid] / LAB / "atomic_prefill.html").read_text()
    assert colab_class.EDITION_ZIP in html and "git+https://github.com" not in html


def test_its_grading_notes_are_in_chinese(graded):
    _, result = graded
    if not _grading_notes_in_chinese_exist():
        pytest.xfail("the Chinese texts of the Grading notes (paged_kv.lab.i18n, issue 49's E2) have not landed")
    notes = next(c for c in _graded_notebook(result, "zh-solution").cells if c.get("id") == "grading-notes")
    assert CJK.search(notes.source), notes.source
