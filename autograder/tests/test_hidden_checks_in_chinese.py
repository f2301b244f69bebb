"""A hidden check's failure speaks the graded notebook's language: in Chinese for a Chinese notebook, its case,
problem and hint as well as the feedback's wording around them, and in English, exactly as before, otherwise.

Grading runs a lab's hidden checks in the trusted process under ``speaking(language_of(nb))``
(``autograder.grade.hardened``); here a few labs' catalogued bugs (``autograder/labs/*/tests/bugs.py``) fail their
checks in both languages, and the verdict the student reads (``autograder.verdict.cells.failed``) is checked. The
translations come from the autograder's catalog, which no grading box can read; none of them carries a line of a
grader's code (``autograder.verdict.secrets``), so the scrubber never has to remove one from a Chinese failure.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import List, Tuple

import polib
import pytest

from autograder.course.layout import LABS, SOURCE_DIR
from autograder.course.notebook import grader_files
from autograder.labs import LABS as COURSE_LABS, checking, checks_module, package_name
from autograder.verdict import secrets
from autograder.verdict.cells import failed
from autograder.verdict.student_text import language_of
from paged_kv.kernels.triton_mode import triton_available
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.i18n import speaking
from test_pitfalls_in_chinese import is_chinese
from tools import message_catalogs

CJK = re.compile("[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _bug(lab: str, name: str):
    import importlib

    catalogue = importlib.import_module(f"autograder.labs.{package_name(lab)}.tests.bugs")
    bugs = catalogue.BUGS
    found = list(bugs.values()) if isinstance(bugs, dict) and lab.startswith("01") else list(bugs)
    return next(b for b in found if b.__name__ == name)


# (lab, check, bug): real bugs of the catalogues, among them a pool leak that the package's invariant reports (its
# AssertionError inside the check's own sentence), lab 05's state compared key by key and lab 08's traces.
CASES: List[Tuple[str, str, str]] = [
    ("01-capacity-ledger", "check_bytes_per_token", "forgets_v"),
    ("02-atomic-prefill", "check_oom_is_atomic", "PrefillNotAtomic"),
    ("02-atomic-prefill", "check_block_count", "PrefillFloorDivision"),
    ("03-decode-growth", "check_block_size_one", "DecodeTutorialFormula"),
    ("03-decode-growth", "check_oom_rolls_back", "DecodeUpdatesLengthFirst"),
    ("03-decode-growth", "check_random_workload", "DecodeOffByOne"),
    ("04-logical-reconstruction", "check_table_order", "ReadsSortedOrder"),
    ("05-prefix-cache", "check_release_and_reuse", "KeepsStaleMapping"),
    ("05-prefix-cache", "check_hash_values", "HashTruthyPrefix"),
    ("05-prefix-cache", "check_hash_blocks", "HashesBeforeCompute"),
    ("07-serve-it", "check_fcfs_admission", "SkipsAheadOfTheHead"),
    ("08-fork-and-share", "check_fork", "ForkWithoutRefCounts"),
    ("08-fork-and-share", "check_beam_traces", "never_frees_pruned_beams"),
    ("08-fork-and-share", "check_copy_blocks", "copies_only_k"),
]


def _failure(lab: str, check: str, bug: str, language: str) -> CheckFailed:
    import importlib

    module = importlib.import_module(checks_module(lab))
    with speaking(language), pytest.raises(CheckFailed) as caught:
        getattr(module, check)(_bug(lab, bug))
    return caught.value


def _verdict_text(failure: CheckFailed) -> str:
    return ANSI.sub("", failed("cell", failure).message)


@pytest.mark.parametrize("lab, check, bug", CASES, ids=[f"{c[0][:2]}-{c[2]}" for c in CASES])
def test_a_hidden_checks_failure_reads_in_chinese_for_a_chinese_notebook_and_in_english_otherwise(lab, check, bug):
    chinese = _failure(lab, check, bug, "zh_CN")
    for part in ("case", "problem", "hint"):
        assert is_chinese(getattr(chinese, part)), f"the {part} is not Chinese: {getattr(chinese, part)!r}"
    shown = _verdict_text(chinese)
    assert shown.startswith("检查未通过 ["), shown
    english_words = re.findall(r"(?<![\w.'])[a-z]{3,}(?: [a-z]{3,}){2,}", CJK.sub(" ", shown))
    assert not english_words, f"English sentences left in the Chinese verdict: {english_words}\n{shown}"

    english = _failure(lab, check, bug, "en")
    text = _verdict_text(english)
    assert text.startswith("Check failed [") and not CJK.search(text), text
    assert (english.case, english.hint) != (chinese.case, chinese.hint)


def test_the_language_a_failure_is_shown_in_is_the_graded_notebooks():
    """What grading speaks (``language_of``) comes from the notebook's metadata, whatever the grader's own."""
    assert language_of({"metadata": {"paged_kv": {"language": "zh_CN"}}}) == "zh_CN"
    assert language_of({"metadata": {}}) == "en"
    with speaking(language_of({"metadata": {"paged_kv": {"language": "zh_CN"}}})):
        assert _verdict_text(_failure_in_current_language()).startswith("检查未通过")


def _failure_in_current_language() -> CheckFailed:
    from autograder.labs.lab03_decode_growth import checks

    try:
        checks.check_block_size_one(_bug("03-decode-growth", "DecodeTutorialFormula"))
    except CheckFailed as failure:
        return failure
    raise AssertionError("the bug passed")


def _hidden_check_translations() -> List[Tuple[str, str, str]]:
    """``(grader file, English, Chinese)`` of the autograder catalog's entries made from the labs' checks."""
    path = message_catalogs.own_catalog_path("autograder", "zh_CN")
    return [
        (where, entry.msgid, entry.msgstr)
        for entry in polib.pofile(str(path), wrapwidth=0)
        if not entry.obsolete
        for where, _line in entry.occurrences
        if where.startswith("autograder/labs/")
    ]


GRADED = [lab.lab for lab in COURSE_LABS]  # the labs with hidden checks (lab 00 has none)


def test_every_lab_has_its_hidden_checks_texts_in_the_autograders_catalog():
    files = {where for where, _en, _zh in _hidden_check_translations()}
    for lab in GRADED:
        assert any(f"/{package_name(lab)}/" in where for where in files), f"no text of {lab}'s checks is marked"


@pytest.mark.parametrize("lab", GRADED)
def test_no_translation_of_a_hidden_checks_text_carries_a_line_of_grader_code(lab):
    code = set()
    for path in grader_files(checks_module(lab)):
        code |= secrets._grader_lines(path.read_text(encoding="utf-8"), "")
    secret = tuple(secrets.secret_lines(SOURCE_DIR / lab / LABS[lab])) + tuple(code)
    carried = [
        (english, line) for _where, english, chinese in _hidden_check_translations() for line in code if line in chinese
    ]
    assert carried == [], f"translations that carry a line of {lab}'s grader code: {carried}"
    for case in [c for c in CASES if c[0] == lab]:
        shown = failed("cell", _failure(*case, "zh_CN")).message
        assert secrets.scrub(shown, secret) == shown, f"a Chinese failure of {lab} lost a line to the scrubber: {shown}"


def _grader_modules():
    import importlib

    for lab in GRADED:
        for path in grader_files(checks_module(lab)):
            yield path, importlib.import_module(f"autograder.labs.{package_name(lab)}.{path.stem}")
    yield Path(checking.__file__), checking


def _literal_words(node: ast.AST) -> bool:
    """A string literal or f-string (or a ``+`` of them) whose own text has words: a sentence, not code."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_words(node.left) and _literal_words(node.right)
    parts = [node] if isinstance(node, ast.Constant) else getattr(node, "values", None) or []
    if not isinstance(node, (ast.Constant, ast.JoinedStr)):
        return False
    text = "".join(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str))
    code = re.fullmatch(r"[\w\[\]'\".(),=]*", text) and re.search(r"[_\[\]()=]", text)  # ['layout_shape']
    return bool(re.search(r"[A-Za-z]{2,}", text)) and not code


