"""``Request`` and ``KVCacheManager``: the tutorial's paged KV cache, with every edge case handled.

The pool is one tensor ``physical_kv_cache[num_blocks, block_size, head_dim]``: the course's kernel
layout ``[num_blocks, block_size, num_kv_heads, head_dim]`` for one layer's K, with one KV head. A request owns a
*block table*: ``block_table[i]`` is the physical block that holds its logical tokens
``i * block_size .. (i + 1) * block_size - 1``. Physical ids need not be contiguous or sorted.

Invariants kept by every method (and checked by the tests):
* ``free_blocks`` and the block tables of live requests partition ``range(num_blocks)``;
* a live request holds exactly ``ceil(seq_len / block_size)`` blocks;
* a method that raises leaves the manager and the request exactly as they were.

Allocation policy: take the lowest free ids first; released ids go back and the free list is kept
sorted. This is a teaching manager (lists, as in the tutorial); ``BlockManager`` is the O(1) one.
"""

from __future__ import annotations

from typing import Dict, List

import torch

from paged_kv.cache.checks import ceil_div, check_block_ids, check_instance, check_int, check_positive_int
from paged_kv.cache.messages import N_


class Request:
    """One sequence's logical length and its logical-to-physical block table."""

    def __init__(self, request_id: int, prompt_len: int):
        self.request_id = check_int("request_id", request_id, minimum=0)
        self.seq_len = check_positive_int("prompt_len", prompt_len)
        self.block_table: List[int] = []

    def __repr__(self) -> str:
        return f"Request(request_id={self.request_id}, seq_len={self.seq_len}, block_table={self.block_table})"


class KVCacheManagerBase:
    """The given code of labs 02-04: the pool, the free list, argument checks, reports and release.

    ``KVCacheManager`` adds the three mechanisms the labs ask for; the labs' starter classes
    (``paged_kv.lab.starters``) add all but the one a lab asks the student to write.
    """

    def __init__(self, num_blocks: int, block_size: int, head_dim: int):
        self.num_blocks = check_positive_int("num_blocks", num_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.physical_kv_cache = torch.zeros(self.num_blocks, self.block_size, self.head_dim)
        self.free_blocks: List[int] = list(range(self.num_blocks))

    # -- helpers the labs build on ------------------------------------------------------------
    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens: ``ceil(num_tokens / block_size)``."""
        return ceil_div(check_int("num_tokens", num_tokens, minimum=0), self.block_size)

    def _check_request(self, req: Request) -> None:
        check_instance("req", req, Request)

    def _check_prefill(self, req: Request) -> None:
        """Given code of lab 02: a ``Request`` that holds no blocks yet."""
        self._check_request(req)
        if req.block_table:
            raise ValueError(
                f"request {req.request_id} already holds blocks {req.block_table}; "
                "prefill happens once per request (release it first to start over)"
            )

    def _check_decode(self, req: Request) -> None:
        """Given code of lab 03: a prefilled ``Request`` whose table matches its length."""
        self._check_request(req)
        if not req.block_table:
            raise ValueError(f"request {req.request_id} holds no blocks; call allocate_for_prefill first")
        held, needed = len(req.block_table), self.blocks_needed(req.seq_len)
        if held < needed:
            raise ValueError(
                f"request {req.request_id} has seq_len={req.seq_len} but only {held} blocks, {needed - held} too "
                f"few (expected {needed}): did an earlier allocate_for_decode grow seq_len without the block it "
                "needed (or was the table edited by hand)?"
            )
        if held > needed:
            raise ValueError(
                f"request {req.request_id} has seq_len={req.seq_len} but {held} blocks, {held - needed} too many "
                f"(expected {needed}): did an earlier allocate_for_decode take a new block before the last one "
                "was full (or was the table edited by hand)?"
            )

    def _check_readable(self, req: Request) -> List[int]:
        """Given code of lab 04: a non-empty, valid table long enough for ``seq_len``; returns it."""
        self._check_request(req)
        if not req.block_table:
            raise ValueError(f"request {req.request_id} holds no blocks to read")
        table = check_block_ids("block_table", req.block_table, self.num_blocks)
        if len(table) * self.block_size < req.seq_len:
            raise ValueError(
                f"request {req.request_id} has seq_len={req.seq_len} but its {len(table)} block(s) "
                f"hold only {len(table) * self.block_size} tokens"
            )
        return table

    def _oom(self, req: Request, needed: int, what: str) -> RuntimeError:
        return RuntimeError(
            f"OOM: request {req.request_id} needs {needed} free block(s) for {what}, "
            f"but only {len(self.free_blocks)} of {self.num_blocks} are free "
            f"(block_size={self.block_size}); release a finished request or use a larger pool"
        )

    # -- reports and release --------------------------------------------------------------------
    def allocation_report(self, req: Request) -> Dict[str, float]:
        """Logical tokens, allocated slots, unused tail slots and utilisation (0.0 when empty)."""
        self._check_request(req)
        allocated_tokens = len(req.block_table) * self.block_size
        return {
            "logical_tokens": req.seq_len,
            "allocated_tokens": allocated_tokens,
            "unused_tail_tokens": allocated_tokens - req.seq_len,
            "utilization": req.seq_len / allocated_tokens if allocated_tokens else 0.0,
        }

    def release_request(self, req: Request) -> None:
        """Return every block of ``req`` to the pool and empty its table; refuse a double release."""
        self._check_request(req)
        if not req.block_table:
            raise ValueError(f"request {req.request_id} holds no blocks: was it already released?")
        released = check_block_ids("block_table", req.block_table, self.num_blocks)
        free = set(self.free_blocks)
        already_free = [block_id for block_id in released if block_id in free]
        if already_free:
            raise ValueError(
                f"request {req.request_id} lists block(s) {already_free} that are already free; "
                "another request may have released them (double release)"
            )
        self.free_blocks.extend(released)
        self.free_blocks.sort()
        req.block_table.clear()


class KVCacheManager(KVCacheManagerBase):
    """A pool of fixed-size KV blocks handed out to requests through block tables."""

    def allocate_for_prefill(self, req: Request) -> None:
        """Give ``req`` all ``ceil(seq_len / block_size)`` blocks at once, or nothing (OOM)."""
        self._check_prefill(req)
        needed = self.blocks_needed(req.seq_len)
        if needed > len(self.free_blocks):
            raise self._oom(req, needed, N_(f"its {req.seq_len}-token prompt"))
        allocated = self.free_blocks[:needed]
        del self.free_blocks[:needed]
        req.block_table.extend(allocated)

    def allocate_for_decode(self, req: Request) -> None:
        """Grow ``req`` by one token; take a new block only when that token starts a new block."""
        self._check_decode(req)
        new_seq_len = req.seq_len + 1
        if self.blocks_needed(new_seq_len) > len(req.block_table):
            if not self.free_blocks:
                raise self._oom(req, 1, N_(f"the token at position {req.seq_len} (0-based), which starts a new block"))
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_seq_len

    def get_physical_cache(self, req: Request) -> torch.Tensor:
        """Rebuild ``req``'s cache in logical order: a new ``[seq_len, head_dim]`` tensor.

        Reads blocks in block-table order with one gather (no loop over blocks), then drops the
        unused slots of the last block.
        """
        table = self._check_readable(req)
        index = torch.tensor(table, dtype=torch.long)
        gathered = self.physical_kv_cache.index_select(0, index)
        return gathered.reshape(-1, self.head_dim)[: req.seq_len]
