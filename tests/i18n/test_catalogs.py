"""The translation catalogs (``solutions/<lab>/<language>.po``) against the English notebooks they translate.

Per lab and language: the catalog follows its notebook (one entry per markdown cell, made from its English as it is
now: ``make release`` updates it); no translation is stale (its English changed since: translate the cells named
again); every cell is translated; every translation keeps its English's facts (numbers, code spans, names, links,
math, the markup's skeleton: ``tools/translation_facts.py``) and the glossary's checked terms
(``docs/glossary-zh_CN.md``).

"Every cell is translated" is an expected failure (xfail) only while a lab's catalog holds no translation at all:
the translations are written in the catalogs, lab by lab, by translators; once a lab's first one lands, the test
names every cell of it still to translate.
"""

from __future__ import annotations

from typing import Dict, List

import polib
import pytest

from autograder.course.layout import LABS, SOURCE_DIR
from autograder.course.languages import TRANSLATIONS
from tools import translation_facts
from tools.translations import catalog_path, markdown_cells, read_catalog, usable, without_badge

CASES = [(lab, language) for lab in LABS for language in TRANSLATIONS]
IDS = [f"{lab}-{language}" for lab, language in CASES]


def _english(lab: str) -> Dict[str, str]:
    return {cell["id"]: cell["source"] for cell in markdown_cells(SOURCE_DIR / lab / LABS[lab])}


def _entries(lab: str, language: str) -> List[polib.POEntry]:
    catalog = read_catalog(SOURCE_DIR / lab, language)
    assert catalog is not None, f"{catalog_path(SOURCE_DIR / lab, language)} is missing: run `make release`"
    return [entry for entry in catalog if not entry.obsolete and entry.msgctxt is not None]  # None: code strings


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_the_catalog_has_one_entry_per_markdown_cell_made_from_its_english_now(lab, language):
    english = _english(lab)
    entries = _entries(lab, language)
    assert [e.msgctxt for e in entries] == list(english), (
        f"{lab}'s {language} catalog does not list the notebook's markdown cells in order: run `make release` "
        "(tools/translations.py update) and commit the catalog"
    )
    behind = [e.msgctxt for e in entries if e.msgid != english[e.msgctxt]]
    assert not behind, f"{lab}'s {language} catalog holds other English than cells {behind}: run `make release`"


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_no_translation_is_stale(lab, language):
    english = _english(lab)
    stale = [
        e.msgctxt
        for e in _entries(lab, language)
        if e.msgstr and ("fuzzy" in e.flags or without_badge(e.msgid) != without_badge(english.get(e.msgctxt, e.msgid)))
    ]
    assert not stale, (
        f"{lab}: the English of {len(stale)} cell(s) changed since they were translated into {language}; translate "
        f"them again (the catalog's `#| msgid` shows the English they were translated from), then remove the fuzzy "
        f"flag: {', '.join(stale)}"
    )


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_every_markdown_cell_is_translated(lab, language):
    english = _english(lab)
    entries = {e.msgctxt: e for e in _entries(lab, language)}
    if not any(e.msgstr for e in entries.values()):
        pytest.xfail(f"{lab}'s {language} catalog holds no translation yet ({len(english)} cells to translate)")
    missing = [cell for cell in english if cell not in entries or not entries[cell].msgstr]
    assert not missing, (
        f"{lab}: {len(missing)} of {len(english)} markdown cells have no {language} translation: {', '.join(missing)} "
        "(python -m tools.translations status; a stale one is the test above's)"
    )


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_every_translation_keeps_the_facts_of_its_english(lab, language):
    english = _english(lab)
    wrong = {}
    for entry in _entries(lab, language):
        if entry.msgctxt in english and usable(entry, english[entry.msgctxt]):  # a stale one: the test above
            # the Colab and ModelScope badges are make release's to write (translated_release), not the translator's
            found = translation_facts.differences(without_badge(english[entry.msgctxt]), without_badge(entry.msgstr))
            if found:
                wrong[entry.msgctxt] = found
    assert not wrong, f"{lab}: translations that do not say what their English says:\n" + "\n".join(
        f"  {cell}: {'; '.join(found)}" for cell, found in wrong.items()
    )


@pytest.mark.parametrize("lab,language", CASES, ids=IDS)
def test_every_translation_uses_the_glossarys_terms(lab, language):
    terms = translation_facts.read_glossary()
    english = _english(lab)
    wrong = {}
    for entry in _entries(lab, language):
        if entry.msgctxt in english and usable(entry, english[entry.msgctxt]):
            found = translation_facts.glossary_misses(english[entry.msgctxt], entry.msgstr, terms)
            if found:
                wrong[entry.msgctxt] = found
    assert not wrong, (
        f"{lab}: translations that do not use the glossary's terms (docs/glossary-zh_CN.md):\n"
        + "\n".join(f"  {cell}: {'; '.join(found)}" for cell, found in wrong.items())
    )


def test_the_glossary_is_one_table_of_terms_each_once():
    terms = translation_facts.read_glossary()
    english = [t.english.lower() for t in terms]
    assert len(english) == len(set(english)), "a term is listed twice"
    assert any(t.checked for t in terms) and all(t.chinese.strip() for t in terms)
