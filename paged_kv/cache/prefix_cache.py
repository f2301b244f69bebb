"""Prefix caching with ref-counted blocks, following nano-vllm's ``block_manager.py`` design.

A *full* block is named by a chained hash: ``h_i = xxh64(h_{i-1} as 8 little-endian bytes ||
token ids of block i as int64 bytes)`` (block 0 has no prefix bytes), so equal hashes mean equal
prefixes. ``hash_to_block_id`` maps a hash to the physical block that holds those tokens; a block
shared by several sequences has ``ref_count`` equal to the number of block tables that list it.

Policy (identical to nano-vllm, so block tables match on the same trace): new blocks come from the
front of the free queue; a block whose count drops to zero goes to the back and keeps its hash, so
a later request can still hit it until the block is handed out again. Fixed here: ``allocate``
starts its hash chain at -1, decode growth is right for ``block_size == 1``, and every operation on
the free queue is O(1) (no ``deque.remove``).
"""

from __future__ import annotations

from itertools import count
from typing import Dict, List, Sequence as SequenceType, Set

import numpy as np
import xxhash

from paged_kv.cache.checks import ceil_div, check_block_ids, check_instance, check_int, check_ints, check_positive_int
from paged_kv.cache.free_queue import FreeBlockQueue

NO_HASH = -1


def _chain_hash(token_ids: List[int], prefix: int) -> int:
    """The hash itself, for ids already validated (a ``Sequence``'s): the hot path of every lookup."""
    h = xxhash.xxh64()
    if prefix != NO_HASH:
        h.update(prefix.to_bytes(8, "little"))
    h.update(np.array(token_ids, dtype=np.int64).tobytes())
    return h.intdigest()


