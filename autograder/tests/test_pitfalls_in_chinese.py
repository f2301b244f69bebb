"""A student who types a listed pitfall into a Chinese notebook's TODO gets the message in Chinese.

The code cells of the Chinese notebooks are the English release's, byte for byte (``course/zh_CN/``: only the
markdown and one setup line, ``set_language("zh_CN")``, differ), so each lab's listed pitfalls are typed in as
``test_pitfalls`` (labs 01-05, 07, 08), ``test_lab06_graders`` (lab 06's kernels) and ``test_lab09_checks``
(lab 09) do, run with the notebook's language set to Chinese: the visible test must fail with one block whose
header, case, problem and hint are Chinese (the case and hint a code cell passes, translated from its lab's
catalog; the problem, the feedback's or the helper's own wording); lab 09's hint is its rule's, in Chinese.
"""

from __future__ import annotations

import re

import pytest

from paged_kv.kernels.triton_mode import triton_available
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.i18n import speaking
from test_pitfalls import KERNEL_PITFALLS, pitfall_params, run_visible_test

CHINESE = re.compile("[\u4e00-\u9fff]")
CODE = re.compile(r"\S*[_.(\[\]0-9=]\S*")  # a token with code in it: an identifier, a call, a list, a number


def is_chinese(text: str) -> bool:
    """Chinese, or code alone (``compute_hash([1, 2, 3, 4])`` reads the same in every language)."""
    return bool(CHINESE.search(text)) or not any(len(word) > 2 for word in CODE.sub(" ", text).split())


def assert_chinese(failed: CheckFailed) -> None:
    """One block of a few lines, its header, case, problem and hint in Chinese."""
    rendered = failed._render_traceback_()
    assert 2 <= len(rendered) <= 6, rendered
    assert "检查未通过" in rendered[0], rendered
    for part in ("case", "problem", "hint"):
        assert is_chinese(getattr(failed, part)), f"the {part} is not Chinese: {getattr(failed, part)!r}"


@pytest.mark.parametrize("lab, title, edits", pitfall_params())
def test_each_listed_pitfall_fails_a_chinese_notebooks_visible_test_in_chinese(lab, title, edits, capsys):
    with speaking("zh_CN"), pytest.raises(CheckFailed) as caught:
        run_visible_test(lab, edits)
    assert "Visible tests passed." not in capsys.readouterr().out
    assert_chinese(caught.value)


def _lab06_kernel_pitfalls():
    if not triton_available():
        return []
    from autograder.labs.lab06_triton_paged_attention.tests import bugs as catalogue

    params = []
    for title, names in KERNEL_PITFALLS.items():
        step, kernel, grid = next(
            (step, kernel, grid)
            for step, bugs in catalogue.STEP_BUGS.items()
            for kernel, grid, _ in bugs
            if kernel.__name__ in names
            and kernel.__name__ not in catalogue.HIDDEN_ONLY
            and grid is not catalogue.per_query_head_grid
        )
        params.append(pytest.param(step, kernel, grid, id=f"06-{title}"))
    return params


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.parametrize("step, kernel, grid", _lab06_kernel_pitfalls())
def test_each_listed_kernel_pitfall_of_lab_06_fails_in_chinese(step, kernel, grid):
    from autograder.labs.lab06_triton_paged_attention.tests.test_lab06_graders import STEPS, notebook, visible_cell
    from autograder.course.layout import SOURCE_DIR

    namespace = dict(notebook(SOURCE_DIR))
    _, kernel_name, grid_name = STEPS[step]
    namespace[kernel_name] = kernel
    if grid_name:
        namespace[grid_name] = grid
    with speaking("zh_CN"), pytest.raises(CheckFailed) as caught:
        exec(visible_cell(step), namespace)
    assert_chinese(caught.value)


def _lab09_pitfalls():
    from autograder.labs.lab09_chunked_prefill.tests.test_lab09_checks import VISIBLE_MUST_CATCH

    return [
        pytest.param(bug, id=f"09-{pitfall}-{bug}")
        for pitfall, bugs in sorted(VISIBLE_MUST_CATCH.items())
        for bug in bugs
    ]


@pytest.mark.parametrize("bug", _lab09_pitfalls())
def test_each_listed_pitfall_of_lab_09_fails_in_chinese_naming_its_rule(bug):
    from autograder.labs.lab09_chunked_prefill.tests import bugs
    from autograder.labs.lab09_chunked_prefill.tests.test_lab09_checks import run_visible_cell
    from paged_kv.lab.chunked_rules import HINTS
    from paged_kv.lab.i18n import translate

    with speaking("zh_CN"), pytest.raises(CheckFailed) as caught:
        run_visible_cell(bugs.bug_class(bug))
    assert_chinese(caught.value)
    with speaking("zh_CN"):
        rule_hint = translate(HINTS[bugs.RULES[bug]])
    assert rule_hint != HINTS[bugs.RULES[bug]] and caught.value.hint == rule_hint, caught.value
    assert "步" in caught.value.case, caught.value  # the case names the step, in Chinese
