"""The catalogs of the running code's texts (``tools/message_catalogs.py``): every text a lab's code cells pass to
the teaching aids, every text the teaching aids and the autograder mark, is in its catalog and translated; each
translation keeps its English's fields, numbers, identifiers and code spans; the compiled forms the package and
the autograder read are what the catalogs compile to."""

import re
from collections import defaultdict

import polib
import pytest

from autograder.course.layout import LABS, SOURCE_DIR
from paged_kv.lab.i18n import MIN_LITERAL, fields, literal_text
from tools import message_catalogs as catalogs

LANGUAGE = "zh_CN"
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
CODE_SPAN = re.compile(r"`[^`]+`")
# An identifier a reader types: a name with an underscore, a dotted name (not the prose's "e.g."), a call (not a
# plural's "(s)").
IDENTIFIER = re.compile(r"(?!\b(?:e\.g|i\.e)\b)[A-Za-z_]\w*(?:\.\w+)+|\b[A-Za-z]+_\w*|\b\w+\((?!s\))")


def _catalog(path):
    return polib.pofile(str(path), wrapwidth=0)


def _lab_catalog(lab):
    return {e.msgid: e for e in _catalog(SOURCE_DIR / lab / f"{LANGUAGE}.po") if catalogs.is_code_string(e)}


def _translated(entry) -> bool:
    return entry is not None and not entry.obsolete and bool(entry.msgstr) and "fuzzy" not in entry.flags


@pytest.mark.parametrize("lab", sorted(LABS))
def test_every_text_a_labs_code_cells_pass_to_the_teaching_aids_is_translated(lab):
    entries = _lab_catalog(lab)
    wanted = {m.msgid: m for m in catalogs.cell_messages(SOURCE_DIR / lab / LABS[lab])}
    missing = [f"{m.where} {m.note}: {msgid!r}" for msgid, m in wanted.items() if not _translated(entries.get(msgid))]
    assert not missing, (
        f"{len(missing)} text(s) of {lab}'s code cells have no {LANGUAGE} translation (python -m tools.translations "
        "update, then translate them in solutions/" + lab + f"/{LANGUAGE}.po):\n" + "\n".join(missing)
    )
    stale = sorted(msgid for msgid, e in entries.items() if not e.obsolete and msgid not in wanted)
    assert not stale, f"entries no code cell of {lab} uses any more (run python -m tools.translations update): {stale}"


@pytest.mark.parametrize("lab", sorted(LABS))
def test_every_text_argument_of_a_code_cell_can_be_extracted(lab):
    unread = []
    catalogs.cell_messages(SOURCE_DIR / lab / LABS[lab], unread)
    assert unread == [], "text arguments that are neither literals nor names set to literals in their cell:\n" + (
        "\n".join(unread)
    )


@pytest.mark.parametrize("kind", ["package", "autograder"])
def test_every_marked_text_of_the_package_and_the_autograder_is_translated(kind):
    entries = {e.msgid: e for e in _catalog(catalogs.own_catalog_path(kind, LANGUAGE)) if not e.obsolete}
    marked = catalogs.package_messages() if kind == "package" else catalogs.autograder_messages()
    missing = sorted({f"{m.where}: {m.msgid!r}" for m in marked if not _translated(entries.get(m.msgid))})
    assert not missing, f"marked texts with no {LANGUAGE} translation in {kind}'s catalog:\n" + "\n".join(missing)
    unused = sorted(set(entries) - {m.msgid for m in marked})
    assert not unused, f"{kind}'s catalog holds texts the code no longer marks (tools.translations update): {unused}"


def test_the_compiled_catalogs_are_what_their_catalogs_compile_to():
    stale = catalogs.stale_compiled(LANGUAGE)
    assert stale == [], f"stale compiled catalogs (run python -m tools.translations update): {stale}"


def _pairs():
    pairs = []
    for path in [catalogs.own_catalog_path(k, LANGUAGE) for k in ("package", "autograder")] + catalogs.lab_catalogs(
        LANGUAGE
    ):
        pairs += [
            (path.parent.name, e.msgid, e.msgstr) for e in _catalog(path) if catalogs.is_code_string(e) and e.msgstr
        ]
    return pairs


def test_each_translation_keeps_its_englishs_fields_numbers_identifiers_and_code_spans():
    problems = []
    for where, english, chinese in _pairs():
        if sorted(fields(english)) != sorted(fields(chinese)):
            problems.append(f"{where}: fields {fields(english)} != {fields(chinese)}: {english!r}")
            continue
        text, translated = literal_text(english), literal_text(chinese)
        for kind, pattern in (("number", NUMBER), ("identifier", IDENTIFIER), ("code span", CODE_SPAN)):
            if kind == "code span":  # read on the template: a span may hold a field
                text, translated = english, chinese
            lost = [token for token in pattern.findall(text) if token not in translated]
            if lost:
                problems.append(f"{where}: {kind}s {lost} missing from {chinese!r} ({english!r})")
    assert not problems, "\n".join(problems)


def test_one_english_text_has_one_translation_in_every_catalog():
    seen = defaultdict(set)
    for where, english, chinese in _pairs():
        seen[english].add(chinese)
    differing = {english: sorted(ways) for english, ways in seen.items() if len(ways) > 1}
    assert not differing, f"texts translated differently in different catalogs: {differing}"


def test_no_template_of_the_running_code_is_too_short_to_match_safely():
    short = [e for _, e, _ in _pairs() if fields(e) and len("".join(literal_text(e).split())) < MIN_LITERAL]
    assert short == [], f"templates with under {MIN_LITERAL} literal characters never match: reword them: {short}"


def test_each_replay_error_lab_09_recognises_by_its_template_is_a_text_the_package_marks():
    """``chunked_rules.REPLAY_ERRORS`` finds a message in the notebook's language through its msgid: a template
    reworded in the code but not there would stop matching in Chinese only."""
    from paged_kv.lab.chunked_rules import REPLAY_ERRORS

    marked = {m.msgid for m in catalogs.package_messages()}
    assert [template for template, _ in REPLAY_ERRORS if template not in marked] == []
