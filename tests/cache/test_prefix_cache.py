"""BlockManager: chained hashes, prefix sharing, ref counts, O(1) free queue, nano-vllm parity."""

import random

import numpy as np
import pytest
import xxhash

from nanovllm_oracle import OraclePool
from paged_kv import Block, BlockManager, FreeBlockQueue, Sequence, check_block_manager, decode_step, prefill


def test_compute_hash_is_xxh64_of_prefix_then_int64_tokens():
    tokens = [1, 2, 3, 4]
    first = BlockManager.compute_hash(tokens)
    assert first == xxhash.xxh64(np.array(tokens, dtype=np.int64).tobytes()).intdigest()
    second = BlockManager.compute_hash([5, 6], first)
    assert second == xxhash.xxh64(first.to_bytes(8, "little") + np.array([5, 6], dtype=np.int64).tobytes()).intdigest()


def test_hash_chain_depends_on_the_whole_prefix():
    a = BlockManager.compute_hash([9, 9], BlockManager.compute_hash([1, 2]))
    b = BlockManager.compute_hash([9, 9], BlockManager.compute_hash([2, 1]))
    assert a != b


def test_sequence_blocks_and_lengths():
    seq = Sequence(list(range(10)), block_size=4)
    assert len(seq) == 10 and seq.num_blocks == 3 and seq.last_block_num_tokens == 2
    assert seq.block(2) == [8, 9]
    seq.append_token(42)
    assert len(seq) == 11 and seq.token_ids[-1] == 42
    with pytest.raises(IndexError):
        seq.block(3)


@pytest.mark.parametrize(
    "bad, error",
    [([], ValueError), ([1, -2], ValueError), ([1, 2.5], TypeError), ("abc", TypeError), ([True], TypeError)],
)
def test_sequence_rejects_bad_tokens(bad, error):
    with pytest.raises(error):
        Sequence(bad, block_size=4)


def test_sequence_block_size_must_match_the_manager():
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(8, 4).can_allocate(Sequence([1, 2, 3], block_size=2))


def test_shared_prefix_is_reused_and_ref_counted():
    manager = BlockManager(10, 4)
    prompt = list(range(12))
    a = Sequence(prompt + [100], block_size=4)
    b = Sequence(prompt + [200, 201], block_size=4)
    assert prefill(manager, a) == 0
    assert manager.can_allocate(b) == 3
    assert prefill(manager, b) == 3
    assert a.block_table[:3] == b.block_table[:3]
    assert a.block_table[3] != b.block_table[3]
    assert b.num_cached_tokens == len(b)
    assert [manager.blocks[i].ref_count for i in a.block_table[:3]] == [2, 2, 2]
    check_block_manager(manager, [a, b])
    manager.deallocate(a)
    assert [manager.blocks[i].ref_count for i in b.block_table[:3]] == [1, 1, 1]
    check_block_manager(manager, [b])


def test_last_block_is_never_served_from_cache():
    manager = BlockManager(8, 4)
    a = Sequence(list(range(8)), block_size=4)
    prefill(manager, a)
    b = Sequence(list(range(8)), block_size=4)
    assert manager.can_allocate(b) == 1  # two full blocks cached, only the first may be reused


def test_freed_block_keeps_its_hash_until_reused():
    manager = BlockManager(4, 2)
    a = Sequence([1, 2, 3, 4, 5], block_size=2)
    prefill(manager, a)
    first_blocks = list(a.block_table[:2])
    manager.deallocate(a)
    b = Sequence([1, 2, 3, 4, 9], block_size=2)
    assert manager.can_allocate(b) == 2
    prefill(manager, b)
    assert b.block_table[:2] == first_blocks
    check_block_manager(manager, [b])


def test_reallocating_a_cached_block_drops_its_stale_hash():
    manager = BlockManager(2, 2)
    a = Sequence([1, 2, 3], block_size=2)
    prefill(manager, a)
    manager.deallocate(a)
    filler = Sequence([7, 8, 9, 10], block_size=2)  # takes both blocks, overwriting their content
    prefill(manager, filler)
    manager.deallocate(filler)
    again = Sequence([1, 2, 3], block_size=2)
    assert manager.can_allocate(again) == 0
    check_block_manager(manager, [])


