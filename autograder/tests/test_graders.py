"""Graders grade: the solution passes, the untouched release fails, every catalogued bug fails, correct
variants pass, and no TODO can be passed by delegating to the reference or by doctored objects."""

import inspect

import pytest

import importlib

from autograder import labs as course_labs
from autograder.course.layout import RELEASE_DIR, SOURCE_DIR, LABS as NOTEBOOKS
from doctored import AgreeableList, AlwaysEqual
from notebook_code import namespace_after_answer
from autograder.labs.lab01_capacity_ledger.tests import bugs as ledger_bugs
from autograder.labs.lab03_decode_growth.tests import bugs as decode_bugs
from paged_kv.lab.starters import KVCacheManagerWithoutDecode, KVCacheManagerWithoutPrefill


def grader_checks(module):
    return [
        f
        for name, f in inspect.getmembers(module, inspect.isfunction)
        if name.startswith("check_") and f.__module__ == module.__name__
    ]


def _catalogued(lab):
    """``(checks module, folder, TODO object, bugs, variants, TODO method)`` for a one-part lab whose
    ``tests/bugs.py`` lists ``BUGS`` and ``VARIANTS`` as implementations (the multi-part labs 05 and 08 and
    lab 06's kernels have tests of their own in their folders)."""
    if len(lab.parts) != 1:
        return None
    try:
        catalogue = importlib.import_module(f"autograder.labs.{course_labs.package_name(lab.lab)}.tests.bugs")
    except ModuleNotFoundError:
        return None
    found = [getattr(catalogue, name, None) for name in ("BUGS", "VARIANTS")]
    if any(v is None for v in found):
        return None
    as_list = [list(v.values()) if isinstance(v, dict) else list(v) for v in found]
    return (
        importlib.import_module(course_labs.checks_module(lab.lab)),
        lab.lab,
        lab.todo_object,
        *as_list,
        lab.todo_method,
    )


# "lab01": (checks module, notebook folder, the notebook's TODO object, bugs, variants, TODO method or None)
LABS = {f"lab{lab.lab[:2]}": entry for lab in course_labs.LABS if (entry := _catalogued(lab)) is not None}
lab01_ledger, lab02_prefill, lab03_decode = (LABS[k][0] for k in ("lab01", "lab02", "lab03"))
_namespaces = {}


def notebook_object(folder, lab, name):
    key = (folder, lab)
    if key not in _namespaces:
        _namespaces[key] = namespace_after_answer(folder / lab / NOTEBOOKS[lab])
    return _namespaces[key][name]


def params(kind):
    out = []
    for lab, (module, folder, name, bug_list, variants, _) in LABS.items():
        for check in grader_checks(module):
            if kind in ("solution", "untouched"):
                out.append(pytest.param(check, folder, name, id=f"{lab}-{check.__name__}"))
            else:
                for variant in variants:
                    out.append(
                        pytest.param(check, variant, id=f"{lab}-{check.__name__}-{getattr(variant, '__name__', 'v')}")
                    )
    return out


def test_every_check_declares_the_todo_it_grades():
    for module, *_ in LABS.values():
        for check in grader_checks(module):
            assert getattr(check, "__grades__", None), f"{module.__name__}.{check.__name__} lacks @grades(...)"


@pytest.mark.parametrize("check, lab, name", params("solution"))
def test_solution_gets_full_marks(check, lab, name):
    check(notebook_object(SOURCE_DIR, lab, name))


@pytest.mark.parametrize("check, lab, name", params("untouched"))
def test_untouched_release_gets_zero(check, lab, name):
    with pytest.raises(NotImplementedError):
        check(notebook_object(RELEASE_DIR, lab, name))


@pytest.mark.parametrize("check, implementation", params("variant"))
def test_correct_variants_written_differently_get_full_marks(check, implementation):
    check(implementation)


def bug_params():
    out = []
    for lab, (module, _, _, bug_list, _, _) in LABS.items():
        for i, bug in enumerate(bug_list):
            out.append(pytest.param(module, bug, id=f"{lab}-{getattr(bug, '__name__', i)}"))
    return out


