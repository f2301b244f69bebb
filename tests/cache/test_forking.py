"""Forked sequences share blocks, copy the shared last block on write, and free blocks at zero references.

The property test plays random beam-search-like traces (fork, append, prune) against a model of the
physical pool that performs the recorded copies and the writes: every live sequence must read back its
own tokens after every step, and the pool's invariants must hold.
"""

from __future__ import annotations

import random

import pytest

from paged_kv.cache.forking import ForkingBlockManager
from paged_kv.cache.invariants import check_block_manager
from paged_kv.cache.prefix_cache import Sequence


def _computed(manager: ForkingBlockManager, seq: Sequence, new: int) -> None:
    """The step computed the last ``new`` tokens of ``seq``: hash the blocks they filled."""
    seq.num_cached_tokens, seq.num_scheduled_tokens = len(seq) - new, new
    manager.hash_blocks(seq)
    seq.num_cached_tokens, seq.num_scheduled_tokens = len(seq), 0


def _started(manager: ForkingBlockManager, tokens) -> Sequence:
    seq = Sequence(list(tokens), manager.block_size)
    manager.allocate(seq, manager.can_allocate(seq))
    _computed(manager, seq, len(seq))  # its prefill ran
    return seq


def test_fork_shares_every_block_and_copies_nothing():
    manager = ForkingBlockManager(num_blocks=8, block_size=4)
    parent = _started(manager, range(6))
    free = manager.num_free_blocks
    child = manager.fork(parent)
    assert child.block_table == parent.block_table and child.seq_id != parent.seq_id
    assert child.token_ids == parent.token_ids and child.token_ids is not parent.token_ids
    assert [manager.blocks[b].ref_count for b in parent.block_table] == [2, 2]
    assert manager.num_free_blocks == free and manager.take_copies() == []
    check_block_manager(manager, [parent, child])


def test_appending_to_a_shared_partial_block_copies_it_once():
    manager = ForkingBlockManager(num_blocks=8, block_size=4)
    parent = _started(manager, range(6))
    child = manager.fork(parent)
    child.append_token(100)
    manager.may_append(child)
    shared = parent.block_table[-1]
    assert child.block_table[0] == parent.block_table[0] and child.block_table[-1] != shared
    assert manager.take_copies() == [(shared, child.block_table[-1])]
    assert manager.blocks[shared].ref_count == 1 and manager.blocks[child.block_table[-1]].ref_count == 1
    parent.append_token(200)
    manager.may_append(parent)  # now the parent owns its last block alone: it writes in place
    assert parent.block_table[-1] == shared and manager.take_copies() == []
    check_block_manager(manager, [parent, child])


def test_a_token_that_starts_a_block_takes_a_fresh_block_and_no_copy():
    manager = ForkingBlockManager(num_blocks=8, block_size=4)
    parent = _started(manager, range(8))  # two full blocks
    child = manager.fork(parent)
    child.append_token(100)
    manager.may_append(child)
    assert child.block_table[:2] == parent.block_table and len(child.block_table) == 3
    assert manager.take_copies() == []
    check_block_manager(manager, [parent, child])


def test_block_size_one_never_copies():
    manager = ForkingBlockManager(num_blocks=8, block_size=1)
    parent = _started(manager, range(3))
    child = manager.fork(parent)
    child.append_token(7)
    manager.may_append(child)
    assert len(child.block_table) == 4 and manager.take_copies() == []


def test_copy_on_write_out_of_blocks_changes_nothing():
    manager = ForkingBlockManager(num_blocks=2, block_size=4)
    parent = _started(manager, range(6))  # both blocks used
    child = manager.fork(parent)
    child.append_token(100)
    before = (list(child.block_table), manager.ref_counts(), list(manager.free_block_ids))
    assert not manager.can_append(child)
    with pytest.raises(RuntimeError, match="OOM.*copy of its shared last block"):
        manager.may_append(child)
    assert (list(child.block_table), manager.ref_counts(), list(manager.free_block_ids)) == before
    assert manager.take_copies() == []


def test_freeing_one_branch_keeps_the_blocks_the_other_holds():
    manager = ForkingBlockManager(num_blocks=8, block_size=4)
    parent = _started(manager, range(6))
    child = manager.fork(parent)
    manager.deallocate(parent)
    assert manager.ref_counts()[child.block_table[0]] == 1 and manager.num_free_blocks == 6
    manager.deallocate(child)
    assert manager.num_free_blocks == 8
    check_block_manager(manager, [])


def test_fork_refuses_a_sequence_without_a_block_for_its_newest_token():
    manager = ForkingBlockManager(num_blocks=8, block_size=4)
    parent = _started(manager, range(4))
    parent.append_token(9)  # starts block 1, not yet given
    with pytest.raises(ValueError, match="call may_append"):
        manager.fork(parent)
    with pytest.raises(TypeError):
        manager.fork([1, 2, 3])


class _Pool:
    """The physical KV pool as token ids per slot: copies and writes performed like the runner does."""

    def __init__(self, manager: ForkingBlockManager):
        self.size = manager.block_size
        self.slots = [[None] * self.size for _ in range(manager.num_blocks)]

    def write(self, seq: Sequence, start: int) -> None:
        for pos in range(start, len(seq)):
            self.slots[seq.block_table[pos // self.size]][pos % self.size] = seq.token_ids[pos]

    def copy(self, copies) -> None:
        for src, dst in copies:
            self.slots[dst] = list(self.slots[src])

    def read(self, seq: Sequence) -> list:
        return [self.slots[seq.block_table[p // self.size]][p % self.size] for p in range(len(seq))]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_random_beam_traces_read_back_their_own_tokens_and_leak_nothing(seed, block_size):
    rng = random.Random(seed)
    manager = ForkingBlockManager(num_blocks=40, block_size=block_size)
    pool = _Pool(manager)
    beams = [_started(manager, [rng.randrange(50) for _ in range(rng.randrange(1, 9))])]
    pool.write(beams[0], 0)
    for _ in range(30):
        # fork some beams, prune others (never all), then every beam decodes one token
        for beam in list(beams):
            if rng.random() < 0.4 and len(beams) < 6:
                beams.append(manager.fork(beam))
        rng.shuffle(beams)
        while len(beams) > 1 and rng.random() < 0.3:
            manager.deallocate(beams.pop())
        grown = []
        for beam in beams:
            beam.append_token(rng.randrange(50))
            if not manager.can_append(beam):
                beam.token_ids.pop()
                continue
            manager.may_append(beam)
            grown.append(beam)
        pool.copy(manager.take_copies())  # before the step writes, as the runner does
        for beam in grown:
            held = [manager.blocks[beam.block_table[(len(beam) - 1) // block_size]].ref_count]
            assert held == [1], f"beam {beam.seq_id} would write a shared block"
            pool.write(beam, len(beam) - 1)
            _computed(manager, beam, 1)
        for beam in beams:
            assert pool.read(beam) == beam.token_ids, f"beam {beam.seq_id} reads another beam's tokens"
        check_block_manager(manager, beams)
    for beam in beams:
        manager.deallocate(beam)
    assert manager.num_free_blocks == manager.num_blocks
