"""The translation tools themselves: a changed English cell marks its translation stale, the facts check catches a
translation that says something else, the glossary check catches a term translated another way."""

from __future__ import annotations

import shutil

import nbformat
import polib
import pytest

from autograder.course.layout import LABS, SOURCE_DIR
from tools import sync_colab, translation_facts, translations

LAB = "02-atomic-prefill"


@pytest.fixture
def lab_dir(tmp_path):
    """A copy of lab 02's source notebook and catalog, whose second markdown cell is translated."""
    folder = tmp_path / LAB
    folder.mkdir()
    shutil.copy(SOURCE_DIR / LAB / LABS[LAB], folder / LABS[LAB])
    shutil.copy(translations.catalog_path(SOURCE_DIR / LAB, "zh_CN"), folder / "zh_CN.po")
    catalog = polib.pofile(str(folder / "zh_CN.po"), wrapwidth=0)
    entry = [e for e in catalog if not e.obsolete][1]
    entry.msgstr = "## 1. 块表\n\n（译文）"
    catalog.save(str(folder / "zh_CN.po"))
    return folder, entry.msgctxt


def _edit_cell(folder, cell_id, text):
    path = folder / LABS[LAB]
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    cell.source = text
    nbformat.write(nb, path)


def test_a_changed_english_cell_marks_its_translation_stale_and_is_named_to_translate_again(lab_dir):
    folder, cell = lab_dir
    assert cell not in translations.to_translate(folder, "zh_CN")
    _edit_cell(folder, cell, "## 1. Block tables, changed")
    assert cell in translations.to_translate(folder, "zh_CN"), "the catalog is not updated yet: already stale"
    changes = translations.update(folder, "zh_CN")
    assert changes["stale"] == [cell]
    entry = next(e for e in polib.pofile(str(folder / "zh_CN.po"), wrapwidth=0) if e.msgctxt == cell)
    assert "fuzzy" in entry.flags and entry.msgid == "## 1. Block tables, changed" and entry.msgstr
    assert entry.previous_msgid.startswith("## 1. Block tables")
    assert cell in translations.to_translate(folder, "zh_CN")
    again = translations.update(folder, "zh_CN")
    assert not any(again.values()), f"a second run changes: {again}"


def test_a_new_colab_address_makes_no_translation_stale(lab_dir):
    folder, _ = lab_dir
    settings = sync_colab.load_settings()
    nb = nbformat.read(folder / LABS[LAB], as_version=4)
    title = nb.cells[0]
    title.source = title.source.replace(f"github/{settings.owner}/{settings.repo}/", "github/someone/else/")
    nbformat.write(nb, folder / LABS[LAB])
    catalog = polib.pofile(str(folder / "zh_CN.po"), wrapwidth=0)
    catalog[0].msgstr = catalog[0].msgid.replace("Atomic prefill", "原子预填充")
    catalog.save(str(folder / "zh_CN.po"))
    assert translations.update(folder, "zh_CN")["stale"] == []
    entry = polib.pofile(str(folder / "zh_CN.po"), wrapwidth=0)[0]
    assert "fuzzy" not in entry.flags and "someone/else" in entry.msgid
    assert title.get("id") not in translations.to_translate(folder, "zh_CN")


@pytest.mark.parametrize(
    "translated,lost",
    [
        ("A `block_table` of 2048 tokens, see [vLLM](https://docs.vllm.ai) on an H100.", "numbers"),
        ("A `block_tables` of 2,048 tokens, see [vLLM](https://docs.vllm.ai) on an H100.", "code spans"),
        ("A `block_table` of 2,048 tokens, see [vLLM](https://docs.vllm.ai/en) on an H100.", "links"),
        ("A `block_table` of 2,048 tokens, see [vLLM](https://docs.vllm.ai) on an A100.", "names"),
        ("### A `block_table` of 2,048 tokens, see [vLLM](https://docs.vllm.ai) on an H100.", "headings"),
        ("A `block_table` of 2,048 tokens, see [vLLM](https://docs.vllm.ai) on an H100, 3 times.", "numbers"),
    ],
)
def test_the_facts_check_names_what_a_translation_changed(translated, lost):
    english = "A `block_table` of 2,048 tokens, see [vLLM](https://docs.vllm.ai) on an H100."
    assert translation_facts.differences(english, english) == []
    found = translation_facts.differences(english, translated)
    assert found and found[0].startswith(lost), found


def test_the_facts_check_reads_tables_and_keeps_hyphenated_names_whole():
    english = "| # | lab |\n|---|---|\n| 00 | start |\n\nFlashAttention-2 on ShareGPT-shaped traffic."
    assert (
        translation_facts.differences(
            english, "| # | 实验 |\n|---|---|\n| 00 | 开始 |\n\nFlashAttention-2，ShareGPT 式流量。"
        )
        == []
    )
    found = translation_facts.differences(english, "| # |\n|---|\n| 00 |\n\nFlashAttention，ShareGPT 式流量。")
    assert any(f.startswith("tables") for f in found) and any("FlashAttention-2" in f for f in found)


def test_a_date_and_a_scaled_number_may_be_restated_as_chinese_writes_them_and_nothing_else():
    english = "Merged in April 2026; past 2**31 (2.1 billion) elements, 853 thousand parameters, about 15.7K slots."
    natural = "2026 年 4 月合并；超过 2**31（约 21 亿）个元素，85.3 万个参数，约 1.57 万个槽位。"
    kept = "2026 年四月合并；超过 2**31（约 2.1 billion）个元素，853 thousand 个参数，约 15.7K 个槽位。"
    assert translation_facts.differences(english, natural) == []
    assert translation_facts.differences(english, kept) == []
    for right, wrong in (("2026 年 4 月", "2026 年 5 月"), ("约 21 亿", "约 22 亿"), ("85.3 万个参数", "85 万个参数")):
        found = translation_facts.differences(english, natural.replace(right, wrong))
        assert any(f.startswith("numbers") for f in found), (wrong, found)


def test_the_glossary_check_asks_for_the_checked_terms_only():
    terms = translation_facts.read_glossary()
    english = "Each prefill writes the block table; a `prefill_chunk` and a block are not checked."
    assert translation_facts.glossary_misses(english, "每次预填充写入块表；`prefill_chunk` 和块。", terms) == []
    missing = translation_facts.glossary_misses(english, "每次 prefill 写入 block table。", terms)
    assert {m.split(" is ")[0] for m in missing} == {"'prefill'", "'block table'"}
