"""Stateful property tests: random interleavings never break the pool's invariants or leak blocks."""

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

from paged_kv import (
    BlockManager,
    KVCacheManager,
    Request,
    Sequence,
    check_block_manager,
    check_kv_manager,
    decode_step,
    prefill,
)


class KVCacheManagerMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    @initialize(num_blocks=st.integers(1, 12), block_size=st.integers(1, 5))
    def create(self, num_blocks, block_size):
        self.manager = KVCacheManager(num_blocks, block_size, head_dim=2)
        self.live = {}
        self.next_id = 0

    @rule(target=requests, prompt_len=st.integers(1, 30))
    def prefill(self, prompt_len):
        req = Request(self.next_id, prompt_len)
        self.next_id += 1
        free_before = list(self.manager.free_blocks)
        try:
            self.manager.allocate_for_prefill(req)
        except RuntimeError as error:
            assert "OOM" in str(error)
            assert self.manager.free_blocks == free_before and req.block_table == []
            return req
        self.live[req.request_id] = req
        return req

    @rule(req=requests)
    def decode(self, req):
        if req.request_id not in self.live:
            return
        before = (req.seq_len, list(req.block_table), list(self.manager.free_blocks))
        try:
            self.manager.allocate_for_decode(req)
        except RuntimeError:
            assert (req.seq_len, req.block_table, self.manager.free_blocks) == before
            assert not self.manager.free_blocks and (before[0] % self.manager.block_size == 0)

    @rule(req=consumes(requests))
    def release(self, req):
        if req.request_id in self.live:
            self.manager.release_request(self.live.pop(req.request_id))
        else:
            with pytest.raises(ValueError):
                self.manager.release_request(req)

    @invariant()
    def pool_is_partitioned(self):
        check_kv_manager(self.manager, self.live.values())

    def teardown(self):
        for req in list(self.live.values()):
            self.manager.release_request(req)
        assert sorted(self.manager.free_blocks) == list(range(self.manager.num_blocks)), "blocks leaked"


class BlockManagerMachine(RuleBasedStateMachine):
    """Prompts are drawn from a few shared prefixes so that prefix hits and sharing really happen."""

    sequences = Bundle("sequences")

    @initialize(
        num_blocks=st.integers(1, 16),
        block_size=st.integers(1, 4),
        prefixes=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=10), min_size=1, max_size=3),
    )
    def create(self, num_blocks, block_size, prefixes):
        self.manager = BlockManager(num_blocks, block_size)
        self.prefixes = prefixes
        self.live = {}

    @rule(target=sequences, which=st.integers(0, 2), suffix=st.lists(st.integers(0, 3), max_size=6))
    def admit(self, which, suffix):
        tokens = self.prefixes[which % len(self.prefixes)] + suffix
        seq = Sequence(tokens, block_size=self.manager.block_size)
        counts = self.manager.ref_counts()
        try:
            hits = prefill(self.manager, seq)
        except RuntimeError:
            assert self.manager.ref_counts() == counts and seq.block_table == []
            return seq
        assert seq.num_cached_tokens == len(seq) and hits <= seq.num_blocks - 1
        self.live[seq.seq_id] = seq
        return seq

    @rule(seq=sequences, token=st.integers(0, 3))
    def decode(self, seq, token):
        if seq.seq_id not in self.live:
            return
        before = (list(seq.token_ids), list(seq.block_table), self.manager.ref_counts())
        try:
            decode_step(self.manager, seq, token)
        except RuntimeError:
            assert (seq.token_ids, seq.block_table, self.manager.ref_counts()) == before

    @rule(seq=consumes(sequences))
    def release(self, seq):
        if seq.seq_id in self.live:
            self.manager.deallocate(self.live.pop(seq.seq_id))

    @invariant()
    def state_is_consistent(self):
        check_block_manager(self.manager, self.live.values())

    def teardown(self):
        for seq in list(self.live.values()):
            self.manager.deallocate(seq)
        check_block_manager(self.manager, [])
        assert len(self.manager.free_block_ids) == self.manager.num_blocks, "blocks leaked"


TestKVCacheManagerProperties = KVCacheManagerMachine.TestCase
TestBlockManagerProperties = BlockManagerMachine.TestCase
TestKVCacheManagerProperties.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestBlockManagerProperties.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
