"""The translated releases (``course/<language>/``) are generated from the English release and the catalogs, never
edited: the committed ones are what ``make release`` makes now; each is its English twin with the prose translated,
one more line in its setup cell, its language in its metadata and nbgrader checksums that Validate accepts; every
other code cell, cell id and nbgrader field (points included) is the English release's, byte for byte."""

from __future__ import annotations

import copy

import nbformat
import polib
import pytest
from nbgrader.validator import Validator

from autograder.course import languages
from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from tools import sync_colab, translations

CASES = [(lab, language) for lab in LABS for language in languages.TRANSLATIONS]
IDS = [f"{lab}-{language}" for lab, language in CASES]


def changed_cells(nb) -> list:
    """The cells nbgrader's Validate reports as "The source of the following cell has changed" (its own check)."""
    return [cell.source[:60] for cell in Validator()._get_changed_cells(copy.deepcopy(nb))]


def test_the_committed_translated_releases_are_what_make_release_makes():
    stale = translations.release(check=True)
    assert not stale, f"out of date or not generated: {[str(p) for p in stale]}: run `make release` and commit"


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_a_translated_release_is_its_english_twin_with_translated_prose_and_one_language_line(lab, language):
    english = nbformat.read(RELEASE_DIR / lab / LABS[lab], as_version=4)
    translated = nbformat.read(languages.release_notebook(RELEASE_DIR, lab, LABS[lab], language), as_version=4)
    assert translated.metadata[languages.METADATA_KEY] == {"language": language}
    assert languages.notebook_language(translated) == language and languages.notebook_language(english) == "en"
    assert [c.get("id") for c in translated.cells] == [c.get("id") for c in english.cells]
    for en, tr in zip(english.cells, translated.cells):
        assert tr.cell_type == en.cell_type
        meta_en, meta_tr = copy.deepcopy(dict(en.metadata)), copy.deepcopy(dict(tr.metadata))
        meta_en.get("nbgrader", {}).pop("checksum", None)
        meta_tr.get("nbgrader", {}).pop("checksum", None)
        assert meta_tr == meta_en, f"{lab} cell {en.get('id')}: metadata differs beyond the checksum"
        if en.cell_type == "code":
            expected = languages.with_language(en.source, language) if languages.is_setup_cell(en) else en.source
            assert tr.source == expected, f"{lab} cell {en.get('id')}: code differs from the English release"
    setup = [c for c in translated.cells if languages.is_setup_cell(c)]
    assert len(setup) == 1 and languages.language_line(language) in setup[0].source.split("\n")
    badge = sync_colab.load_settings().badge(f"{RELEASE_DIR.name}/{language}/{lab}/{LABS[lab]}")
    assert badge in translated.cells[0].source, "the Colab badge opens the translated notebook"
    assert changed_cells(translated) == [], "nbgrader's Validate would say a read-only cell changed"


def test_validate_would_refuse_a_translation_whose_checksums_were_not_recomputed():
    """The negative control of the test above: the same rewrite without ``reseal`` is what Validate refuses."""
    english = nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4)
    for cell in english.cells:
        if languages.is_setup_cell(cell):
            cell.source = languages.with_language(cell.source, "zh_CN")
    assert len(changed_cells(english)) == 1


LAB = "02-atomic-prefill"


def _catalog(edit) -> polib.POFile:
    catalog = translations.read_catalog(SOURCE_DIR / LAB, "zh_CN")
    entries = [e for e in catalog if not e.obsolete]
    edit(entries)
    return catalog


def test_a_translation_is_used_only_while_it_is_current():
    english = nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4)
    cells = [c for c in english.cells if c.cell_type == "markdown"]

    def translate(entries):
        entries[1].msgstr = "## 1. 块表\n\n（当前的译文）"
        entries[2].msgstr = "（过时的译文）"
        entries[2].flags.append("fuzzy")
        entries[3].msgstr = "（按旧英文翻译的译文）"
        entries[3].msgid = "Some older English."

    made = translations.translated_release(english, _catalog(translate), "zh_CN", badge=None)
    by_id = {c.get("id"): c.source for c in made.cells}
    assert by_id[cells[1].get("id")] == "## 1. 块表\n\n（当前的译文）"
    assert by_id[cells[2].get("id")] == cells[2].source, "a fuzzy (stale) translation is never shown"
    assert by_id[cells[3].get("id")] == cells[3].source, "a translation of other English is never shown"
    assert changed_cells(made) == []
    # the English release it was made from is not changed
    assert nbformat.writes(english) == nbformat.writes(nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4))


def test_a_release_without_one_setup_cell_is_refused():
    english = nbformat.read(RELEASE_DIR / LAB / LABS[LAB], as_version=4)
    english.cells = [c for c in english.cells if not languages.is_setup_cell(c)]
    with pytest.raises(ValueError, match="setup cell"):
        translations.translated_release(english, None, "zh_CN")
    with pytest.raises(ValueError, match="source"):
        translations.translated_release(english, None, "en")


def test_the_language_line_imports_nothing_heavy():
    """The language line runs before a lab's own setup (lab 06's ``configure()`` must set Triton's mode before
    anything imports Triton): ``paged_kv.lab.i18n`` imports neither Triton nor torch."""
    import os
    import subprocess
    import sys

    code = languages.language_line("zh_CN") + "\nimport sys; print(sorted({'triton', 'torch'} & set(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
