"""The shared-system-prompt workload: caching skips prefill work and saves blocks; the baseline hits nothing."""

import pytest

from paged_kv import BlockManager
from paged_kv.lab.prefix_workload import replay, sweep, system_prompt_requests


def test_prefix_caching_skips_prefill_and_saves_blocks_against_the_baseline():
    requests = system_prompt_requests(40, num_system_prompts=2, system_len=64, seed=3)
    cached = replay(BlockManager, requests, num_blocks=200, block_size=16)
    baseline = replay(BlockManager, requests, num_blocks=200, block_size=16, prefix_caching=False)
    assert sum(baseline["cached_tokens"]) == 0
    assert sum(cached["cached_tokens"]) >= 30 * 64  # all but the first use of each system prompt, at least
    assert [c + k for c, k in zip(cached["cached_tokens"], cached["computed_tokens"])] == cached["prompt_tokens"]
    assert max(cached["blocks_in_use"]) < max(baseline["blocks_in_use"])


def test_a_longer_shared_prefix_serves_more_and_block_size_rounds_it_down():
    result = sweep(BlockManager, [0, 24, 136], [4, 64], num_requests=20)
    assert result[4][0] == 0.0 and result[4][0] < result[4][1] < result[4][2]
    assert result[64][1] == 0.0 < result[4][1]  # 24 shared tokens fill no 64-token block


def test_replay_rejects_a_request_that_cannot_fit():
    with pytest.raises(ValueError, match="does not fit"):
        replay(BlockManager, [([1] * 40, 1)], num_blocks=2, block_size=4)


def test_an_unwritten_todo_is_not_mistaken_for_out_of_memory():
    from paged_kv.lab.starters import BlockManagerWithoutPrefixCache

    with pytest.raises(NotImplementedError):
        replay(BlockManagerWithoutPrefixCache, system_prompt_requests(3), num_blocks=50, block_size=16)