def failures(module, implementation):
    """{check name: first line of its message} for every check that fails; NotImplementedError counts."""
    failed = {}
    for check in grader_checks(module):
        try:
            check(implementation)
        except NotImplementedError as error:
            failed[check.__name__] = f"NotImplementedError: {error}"
        except AssertionError as error:
            failed[check.__name__] = str(error).splitlines()[0]
    return failed


@pytest.mark.parametrize("module, bug", bug_params())
def test_every_catalogued_bug_loses_points(module, bug):
    failed = failures(module, bug)
    assert failed, f"{bug} passed every check of {module.__name__}"
    for message in failed.values():
        assert message.startswith("["), f"feedback should name the failing case: {message}"


def test_ledger_bug_names_are_distinct_functions():
    assert len(set(map(id, ledger_bugs.BUGS.values()))) == len(ledger_bugs.BUGS)


# -- delegation ------------------------------------------------------------------------------------------
# Delegation is read from the submitted text, not caught while running: every form of it is in
# test_provenance.py. What the running code can show is that super() reaches a stub.
@pytest.mark.parametrize("method", ["allocate_for_prefill", "allocate_for_decode", "get_physical_cache"])
def test_super_reaches_a_stub_not_the_reference(method):
    from paged_kv.lab import starters

    starter = next(
        s
        for s in (
            starters.KVCacheManagerWithoutPrefill,
            starters.KVCacheManagerWithoutDecode,
            starters.KVCacheManagerWithoutReconstruction,
        )
        if method in s.__todo__
    )
    namespace = {}
    exec(
        f"class UsesSuper(starter):\n    def {method}(self, req):\n        return super().{method}(req)\n",
        {"starter": starter},
        namespace,
    )
    module = next(m for m, _, _, _, _, name in LABS.values() if name == method)
    failed = failures(module, namespace["UsesSuper"])
    assert set(failed) == {c.__name__ for c in grader_checks(module)}
    assert all(message.startswith("NotImplementedError") for message in failed.values()), failed


# -- doctored objects ------------------------------------------------------------------------------------
def _doctored_ledger(*args):
    return {key: AlwaysEqual(0) for key in ("kv_bytes_per_token", "kv_bytes_per_block", "total_cache_bytes")} | {
        "layout_shape": AgreeableList()
    }


class DoctoredPrefill(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        req.block_table = AgreeableList([AlwaysEqual(0)])


class DoctoredDecode(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        req.seq_len = AlwaysEqual(req.seq_len)


@pytest.mark.parametrize(
    "module, implementation",
    [(lab01_ledger, _doctored_ledger), (lab02_prefill, DoctoredPrefill), (lab03_decode, DoctoredDecode)],
    ids=["lab01-always-equal-ints", "lab02-agreeable-table", "lab03-always-equal-length"],
)
def test_objects_that_claim_equality_do_not_pass(module, implementation):
    failed = failures(module, implementation)
    assert set(failed) == {c.__name__ for c in grader_checks(module)}, failed


# -- the feedback a student reads --------------------------------------------------------------------
def _check_failures(module, implementation):
    from paged_kv.lab.feedback import CheckFailed

    out = []
    for check in grader_checks(module):
        try:
            check(implementation)
        except CheckFailed as failure:
            out.append(failure)
        except AssertionError as other:  # pragma: no cover - reported below
            raise AssertionError(f"{check.__name__} failed with a bare AssertionError, not a CheckFailed: {other}")
    return out


@pytest.mark.parametrize("module, bug", bug_params())
def test_every_grader_failure_is_one_block_with_values_or_a_hint(module, bug):
    for failure in _check_failures(module, bug):
        rendered = failure._render_traceback_()
        assert len(rendered) <= 6, rendered
        assert failure.hint or (failure.expected is not failure.got), f"no hint and no values: {failure}"
        assert "Traceback" not in str(failure)


@pytest.mark.parametrize("bug", decode_bugs.BUGS, ids=lambda b: b.__name__)
def test_lab03_feedback_numbers_positions_from_zero(bug):
    import re

    for failure in _check_failures(lab03_decode, bug):
        text = str(failure)
        assert not re.search(r"\btoken \d+\b", text), f"1-based token numbering in: {text}"
        if "position" in text:
            assert "(0-based)" in text, text