def _unmarked_texts(path: Path, module) -> List[str]:
    """Texts a check passes to a case, problem, message, hint or advice of a function, or assigns to ``case`` or
    ``hint``, without ``_``/``N_``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in (["case"], ["hint"]):
            if _literal_words(node.value):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node.value)[:80]}")
        if not isinstance(node, ast.Call) or getattr(node.func, "id", None) in ("_", "N_"):
            continue
        func = node.func
        target = getattr(module, func.id, None) if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = getattr(getattr(module, func.value.id, None), func.attr, None)
        try:
            params = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
        bound = [(params[i], a) for i, a in enumerate(node.args) if i < len(params) and not isinstance(a, ast.Starred)]
        for name, arg in bound + [(k.arg, k.value) for k in node.keywords]:
            if name in ("case", "problem", "message", "hint", "advice") and _literal_words(arg):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(arg)[:80]}")
    return found


def test_every_text_a_hidden_check_shows_is_marked_for_translation():
    unmarked = [line for path, module in _grader_modules() for line in _unmarked_texts(path, module)]
    assert unmarked == [], "texts of the hidden checks a student reads in English only (mark them with _):\n" + (
        "\n".join(unmarked)
    )


def test_no_grader_module_binds_the_name_of_its_translation_marker():
    """``_`` is ``autograder.labs.checking._``: a ``for _ in ...`` in a function that also translates would make
    ``_`` a local there (an error the moment a check fails)."""
    bound = [
        f"{path.name}:{node.lineno}"
        for path, _module in _grader_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Name) and node.id == "_" and isinstance(node.ctx, ast.Store)
    ]
    assert bound == [], f"grader modules that bind the name _ (name it _item, _step...): {bound}"


@pytest.mark.skipif(not triton_available(), reason="lab 06's kernels need Triton (its interpreter on a CPU)")
def test_a_lab_06_kernels_hidden_failure_reads_in_chinese_too():
    """A kernel step's check: its case (the package's case description inside the check's own), problem and hint."""
    from autograder.labs.lab06_triton_paged_attention import checks
    from autograder.labs.lab06_triton_paged_attention.tests import bugs

    kernel, grid, _hint = bugs.STEP_BUGS["step1"][0]
    shown = {}
    for language in ("zh_CN", "en"):
        with speaking(language), pytest.raises(CheckFailed) as caught:
            checks.check_step1_gather(kernel, grid)
        shown[language] = caught.value
    for part in ("case", "problem", "hint"):
        assert is_chinese(getattr(shown["zh_CN"], part)), getattr(shown["zh_CN"], part)
    assert _verdict_text(shown["zh_CN"]).startswith("检查未通过 [")
    assert not CJK.search(_verdict_text(shown["en"]))
