"""KVCacheManager: atomic prefill, boundary decode growth, release, logical reconstruction."""

import pytest
import torch

from paged_kv import KVCacheManager, Request, check_kv_manager


def snapshot(manager, *requests):
    return (list(manager.free_blocks), [(r.seq_len, list(r.block_table)) for r in requests])


@pytest.mark.parametrize(
    "bad, error",
    [
        ((-1, 2), ValueError),
        ((1, 0), ValueError),
        ((1, 2.0), TypeError),
        ((True, 3), TypeError),
        ((1, None), TypeError),
    ],
)
def test_request_rejects_bad_arguments(bad, error):
    with pytest.raises(error):
        Request(*bad)


@pytest.mark.parametrize("field", ["num_blocks", "block_size", "head_dim"])
@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (False, TypeError)])
def test_manager_rejects_bad_sizes_naming_the_argument(field, bad, error):
    args = dict(num_blocks=4, block_size=4, head_dim=8)
    args[field] = bad
    with pytest.raises(error, match=field):
        KVCacheManager(**args)


@pytest.mark.parametrize("prompt_len, blocks", [(1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_prefill_takes_ceil_of_prompt_over_block_size(prompt_len, blocks):
    manager = KVCacheManager(10, 4, 2)
    req = Request(0, prompt_len)
    manager.allocate_for_prefill(req)
    assert len(req.block_table) == blocks
    assert len(manager.free_blocks) == 10 - blocks
    check_kv_manager(manager, [req])


def test_prefill_oom_is_atomic_and_message_has_the_numbers():
    manager = KVCacheManager(3, 4, 2)
    first = Request(0, 5)
    manager.allocate_for_prefill(first)
    big = Request(1, 9)  # needs 3 blocks, 1 free
    before = snapshot(manager, first, big)
    with pytest.raises(RuntimeError, match=r"OOM.*3 free block.*only 1 of 3"):
        manager.allocate_for_prefill(big)
    assert snapshot(manager, first, big) == before


def test_prefill_fits_exactly_at_the_boundary():
    manager = KVCacheManager(2, 4, 2)
    req = Request(0, 8)
    manager.allocate_for_prefill(req)
    assert manager.free_blocks == [] and len(req.block_table) == 2


def test_prefill_twice_is_rejected_without_change():
    manager = KVCacheManager(4, 4, 2)
    req = Request(0, 5)
    manager.allocate_for_prefill(req)
    before = snapshot(manager, req)
    with pytest.raises(ValueError, match="already holds"):
        manager.allocate_for_prefill(req)
    assert snapshot(manager, req) == before


def test_prefill_rejects_non_request():
    with pytest.raises(TypeError, match="req"):
        KVCacheManager(4, 4, 2).allocate_for_prefill("request 0")


@pytest.mark.parametrize("block_size", [1, 2, 3, 4, 16])
def test_decode_allocates_exactly_when_a_token_enters_a_new_block(block_size):
    manager = KVCacheManager(64, block_size, 2)
    req = Request(0, 1)
    manager.allocate_for_prefill(req)
    for _ in range(40):
        blocks_before = len(req.block_table)
        manager.allocate_for_decode(req)
        starts_block = (req.seq_len - 1) % block_size == 0
        assert len(req.block_table) == blocks_before + starts_block, (block_size, req.seq_len)
        check_kv_manager(manager, [req])


def test_decode_with_block_size_one_takes_a_block_per_token():
    manager = KVCacheManager(5, 1, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    manager.allocate_for_decode(req)
    manager.allocate_for_decode(req)
    assert req.seq_len == 4 and len(req.block_table) == 4


def test_decode_oom_rolls_back_length_and_table():
    manager = KVCacheManager(1, 4, 2)
    req = Request(0, 4)
    manager.allocate_for_prefill(req)
    before = snapshot(manager, req)
    with pytest.raises(RuntimeError, match="OOM"):
        manager.allocate_for_decode(req)
    assert snapshot(manager, req) == before


def test_decode_before_prefill_is_rejected():
    with pytest.raises(ValueError, match="allocate_for_prefill"):
        KVCacheManager(2, 4, 2).allocate_for_decode(Request(0, 3))


@pytest.mark.parametrize("table, says", [([0], "1 too few"), ([0, 1, 2], "1 too many")])
def test_decode_says_which_way_a_mismatched_table_is_off(table, says):
    """A table that does not match seq_len is refused before anything changes, saying whether it holds too few
    blocks (a decode grew seq_len without its block) or too many (a block taken before the last one was full)."""
    manager = KVCacheManager(4, 4, 2)
    req = Request(0, 6)  # 6 tokens need 2 blocks of 4
    manager.allocate_for_prefill(req)
    req.block_table = list(table)
    with pytest.raises(ValueError, match=says):
        manager.allocate_for_decode(req)
    assert (req.seq_len, req.block_table) == (6, table)


def test_allocation_report_counts_tail_waste():
    manager = KVCacheManager(3, 4, 8)
    req = Request(0, 5)
    manager.allocate_for_prefill(req)
    assert manager.allocation_report(req) == {
        "logical_tokens": 5,
        "allocated_tokens": 8,
        "unused_tail_tokens": 3,
        "utilization": 0.625,
    }


def test_release_returns_blocks_sorted_and_refuses_double_release():
    manager = KVCacheManager(3, 4, 8)
    req = Request(0, 5)
    manager.allocate_for_prefill(req)
    manager.release_request(req)
    assert req.block_table == [] and manager.free_blocks == [0, 1, 2]
    with pytest.raises(ValueError, match="already released"):
        manager.release_request(req)


@pytest.mark.parametrize(
    "table, message", [([1, 1], "more than once"), ([0, 9], "out of range"), ([0, 2], "already free")]
)
def test_release_validates_table_before_changing_anything(table, message):
    manager = KVCacheManager(4, 4, 2)
    owner = Request(0, 5)
    manager.allocate_for_prefill(owner)  # holds 0, 1
    forged = Request(1, 5)
    forged.block_table = list(table)
    before = snapshot(manager, owner, forged)
    with pytest.raises(ValueError, match=message):
        manager.release_request(forged)
    assert snapshot(manager, owner, forged) == before


def test_released_blocks_are_reused_by_the_next_request():
    manager = KVCacheManager(4, 2, 2)
    a, b = Request(0, 4), Request(1, 4)
    manager.allocate_for_prefill(a)
    manager.allocate_for_prefill(b)
    manager.release_request(a)
    c = Request(2, 3)
    manager.allocate_for_prefill(c)
    assert sorted(c.block_table) == [0, 1]
    check_kv_manager(manager, [b, c])


def test_get_physical_cache_follows_the_table_not_physical_order():
    manager = KVCacheManager(5, 2, 3)
    for block_id in range(5):
        manager.physical_kv_cache[block_id] = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * block_id
    req = Request(0, 5)
    req.block_table = [4, 0, 2]
    cache = manager.get_physical_cache(req)
    expected = torch.cat([manager.physical_kv_cache[4], manager.physical_kv_cache[0], manager.physical_kv_cache[2]])[:5]
    assert cache.shape == (5, 3)
    assert torch.equal(cache, expected)


def test_get_physical_cache_returns_a_copy():
    manager = KVCacheManager(2, 2, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    cache = manager.get_physical_cache(req)
    cache.fill_(7.0)
    assert manager.physical_kv_cache.abs().sum() == 0


@pytest.mark.parametrize(
    "table, error", [([], ValueError), ([5], ValueError), ([0, 0], ValueError), ([0.0], TypeError), ([0], ValueError)]
)
def test_get_physical_cache_rejects_bad_tables(table, error):
    manager = KVCacheManager(5, 2, 2)
    req = Request(0, 3)
    req.block_table = list(table)
    with pytest.raises(error):
        manager.get_physical_cache(req)


def test_get_physical_cache_has_no_python_loop_over_blocks():
    import inspect

    from paged_kv.cache import manager as module

    source = inspect.getsource(module.KVCacheManager.get_physical_cache)
    assert "for " not in source.split('"""')[-1], "reconstruction must be one gather, not a loop"