class Sequence:
    """The token ids of one request and the bookkeeping ``BlockManager`` reads and writes.

    ``num_cached_tokens``: tokens whose KV is already in the cache (prefix hits, earlier steps).
    ``num_scheduled_tokens``: tokens the engine computes in the current step (set by the caller).
    """

    _ids = count()

    def __init__(self, token_ids: SequenceType[int], block_size: int = 16):
        self.block_size = check_positive_int("block_size", block_size)
        if isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__len__"):
            raise TypeError(f"token_ids must be a list of ints, got {type(token_ids).__name__}")
        tokens = check_ints("token_ids", token_ids, minimum=0)
        if not tokens:
            raise ValueError("token_ids must hold at least one token (the prompt cannot be empty)")
        self.seq_id = next(Sequence._ids)
        self.token_ids: List[int] = tokens
        self.num_prompt_tokens = len(tokens)
        self.num_cached_tokens = 0
        self.num_scheduled_tokens = 0
        self.block_table: List[int] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_computed_tokens(self) -> int:
        """vLLM V1's name for ``num_cached_tokens``: tokens whose K/V exist (lab 09's chunks race it to
        ``num_tokens``)."""
        return self.num_cached_tokens

    @num_computed_tokens.setter
    def num_computed_tokens(self, value: int) -> None:
        self.num_cached_tokens = value

    @property
    def num_blocks(self) -> int:
        """Blocks needed to hold every token: ``ceil(len(self) / block_size)``."""
        return ceil_div(len(self.token_ids), self.block_size)

    @property
    def num_cached_blocks(self) -> int:
        return self.num_cached_tokens // self.block_size

    @property
    def last_block_num_tokens(self) -> int:
        return len(self.token_ids) - (self.num_blocks - 1) * self.block_size

    def block(self, i: int) -> List[int]:
        """Token ids of logical block ``i`` (the last one may be partial)."""
        i = check_int("i", i, minimum=0)
        if i >= self.num_blocks:
            raise IndexError(f"block index {i} out of range: the sequence has {self.num_blocks} block(s)")
        return self.token_ids[i * self.block_size : (i + 1) * self.block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(check_int("token_id", token_id, minimum=0))

    def __repr__(self) -> str:
        return (
            f"Sequence(seq_id={self.seq_id}, len={len(self)}, block_size={self.block_size}, "
            f"block_table={self.block_table}, num_cached_tokens={self.num_cached_tokens})"
        )


class Block:
    """Metadata of one physical block: who uses it and, once full, the hash of what it holds."""

    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash = NO_HASH
        self.token_ids: List[int] = []

    def update(self, hash: int, token_ids: List[int]) -> None:
        """Record the chained hash and the tokens of a block that has just been filled."""
        self.hash = hash
        self.token_ids = list(token_ids)

    def reset(self) -> None:
        """Fresh allocation: one owner, no content yet."""
        self.ref_count = 1
        self.hash = NO_HASH
        self.token_ids = []

    def __repr__(self) -> str:
        return f"Block(id={self.block_id}, ref_count={self.ref_count}, hash={self.hash})"


class BlockManagerBase:
    """The given code of lab 05: the pool's metadata, argument checks, decode growth and reading.

    ``BlockManager`` adds hashing, prefix-cache allocation and ref-counted release; the lab's starter
    class (``paged_kv.lab.starters``) adds none of them: the student writes those.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = check_positive_int("num_blocks", num_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        self.blocks: List[Block] = [Block(i) for i in range(self.num_blocks)]
        self.hash_to_block_id: Dict[int, int] = {}
        self.free_block_ids = FreeBlockQueue(range(self.num_blocks))
        self.used_block_ids: Set[int] = set()

    def _deallocate_block(self, block_id: int) -> None:
        """Move a used block whose ref count reached 0 to the back of the free queue (its hash stays)."""
        ref_count = self.blocks[block_id].ref_count
        if ref_count != 0:
            raise ValueError(
                f"_deallocate_block({block_id}): block {block_id} still has ref_count {ref_count}; "
                "free a block only when its ref_count reaches 0"
            )
        if block_id not in self.used_block_ids:
            raise ValueError(f"_deallocate_block({block_id}): block {block_id} is already free (freed twice?)")
        self.used_block_ids.remove(block_id)
        self.free_block_ids.append(block_id)

    def _check_seq(self, seq: "Sequence") -> None:
        check_instance("seq", seq, Sequence)
        if seq.block_size != self.block_size:
            raise ValueError(
                f"seq.block_size={seq.block_size} but this BlockManager uses block_size={self.block_size}; "
                "create the Sequence with the manager's block size"
            )

    def _check_allocated(self, seq: "Sequence") -> None:
        self._check_seq(seq)
        if not seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks; call allocate first")
        missing = seq.num_blocks - len(seq.block_table)
        if missing not in (0, 1):
            raise ValueError(
                f"sequence {seq.seq_id} has {len(seq)} tokens ({seq.num_blocks} blocks) but a block table "
                f"of {len(seq.block_table)}; call may_append after every appended token"
            )

    def _num_new_blocks_for_decode(self, seq: "Sequence") -> int:
        # The newest token sits at position len(seq) - 1; it needs a block iff the table is one short.
        # (nano-vllm's ``len(seq) % block_size == 1`` says the same, except that it is never true
        # for block_size == 1.)
        return seq.num_blocks - len(seq.block_table)

    def can_append(self, seq: "Sequence") -> bool:
        """Whether the free pool can give ``seq`` the block its newest token may need."""
        self._check_allocated(seq)
        return len(self.free_block_ids) >= self._num_new_blocks_for_decode(seq)

    def may_append(self, seq: "Sequence") -> None:
        """Before a decode step: add a block if the newest token starts one (OOM leaves no change)."""
        self._check_allocated(seq)
        if self._num_new_blocks_for_decode(seq):
            if not self.free_block_ids:
                raise RuntimeError(
                    f"OOM: sequence {seq.seq_id} needs 1 free block for token {len(seq)} but none of "
                    f"{self.num_blocks} is free; check can_append first or preempt a sequence"
                )
            seq.block_table.append(self._allocate_block())

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def ref_counts(self) -> List[int]:
        """``ref_count`` of every block, indexed by block id."""
        return [block.ref_count for block in self.blocks]


class BlockManager(BlockManagerBase):
    """Hands out physical blocks to sequences, shares full blocks whose prefix hash matches."""

    @classmethod
    def compute_hash(cls, token_ids: SequenceType[int], prefix: int = NO_HASH) -> int:
        """xxh64 of ``prefix`` (8 little-endian bytes, skipped when -1) then the ids as int64."""
        prefix = check_int("prefix", prefix, minimum=NO_HASH)
        if prefix >= 2**64:
            raise ValueError(f"prefix must fit in 8 bytes (a previous xxh64 digest), got {prefix}")
        tokens = np.asarray(token_ids)
        if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):
            raise TypeError(f"token_ids must be a flat list of ints, got {token_ids!r}")
        if tokens.size and tokens.min() < 0:
            raise ValueError(f"token ids must be non-negative, got {token_ids!r}")
        return _chain_hash(token_ids, prefix)

    def _allocate_block(self) -> int:
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        assert block.ref_count == 0, f"free block {block_id} has ref_count {block.ref_count}"
        if block.hash != NO_HASH and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]  # its old content is about to be overwritten
        block.reset()
        self.used_block_ids.add(block_id)
        return block_id

    def can_allocate(self, seq: "Sequence") -> int:
        """Number of leading blocks served by the prefix cache, or -1 if the free pool is too small.

        The last block is never looked up: at least one token must be computed to produce logits.
        """
        self._check_seq(seq)
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks {seq.block_table}")
        h = NO_HASH
        num_cached_blocks = 0
        num_new_blocks = seq.num_blocks
        for i in range(seq.num_blocks - 1):
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            block_id = self.hash_to_block_id.get(h, NO_HASH)
            if block_id == NO_HASH or self.blocks[block_id].token_ids != token_ids:
                break
            num_cached_blocks += 1
            if block_id in self.used_block_ids:
                num_new_blocks -= 1  # shared with a live sequence: costs no free block
        if len(self.free_block_ids) < num_new_blocks:
            return -1
        return num_cached_blocks

    def allocate(self, seq: "Sequence", num_cached_blocks: int) -> None:
        """Fill ``seq.block_table``: the first ``num_cached_blocks`` from the cache, the rest fresh.

        All checks run before any change: a wrong ``num_cached_blocks`` raises ``ValueError`` and a
        pool too small raises ``RuntimeError('OOM ...')``, both leaving everything untouched.
        """
        self._check_seq(seq)
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks {seq.block_table}")
        num_cached_blocks = check_int("num_cached_blocks", num_cached_blocks, minimum=0)
        if num_cached_blocks > seq.num_blocks - 1:
            raise ValueError(
                f"num_cached_blocks={num_cached_blocks} but a {len(seq)}-token sequence can reuse at most "
                f"{seq.num_blocks - 1} block(s); pass what can_allocate returned"
            )
        h = NO_HASH  # the seed's listing forgets this line: the chain must start fresh
        hits: List[int] = []
        for i in range(num_cached_blocks):
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            block_id = self.hash_to_block_id.get(h, NO_HASH)
            if block_id == NO_HASH or self.blocks[block_id].token_ids != token_ids:
                raise ValueError(
                    f"num_cached_blocks={num_cached_blocks} but block {i} of sequence {seq.seq_id} is not in "
                    "the prefix cache; pass what can_allocate returned just before"
                )
            hits.append(block_id)
        shared = sum(1 for block_id in hits if block_id in self.used_block_ids)
        needed = seq.num_blocks - shared
        if needed > len(self.free_block_ids):
            raise RuntimeError(
                f"OOM: sequence {seq.seq_id} needs {needed} free block(s) but only {len(self.free_block_ids)} "
                f"of {self.num_blocks} are free; check can_allocate before allocate"
            )
        for block_id in hits:
            block = self.blocks[block_id]
            if block_id in self.used_block_ids:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size

    def deallocate(self, seq: "Sequence") -> None:
        """Drop ``seq``'s reference to each of its blocks (last first); free those nobody else holds."""
        self._check_seq(seq)
        if not seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks: was it already deallocated?")
        table = check_block_ids("seq.block_table", seq.block_table, self.num_blocks)
        unowned = [block_id for block_id in table if self.blocks[block_id].ref_count <= 0]
        if unowned:
            raise ValueError(
                f"sequence {seq.seq_id} lists block(s) {unowned} that have no owner (ref_count 0): "
                "double deallocate, or a block table edited by hand"
            )
        for block_id in reversed(table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()

    def hash_blocks(self, seq: "Sequence") -> None:
        """After a step: hash and register the blocks this step's tokens filled completely."""
        self._check_seq(seq)
        cached = check_int("seq.num_cached_tokens", seq.num_cached_tokens, minimum=0)
        scheduled = check_int("seq.num_scheduled_tokens", seq.num_scheduled_tokens, minimum=0)
        if cached + scheduled > len(seq):
            raise ValueError(
                f"num_cached_tokens + num_scheduled_tokens = {cached + scheduled} exceeds the sequence "
                f"length {len(seq)}"
            )
        start = cached // self.block_size
        end = (cached + scheduled) // self.block_size
        if end > len(seq.block_table):
            raise ValueError(f"sequence {seq.seq_id} has {len(seq.block_table)} blocks, cannot hash {end}")
        if start == end:
            return
        h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else NO_HASH
        if start > 0 and h == NO_HASH:
            raise ValueError(
                f"block {start - 1} of sequence {seq.seq_id} was never hashed; call hash_blocks after every step"
            )
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            block.update(h, token_ids)
            self.hash_to_block_id[h] = block.block_id
