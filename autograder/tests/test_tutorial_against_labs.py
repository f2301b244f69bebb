"""The tutorial's own tests pass against each lab's solution (its student-written piece plugged in)."""

import pytest

import paged_kv
from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from notebook_code import namespace_after_answer
from tutorial_seed import run_tutorial_tests

WHAT_THE_LAB_WRITES = {
    "01-capacity-ledger": "estimate_kv_cache_bytes",
    "02-atomic-prefill": "KVCacheManager",
    "03-decode-growth": "KVCacheManager",
    "04-logical-reconstruction": "KVCacheManager",
}


@pytest.mark.parametrize("lab", sorted(WHAT_THE_LAB_WRITES))
def test_tutorial_tests_pass_against_lab_solution(lab, seeds_dir, capsys):
    namespace = namespace_after_answer(SOURCE_DIR / lab / LABS[lab])
    names = {
        "Request": paged_kv.Request,
        "KVCacheManager": paged_kv.KVCacheManager,
        "estimate_kv_cache_bytes": paged_kv.estimate_kv_cache_bytes,
    }
    name = WHAT_THE_LAB_WRITES[lab]
    assert namespace[name] is not names[name], f"{lab} should define its own {name}"
    names[name] = namespace[name]
    run_tutorial_tests(seeds_dir, names)
    assert "All Tests Passed" in capsys.readouterr().out


@pytest.mark.parametrize("lab", sorted(WHAT_THE_LAB_WRITES))
def test_tutorial_tests_fail_against_the_untouched_release(lab, seeds_dir):
    namespace = namespace_after_answer(RELEASE_DIR / lab / LABS[lab])
    names = {
        "Request": paged_kv.Request,
        "KVCacheManager": paged_kv.KVCacheManager,
        "estimate_kv_cache_bytes": paged_kv.estimate_kv_cache_bytes,
    }
    names[WHAT_THE_LAB_WRITES[lab]] = namespace[WHAT_THE_LAB_WRITES[lab]]
    with pytest.raises(NotImplementedError):
        run_tutorial_tests(seeds_dir, names)
