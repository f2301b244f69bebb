"""Graders grade: the reference passes, stubs fail, every catalogued bug fails, correct variants pass."""
import inspect

import pytest

import paged_kv
from autograder.graders import lab01_ledger, lab02_prefill, lab03_decode, lab04_reconstruction
import bug_catalogue as bugs


def grader_checks(module):
    return [f for name, f in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("check_") and f.__module__ == module.__name__]


LABS = {
    "lab01": (lab01_ledger, paged_kv.estimate_kv_cache_bytes, list(bugs.LEDGER_BUGS.values()),
              list(bugs.LEDGER_VARIANTS.values())),
    "lab02": (lab02_prefill, paged_kv.KVCacheManager, bugs.PREFILL_BUGS, bugs.PREFILL_VARIANTS),
    "lab03": (lab03_decode, paged_kv.KVCacheManager, bugs.DECODE_BUGS, bugs.DECODE_VARIANTS),
    "lab04": (lab04_reconstruction, paged_kv.KVCacheManager, bugs.RECONSTRUCTION_BUGS, bugs.RECONSTRUCTION_VARIANTS),
}


def stub_for(lab):
    def stub(*args, **kwargs):
        raise NotImplementedError()
    if lab == "lab01":
        return stub
    method = {"lab02": "allocate_for_prefill", "lab03": "allocate_for_decode", "lab04": "get_physical_cache"}[lab]
    return type("Stub", (paged_kv.KVCacheManager,), {method: lambda self, req: stub()})


def params(kind):
    out = []
    for lab, (module, reference, bug_list, variants) in LABS.items():
        for check in grader_checks(module):
            if kind == "reference":
                out.append(pytest.param(check, reference, id=f"{lab}-{check.__name__}"))
            elif kind == "stub":
                out.append(pytest.param(check, stub_for(lab), id=f"{lab}-{check.__name__}"))
            elif kind == "variant":
                for variant in variants:
                    out.append(pytest.param(check, variant, id=f"{lab}-{check.__name__}-{getattr(variant, '__name__', 'v')}"))
    return out


@pytest.mark.parametrize("check, implementation", params("reference"))
def test_reference_gets_full_marks(check, implementation):
    check(implementation)


@pytest.mark.parametrize("check, implementation", params("stub"))
def test_untouched_stub_gets_zero(check, implementation):
    with pytest.raises(NotImplementedError):
        check(implementation)


@pytest.mark.parametrize("check, implementation", params("variant"))
def test_correct_variants_written_differently_get_full_marks(check, implementation):
    check(implementation)


def bug_params():
    out = []
    for lab, (module, _, bug_list, _) in LABS.items():
        for i, bug in enumerate(bug_list):
            out.append(pytest.param(module, bug, id=f"{lab}-{getattr(bug, '__name__', i)}"))
    return out


@pytest.mark.parametrize("module, bug", bug_params())
def test_every_catalogued_bug_loses_points(module, bug):
    failed = []
    for check in grader_checks(module):
        try:
            check(bug)
        except AssertionError as error:
            failed.append(check.__name__)
            assert str(error).startswith("["), f"feedback should name the failing case: {error}"
    assert failed, f"{bug} passed every check of {module.__name__}"


def test_ledger_bug_names_are_distinct_functions():
    assert len(set(map(id, bugs.LEDGER_BUGS.values()))) == len(bugs.LEDGER_BUGS)