def test_allocate_with_cached_blocks_starts_the_chain_fresh():
    """The seed's listing leaves ``h`` unset in allocate; here it must work and hit the cache."""
    manager = BlockManager(8, 2)
    prefill(manager, Sequence([5, 6, 7, 8, 9], block_size=2))
    seq = Sequence([5, 6, 7, 8, 1], block_size=2)
    hits = manager.can_allocate(seq)
    assert hits == 2
    manager.allocate(seq, hits)
    assert seq.num_cached_tokens == 4


def test_allocate_with_a_wrong_hit_count_changes_nothing():
    manager = BlockManager(8, 2)
    seq = Sequence([1, 2, 3, 4, 5], block_size=2)
    free_before = list(manager.free_block_ids)
    with pytest.raises(ValueError, match="not in the prefix cache"):
        manager.allocate(seq, 1)
    with pytest.raises(ValueError, match="at most 2"):
        manager.allocate(seq, 3)
    assert list(manager.free_block_ids) == free_before and seq.block_table == []


def test_allocate_oom_is_atomic():
    manager = BlockManager(2, 2)
    seq = Sequence([1, 2, 3, 4, 5], block_size=2)
    assert manager.can_allocate(seq) == -1
    with pytest.raises(RuntimeError, match="OOM"):
        manager.allocate(seq, 0)
    assert list(manager.free_block_ids) == [0, 1] and seq.block_table == []
    check_block_manager(manager, [])


@pytest.mark.parametrize("block_size", [1, 2, 3, 16])
def test_decode_grows_exactly_at_block_boundaries(block_size):
    manager = BlockManager(64, block_size)
    seq = Sequence([3], block_size=block_size)
    prefill(manager, seq)
    for token in range(40):
        before = len(seq.block_table)
        decode_step(manager, seq, token)
        starts_block = (len(seq) - 1) % block_size == 0
        assert len(seq.block_table) == before + starts_block
        check_block_manager(manager, [seq])


def test_block_size_one_gets_a_block_for_every_decoded_token():
    manager = BlockManager(4, 1)
    seq = Sequence([1], block_size=1)
    prefill(manager, seq)
    seq.append_token(2)
    assert manager.can_append(seq) is True
    manager.may_append(seq)
    assert len(seq.block_table) == 2


def test_may_append_oom_leaves_everything_as_it_was():
    manager = BlockManager(1, 2)
    seq = Sequence([1, 2], block_size=2)
    prefill(manager, seq)
    seq.append_token(3)
    assert manager.can_append(seq) is False
    with pytest.raises(RuntimeError, match="OOM"):
        manager.may_append(seq)
    assert seq.block_table == [0]


def test_decode_step_oom_and_misuse_roll_back_the_token():
    manager = BlockManager(1, 2)
    seq = Sequence([1, 2], block_size=2)
    prefill(manager, seq)
    with pytest.raises(RuntimeError, match="OOM"):
        decode_step(manager, seq, 3)
    assert seq.token_ids == [1, 2] and seq.block_table == [0] and seq.num_cached_tokens == 2
    fresh = Sequence([1], block_size=2)
    with pytest.raises(ValueError, match="call allocate first"):
        decode_step(manager, fresh, 5)
    assert fresh.token_ids == [1]


def test_deallocate_twice_is_rejected():
    manager = BlockManager(4, 2)
    seq = Sequence([1, 2, 3], block_size=2)
    prefill(manager, seq)
    manager.deallocate(seq)
    with pytest.raises(ValueError, match="already deallocated"):
        manager.deallocate(seq)


def test_freeing_a_block_that_is_still_held_or_already_free_says_which_and_changes_nothing():
    """The given ``_deallocate_block`` that students call from their ``deallocate``: a clear error, not a bare assert."""
    manager = BlockManager(4, 2)
    a, b = Sequence([1, 2, 3], block_size=2), Sequence([1, 2, 4], block_size=2)
    prefill(manager, a)
    prefill(manager, b)  # block 0 is shared: ref count 2
    manager.blocks[0].ref_count -= 1  # a deallocate that frees at every decrement would now call this
    with pytest.raises(
        ValueError,
        match=r"block 0 still has ref_count 1; free a block only when its ref_count "
        r"reaches 0",
    ):
        manager._deallocate_block(0)
    assert 0 in manager.used_block_ids and 0 not in manager.free_block_ids
    with pytest.raises(ValueError, match="block 3 is already free"):
        manager._deallocate_block(3)
    assert list(manager.free_block_ids) == [3]


