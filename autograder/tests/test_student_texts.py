"""The autograder speaks to a student in the notebook's language: the Grading notes, what a limit shows in a cell,
what collection repaired; the language comes from the graded notebook (its release's metadata), never from the
student's environment, and in English every text is exactly as it was."""

from __future__ import annotations

import copy
import html
import json
import re

import nbformat
import pytest

from autograder.collect import repair
from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from autograder.grade import cell_limits, grading_record
from autograder.verdict import scoring
from autograder.verdict.events import EventKind, describe, event
from autograder.verdict.student_text import for_student, language_of

LAB = "02-atomic-prefill"
CHINESE = re.compile("[\u4e00-\u9fff]")


def chinese(nb):
    nb = copy.deepcopy(nb)
    nb.metadata["paged_kv"] = {"language": "zh_CN"}
    return nb


def test_a_text_is_itself_in_english_and_translated_in_chinese():
    assert for_student("Hidden tests passed.", "en") == "Hidden tests passed."
    assert for_student("Hidden tests passed.", "zh_CN") == "隐藏测试通过。"
    assert for_student("a text the catalog lacks", "zh_CN") == "a text the catalog lacks"


@pytest.mark.parametrize("bad", ["zh", "", None, "fr"])
def test_a_language_the_course_lacks_is_refused(bad):
    with pytest.raises(ValueError, match="language must be one of"):
        for_student("Hidden tests passed.", bad)


@pytest.mark.parametrize(
    "metadata, expected",
    [
        ({"paged_kv": {"language": "zh_CN"}}, "zh_CN"),
        ({"paged_kv": {"language": "en"}}, "en"),
        ({"paged_kv": {"language": "tlh"}}, "en"),
        ({"paged_kv": "zh_CN"}, "en"),
        ({}, "en"),
    ],
)
def test_the_language_of_a_notebook_is_its_metadatas(metadata, expected):
    assert language_of(nbformat.from_dict({"cells": [], "metadata": metadata})) == expected
    assert language_of({"metadata": metadata}) == expected


def test_what_a_limit_shows_is_unchanged_in_english():
    assert cell_limits.budget_spent(60)["evalue"] == (
        "Not run: this notebook used up its grading time (60 s in all), so this cell scores 0. A cell above ran too "
        "long: see its 'Time limit' message."
    )
    assert cell_limits.death_message(137, False, 2048) == (
        "The kernel stopped while running this cell (exit status 137, killed by signal 9 (perhaps out of memory)), "
        "so this cell scores 0. Graded code must not call os._exit() or kill its own process. The cells below ran in "
        "a fresh kernel, after the cells above them that are not tests were run again."
    )
    assert cell_limits.output_cut(10_000)["text"] == "[grading] output cut after 10000 bytes\n"


@pytest.mark.parametrize(
    "shown, number",
    [
        (lambda lang: cell_limits.budget_spent(60, lang)["evalue"], "60"),
        (lambda lang: cell_limits.time_limit_error(30, lang)["evalue"], "30"),
        (lambda lang: cell_limits.did_not_stop(30, lang)["evalue"], "30"),
        (lambda lang: cell_limits.output_cut(10_000, lang)["text"], "10000"),
        (lambda lang: cell_limits.over_memory(512, lang)["text"], "512"),
        (lambda lang: cell_limits.exit_called(lang)["text"], "sys.exit()"),
        (lambda lang: cell_limits.process_killed(2048, lang)["text"], "2048"),
        (lambda lang: cell_limits.death_message(None, True, 2048, lang), "2048"),
        (lambda lang: cell_limits.death_message(137, False, 2048, lang), "信号 9"),
        (lambda lang: cell_limits.death_message(1, False, 2048, lang), "退出状态 1"),
        (lambda lang: cell_limits.not_run_demo(lang), "notebook"),
    ],
)
def test_what_a_limit_shows_is_chinese_in_a_chinese_notebook(shown, number):
    text = shown("zh_CN")
    assert CHINESE.search(text) and number in text, text
    assert text != shown("en")


def test_an_event_of_the_grading_notes_is_chinese_and_keeps_its_detail():
    item = event("lab02-visible", EventKind.TIMEOUT, "> 30 s", graded=True)
    assert describe(item) == "stopped by the time limit (> 30 s)"
    assert describe(item, language="zh_CN") == "因超时被终止 (> 30 s)"
    assert all(CHINESE.search(describe(event("c", kind), language="zh_CN")) for kind in EventKind)


def test_the_grading_notes_of_a_chinese_notebook_are_chinese():
    nb = chinese(nbformat.v4.new_notebook())
    grading_record.add_grading_notes(nb, [event("lab02-visible", EventKind.TIMEOUT, "> 30 s", graded=True)])
    notes = html.unescape(nb.cells[0].source)  # each line is inert text: character references (plain_text)
    assert notes.startswith("## 评分说明\n\n自动评分器做了以下改动或注意到以下情况。")
    assert "评分过程中：" in notes and "lab02-visible: 因超时被终止 (> 30 s)" in notes
    english = nbformat.v4.new_notebook()
    grading_record.add_grading_notes(english, [event("lab02-visible", EventKind.TIMEOUT, "> 30 s", graded=True)])
    assert english.cells[0].source.startswith("## Grading notes\n\nThe autograder changed or noticed the following.")


def test_a_verdicts_outputs_speak_the_notebooks_language():
    from autograder.verdict.cells import Verdict

    cell = nbformat.v4.new_code_cell("pass")
    scoring.show_verdict(cell, Verdict("hidden", True, "pass"), False, False, "zh_CN")
    assert cell.outputs[-1]["text"] == "隐藏测试通过。\n"
    cell.outputs = [{"output_type": "error", "ename": "CheckFailed", "evalue": "x", "traceback": ["x"]}]
    scoring.soften_errors(cell, "part1", "zh_CN")
    assert cell.outputs[0]["text"].startswith("在你的 notebook 中，这个单元格抛出了错误")
    assert "只有 'part1' 部分是你的" in cell.outputs[-1]["text"]


def test_collections_notes_are_in_the_releases_language():
    release = chinese(nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4))
    data = json.loads((SOURCE_DIR / LAB / LABS[LAB]).read_text())
    for cell in data["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade"):
            cell["source"] = "pass  # tests removed"
    fixed = repair.repair(json.dumps(data).encode(), release, "mine.ipynb", LABS[LAB])
    assert fixed.language == "zh_CN"
    assert {kind for kind, _ in fixed.log} == {"file-name", "edited-test"}  # the instructor's log stays English
    notes = html.unescape(fixed.notebook.cells[0].source)
    assert notes.startswith("## 评分说明")
    assert f"你的文件名是 `mine.ipynb`；已按 `{LABS[LAB]}` 评分。" in notes
    assert "测试单元格 `lab02-visible` 被修改过；已按原始内容评分。" in notes
    english = repair.repair(json.dumps(data).encode(), nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4))
    assert "The test cell `lab02-visible` had been edited; it was graded as originally written." in english.notes
