"""Whole-state audits of both managers; each raises ``AssertionError`` naming the broken invariant.

Used after every step of the property tests and by the graders, so that a bug is reported as the
first state in which it shows, not as a wrong number much later. Each audit is two halves: a
*state* function that reads a manager into lists and dicts, and a *check* on that plain data. A
grader reads the state where the student's manager lives (one request) and checks it itself.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterable

from paged_kv.cache.prefix_cache import NO_HASH, BlockManagerBase, Sequence

if TYPE_CHECKING:  # only named in annotations: lab 05 on audits without importing torch
    from paged_kv.cache.manager import KVCacheManagerBase, Request


# ---- the tutorial's manager (labs 02-04) ---------------------------------------------------------------
def kv_manager_state(manager: KVCacheManagerBase, live_requests: Iterable[Request]) -> dict:
    """The manager's pool and its live requests, as lists and ints."""
    return {
        "num_blocks": manager.num_blocks,
        "block_size": manager.block_size,
        "free_blocks": list(manager.free_blocks),
        "requests": [(r.request_id, r.seq_len, list(r.block_table)) for r in live_requests],
    }


def check_kv_state(state: dict) -> None:
    """Free blocks and live block tables partition the pool; tables are exactly as long as needed."""
    held = Counter()
    block_size, num_blocks = state["block_size"], state["num_blocks"]
    for request_id, seq_len, table in state["requests"]:
        expected = -(-seq_len // block_size)
        assert len(table) == expected, (
            f"request {request_id}: seq_len={seq_len} needs {expected} block(s), its table has {len(table)}: {table}"
        )
        held.update(table)
    free = Counter(state["free_blocks"])
    twice = sorted(b for b, n in (held + free).items() if n > 1)
    assert not twice, f"block(s) {twice} are owned twice (by two requests, or by a request and the free list)"
    lost = sorted(set(range(num_blocks)) - set(held) - set(free))
    assert not lost, f"block(s) {lost} are neither free nor owned by any request (leaked)"
    stray = sorted((set(held) | set(free)) - set(range(num_blocks)))
    assert not stray, f"block id(s) {stray} are outside the pool 0..{num_blocks - 1}"


def check_kv_manager(manager: KVCacheManagerBase, live_requests: Iterable[Request]) -> None:
    """Free blocks and live block tables partition the pool; tables are exactly as long as needed."""
    check_kv_state(kv_manager_state(manager, live_requests))


# ---- nano-vllm's block manager (lab 05 on) ------------------------------------------------------------
def block_manager_state(manager: BlockManagerBase, seqs: Iterable[Sequence]) -> dict:
    """What nano-vllm's policy fixes about a manager and its live sequences, as lists and dicts of the
    values found (the graders compare it with the reference's, after checking every value's type)."""
    seqs = list(seqs)
    blocks = list(manager.blocks)
    return {
        "num_blocks": manager.num_blocks,
        "block_size": manager.block_size,
        "seq ids": [s.seq_id for s in seqs],
        "seq token ids": [list(s.token_ids) for s in seqs],
        "block tables": [list(s.block_table) for s in seqs],
        "num_cached_tokens": [s.num_cached_tokens for s in seqs],
        "ref counts": [b.ref_count for b in blocks],
        "block hashes": [b.hash for b in blocks],
        "block token ids": [list(b.token_ids) for b in blocks],
        "block ids": [b.block_id for b in blocks],
        "free queue (in order)": list(manager.free_block_ids),
        "used blocks": sorted(manager.used_block_ids),
        "hash_to_block_id": list(dict(manager.hash_to_block_id).items()),
    }


def check_block_state(state: dict) -> None:
    """Free/used partition the pool, ref counts match the tables, every registered hash is honest."""
    block_size, num_blocks = state["block_size"], state["num_blocks"]
    holders = Counter()
    seqs = list(zip(state["seq ids"], state["seq token ids"], state["block tables"], state["num_cached_tokens"]))
    for seq_id, tokens, table, _ in seqs:
        needed = -(-len(tokens) // block_size)
        assert len(table) == needed, (
            f"sequence {seq_id}: {len(tokens)} tokens need {needed} blocks, table has {len(table)}"
        )
        assert len(set(table)) == len(table), f"sequence {seq_id} lists a block twice"
        holders.update(table)
    free = state["free queue (in order)"]
    assert len(free) == len(set(free)), "the free queue holds a block twice"
    free_set, used = set(free), set(state["used blocks"])
    assert not free_set & used, f"block(s) {sorted(free_set & used)} are both free and used"
    assert free_set | used == set(range(num_blocks)), (
        f"block(s) {sorted(set(range(num_blocks)) - free_set - used)} are neither free nor used"
    )
    blocks = list(zip(state["block ids"], state["ref counts"], state["block hashes"], state["block token ids"]))
    by_id = {block_id: (ref_count, h, tokens) for block_id, ref_count, h, tokens in blocks}
    for block_id, ref_count, _, _ in blocks:
        expected = holders.get(block_id, 0)
        assert ref_count == expected, f"block {block_id}: ref_count={ref_count} but {expected} block table(s) hold it"
        assert (block_id in used) == (expected > 0), (
            f"block {block_id}: used={block_id in used} but held by {expected} table(s)"
        )
    for h, block_id in state["hash_to_block_id"]:
        assert block_id in by_id, f"hash {h} points at block {block_id}, which is not in the pool"
        _, block_hash, tokens = by_id[block_id]
        assert block_hash == h, f"hash {h} points at block {block_id}, whose hash is {block_hash}"
        assert len(tokens) == block_size, f"hash {h} points at a partial block {block_id}"
    # Every full, computed block of a live sequence holds the tokens its table position says.
    for seq_id, tokens, table, cached in seqs:
        for i in range(cached // block_size):
            _, block_hash, block_tokens = by_id[table[i]]
            assert block_hash != NO_HASH, f"sequence {seq_id}: cached block {i} was never hashed"
            assert block_tokens == tokens[i * block_size : (i + 1) * block_size], (
                f"sequence {seq_id}: block {i} (physical {table[i]}) holds other tokens"
            )


def check_block_manager(manager: BlockManagerBase, live_seqs: Iterable[Sequence]) -> None:
    """Free/used partition the pool, ref counts match the tables, every registered hash is honest."""
    check_block_state(block_manager_state(manager, live_seqs))