def test_deallocate_of_a_forged_table_changes_nothing():
    manager = BlockManager(4, 2)
    seq = Sequence([1, 2, 3], block_size=2)
    prefill(manager, seq)
    forged = Sequence([1, 2, 3], block_size=2)
    forged.block_table = [seq.block_table[0], 3]  # block 3 is free
    counts = manager.ref_counts()
    with pytest.raises(ValueError, match="no owner"):
        manager.deallocate(forged)
    assert manager.ref_counts() == counts


def test_free_queue_is_ordered_and_o1():
    queue = FreeBlockQueue(range(5))
    queue.remove(2)
    queue.append(2)
    assert queue.popleft() == 0 and list(queue) == [1, 3, 4, 2] and queue[0] == 1
    with pytest.raises(ValueError):
        queue.append(3)
    with pytest.raises(ValueError):
        queue.remove(0)
    with pytest.raises(IndexError):
        FreeBlockQueue().popleft()


def test_block_manager_source_has_no_deque_remove():
    import inspect

    from paged_kv.cache import prefix_cache

    assert "deque" not in inspect.getsource(prefix_cache.BlockManager)


def test_block_reset_and_update():
    block = Block(3)
    block.update(123, [1, 2])
    assert (block.hash, block.token_ids) == (123, [1, 2])
    block.reset()
    assert (block.ref_count, block.hash, block.token_ids) == (1, -1, [])


@pytest.mark.parametrize("block_size", [1, 2, 4])
@pytest.mark.parametrize("seed", range(6))
def test_block_tables_equal_nano_vllm_policy_on_random_traces(block_size, seed):
    rng = random.Random(seed)
    manager, oracle = BlockManager(24, block_size), OraclePool(24, block_size)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(1, 9))] for _ in range(3)]
    live = []  # (Sequence, oracle table, oracle tokens)
    for _ in range(120):
        action = rng.random()
        if action < 0.4:
            tokens = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(0, 6))]
            seq = Sequence(tokens, block_size=block_size)
            table = oracle.admit(list(tokens))
            try:
                prefill(manager, seq)
            except RuntimeError:
                assert table is None
                continue
            assert seq.block_table == table
            live.append((seq, table, list(tokens)))
        elif action < 0.8 and live:
            seq, table, tokens = rng.choice(live)
            token = rng.randrange(50)
            tokens.append(token)
            grew = oracle.grow(tokens, table)
            try:
                decode_step(manager, seq, token)
            except RuntimeError:
                assert not grew
                tokens.pop()
                continue
            assert seq.block_table == table
        elif live:
            seq, table, _ = live.pop(rng.randrange(len(live)))
            manager.deallocate(seq)
            oracle.release(table)
        assert list(manager.free_block_ids) == list(oracle.free)
        check_block_manager(manager, [s for s, _, _ in live])


@pytest.mark.parametrize(
    "tokens, prefix, error",
    [
        ([1.5, 2.0], -1, TypeError),
        ([1, -3], -1, ValueError),
        ([[1, 2]], -1, TypeError),
        ([1, 2], 2**64, ValueError),
        ([1, 2], True, TypeError),
        ([True, False], -1, TypeError),
    ],
)
def test_compute_hash_rejects_bad_input(tokens, prefix, error):
    with pytest.raises(error):
        BlockManager.compute_hash(tokens, prefix)


def test_free_queue_rejects_non_int_ids():
    queue = FreeBlockQueue(range(3))
    with pytest.raises(TypeError):
        queue.remove(True)
    with pytest.raises(ValueError):
        FreeBlockQueue([1, 1])


def test_steps_reject_a_wrong_manager():
    with pytest.raises(TypeError, match="manager"):
        prefill("not a manager", Sequence([1], block_size=2))


def test_sequence_accepts_numpy_ids_as_plain_ints_and_names_the_first_bad_token():
    seq = Sequence(np.arange(5), block_size=4)
    assert seq.token_ids == [0, 1, 2, 3, 4] and {type(t) for t in seq.token_ids} == {int}
    with pytest.raises(ValueError, match=r"token_ids\[2\]"):
        Sequence([4, 5, -1, 7], block_size=4)
    with pytest.raises(TypeError, match=r"token_ids\[1\]"):
        Sequence((4, "5"), block_size=4)
