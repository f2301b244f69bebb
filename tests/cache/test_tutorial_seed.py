"""The tutorial's own tests pass, unchanged, against paged_kv."""

import paged_kv
from tutorial_seed import run_tutorial_tests, tutorial_test_source


def test_tutorial_block_is_found(seeds_dir):
    source = tutorial_test_source(seeds_dir)
    assert "def test_oom_is_atomic" in source and source.rstrip().endswith("test_paged_attention_manager()")


def test_tutorial_tests_pass_against_paged_kv(seeds_dir, capsys):
    run_tutorial_tests(
        seeds_dir,
        {
            "Request": paged_kv.Request,
            "KVCacheManager": paged_kv.KVCacheManager,
            "estimate_kv_cache_bytes": paged_kv.estimate_kv_cache_bytes,
        },
    )
    assert "All Tests Passed" in capsys.readouterr().out
