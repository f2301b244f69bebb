"""Chunked prefill: one token budget per step, shared by decodes and prompt chunks (lab 09).

Lab 07's scheduler runs a step of prompts *or* a step of decodes, and a prompt is computed whole: while a
long prompt is prefilled, every running request waits for its next token (the decode stall), and the
token budget must hold the longest prompt. Here each sequence has ``num_computed_tokens`` racing
``num_tokens`` (``len(seq)``): a step schedules *some* of each sequence's missing tokens.

The rules of ``ChunkedScheduler.schedule`` (the shape of vLLM V1's scheduler; ``solutions/09-chunked-prefill/facts.md`` says
where vLLM and nano-vllm differ, checked at pinned commits):

1. **Running first**, oldest admission first: each gets ``min(num_tokens - num_computed_tokens, budget
   left)`` tokens (a decode is one token; an unfinished prompt continues with a chunk), while budget is left.
2. **Blocks for this step's tokens only**: ``allocate_slots(seq, n)`` grows a table to hold
   ``num_computed_tokens + n`` tokens, all or nothing. When it cannot, the *newest* running sequence is
   preempted (recompute: its blocks go back, it returns to the head of ``waiting``), then the allocation is
   tried again; if the sequence had to preempt itself, the running pass ends.
3. **Then waiting**, first come first served, only in a step that preempted nobody, while budget is left
   and fewer than ``max_num_seqs`` run: the head's prefix-cache hits (``get_computed_blocks``) cost no
   budget, its uncached tokens are chunked to what is left of the budget; admission stops at the first head
   whose blocks do not fit.
4. **Registration after the step**: a block enters the prefix cache only once all its tokens are computed.
   The engine calls ``hash_blocks`` after the model ran, which registers the blocks the step filled
   completely (``(computed + scheduled) // block_size``); a block that a later chunk completes is not
   registered yet (registering it at allocation hands another request a hit on K/V nobody wrote:
   ``EagerRegistrationBlockManager`` shows the wrong hit).

A step that schedules any prompt chunk is returned as ``(scheduled, True)``: the runner then runs every
sequence of it, decodes included, through the paged prefill attention, with each one's query length.
"""

from __future__ import annotations

from typing import List, Tuple

from paged_kv.cache.checks import ceil_div, check_instance, check_int
from paged_kv.cache.prefix_cache import NO_HASH, BlockManager, Sequence, _chain_hash
from paged_kv.engine.scheduler import SchedulerBase


class ChunkedBlockManager(BlockManager):
    """A ``BlockManager`` that hands out blocks per scheduled chunk, like vLLM V1's ``KVCacheManager``.

    ``get_computed_blocks(seq)``: leading full blocks of a new sequence the prefix cache holds (never its
    last token's: at least one token is computed to give logits), whatever the free pool.
    ``allocate_slots(seq, n, num_cached_blocks)``: room for ``n`` more tokens, all or nothing.
    """

    def get_computed_blocks(self, seq: Sequence) -> int:
        """How many leading blocks of ``seq`` (which holds no blocks yet) the prefix cache serves."""
        self._check_seq(seq)
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks {seq.block_table}")
        h, hits = NO_HASH, 0
        for i in range(seq.num_blocks - 1):
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            block_id = self.hash_to_block_id.get(h, NO_HASH)
            if block_id == NO_HASH or self.blocks[block_id].token_ids != token_ids:
                break
            hits += 1
        return hits

    def _hits(self, seq: Sequence, num_cached_blocks: int) -> List[int]:
        h, hits = NO_HASH, []
        for i in range(num_cached_blocks):
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            block_id = self.hash_to_block_id.get(h, NO_HASH)
            if block_id == NO_HASH or self.blocks[block_id].token_ids != token_ids:
                raise ValueError(
                    f"num_cached_blocks={num_cached_blocks} but block {i} of sequence {seq.seq_id} is "
                    "not in the prefix cache; pass what get_computed_blocks returned just before"
                )
            hits.append(block_id)
        return hits

    def num_blocks_to_allocate(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> int:
        """How many free blocks ``allocate_slots(seq, num_new_tokens, num_cached_blocks)`` would take (fresh blocks,
        and hits on free-but-cached blocks); nothing changes. Raises as ``allocate_slots`` does on bad input."""
        return sum(self._plan(seq, num_new_tokens, num_cached_blocks)[1:])

    def _plan(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int) -> Tuple[List[int], int, int]:
        """(the hits' block ids, fresh blocks, revived hits) of an allocation, checked; nothing changes."""
        self._check_seq(seq)
        num_new_tokens = check_int("num_new_tokens", num_new_tokens, minimum=1)
        num_cached_blocks = check_int("num_cached_blocks", num_cached_blocks, minimum=0)
        if seq.block_table and num_cached_blocks:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks; prefix hits are taken at admission only")
        if num_cached_blocks > seq.num_blocks - 1:
            raise ValueError(
                f"num_cached_blocks={num_cached_blocks} but a {len(seq)}-token sequence can reuse at "
                f"most {seq.num_blocks - 1} block(s)"
            )
        computed = seq.num_cached_tokens if seq.block_table else num_cached_blocks * self.block_size
        total = computed + num_new_tokens
        if total > len(seq):
            raise ValueError(
                f"sequence {seq.seq_id}: {computed} computed + {num_new_tokens} new tokens exceed its {len(seq)} tokens"
            )
        hits = self._hits(seq, num_cached_blocks) if not seq.block_table else []
        fresh = max(ceil_div(total, self.block_size) - len(seq.block_table) - len(hits), 0)
        revived = sum(1 for block_id in hits if block_id not in self.used_block_ids)
        return hits, fresh, revived

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> bool:
        """Give ``seq`` the blocks for ``num_new_tokens`` more tokens; True, or False with nothing changed.

        A sequence with no blocks first takes its ``num_cached_blocks`` prefix-cache hits (what
        ``get_computed_blocks`` returned; ``num_computed_tokens`` becomes ``num_cached_blocks * block_size``);
        then the table grows to hold ``num_computed_tokens + num_new_tokens`` tokens, and no more. A hit on
        a free-but-cached block costs a free block, like a fresh one.
        """
        admitted = not seq.block_table
        hits, fresh, revived = self._plan(seq, num_new_tokens, num_cached_blocks)
        if fresh + revived > len(self.free_block_ids):
            return False
        for block_id in hits:
            block = self.blocks[block_id]
            if block_id in self.used_block_ids:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        if admitted:
            seq.num_cached_tokens = len(hits) * self.block_size
        for _ in range(fresh):
            seq.block_table.append(self._allocate_block())
        return True


class EagerRegistrationBlockManager(ChunkedBlockManager):
    """The wrong-hit demonstration: registers a block in the prefix cache when it is *allocated*, as soon as
    the prompt tokens it will hold are known, before the chunk that computes them has run. A chunk that ends
    inside a block leaves that block registered but partly computed; a request admitted next hits it and
    reads K/V nobody wrote. Never use it to serve."""

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> bool:
        if not super().allocate_slots(seq, num_new_tokens, num_cached_blocks):
            return False
        h = NO_HASH
        for i in range(min(seq.num_prompt_tokens // self.block_size, len(seq.block_table))):
            token_ids = seq.block(i)
            h = _chain_hash(token_ids, h)
            self.blocks[seq.block_table[i]].update(h, token_ids)
            self.hash_to_block_id[h] = seq.block_table[i]
        return True


def is_decode(seq: Sequence) -> bool:
    """A scheduled sequence computes one token after all its others, and that token is an output."""
    return seq.num_scheduled_tokens == 1 and seq.num_cached_tokens + 1 == len(seq) and len(seq) > seq.num_prompt_tokens


class ChunkedSchedulerBase(SchedulerBase):
    """Queues and bookkeeping for chunked prefill; ``schedule`` is left to ``ChunkedScheduler`` (lab 09).

    ``max_num_batched_tokens`` is the step's token budget (decodes and chunks together); it may be far
    smaller than a prompt: a long prompt is computed over several steps. ``max_num_seqs``: most sequences
    running (admission stops there). The engine gives it a ``ChunkedBlockManager`` (``block_manager_class``).
    """

    chunked_prefill = True
    block_manager_class = ChunkedBlockManager

    def __init__(self, block_manager: ChunkedBlockManager, max_num_seqs: int = 16, max_num_batched_tokens: int = 512):
        check_instance("block_manager", block_manager, ChunkedBlockManager)
        super().__init__(block_manager, max_num_seqs, max_num_batched_tokens)

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence at the tail of ``waiting``; only one that could never fit the pool is refused
        (a prompt longer than the token budget is chunked)."""
        self.block_manager._check_seq(seq)
        if seq.block_table or seq.num_cached_tokens:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks {seq.block_table}; add fresh sequences only")
        if any(s is seq for s in self.waiting) or any(s is seq for s in self.running):
            raise ValueError(f"sequence {seq.seq_id} is already queued")
        if seq.num_blocks > self.block_manager.num_blocks:
            raise ValueError(
                f"sequence {seq.seq_id} needs {seq.num_blocks} blocks but the whole pool has "
                f"{self.block_manager.num_blocks}: it could never run"
            )
        self.waiting.append(seq)

    def preempt(self, seq: Sequence) -> None:
        """Recompute: give back ``seq``'s blocks (``num_computed_tokens`` drops to 0), put it at the head of
        ``waiting`` (the caller has taken it off ``running``)."""
        self.block_manager.deallocate(seq)
        seq.num_scheduled_tokens = 0
        self.waiting.appendleft(seq)

    def schedule(self) -> Tuple[List[Sequence], bool]:
        """Pick the next step's sequences and set their ``num_scheduled_tokens``; return ``(scheduled,
        any prompt chunk among them)``."""
        raise NotImplementedError("schedule() is the part you write")


class ChunkedScheduler(ChunkedSchedulerBase):
    """vLLM V1's shape: running first, then waiting, all from one token budget; blocks per chunk."""

    def schedule(self) -> Tuple[List[Sequence], bool]:
        """One step.

        Running pass: for each running sequence from the head while budget is left, ``n = min(len(seq) -
        seq.num_computed_tokens, budget)``; until ``allocate_slots(seq, n)`` succeeds, preempt the tail of
        ``running`` (the newest); if that was ``seq`` itself, stop the pass. Otherwise set
        ``num_scheduled_tokens = n`` and take ``n`` off the budget.

        Waiting pass (only if nobody was preempted): while ``waiting``, budget left and fewer than
        ``max_num_seqs`` running: head's ``hits = get_computed_blocks(head)``, ``n = min(len(head) - hits *
        block_size, budget)``; stop if ``allocate_slots(head, n, hits)`` fails; else schedule ``n`` tokens and
        move the head to the tail of ``running``.
        """
        manager = self.block_manager
        budget = self.max_num_batched_tokens
        scheduled: List[Sequence] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq) - seq.num_computed_tokens, budget)
            while not manager.allocate_slots(seq, n):
                victim = self.running.pop()
                self.preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                seq.num_scheduled_tokens = n
                budget -= n
                scheduled.append(seq)
                i += 1
                continue
            break
        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                seq = self.waiting[0]
                hits = manager.get_computed_blocks(seq)
                n = min(len(seq) - hits * self.block_size, budget)
                if not manager.allocate_slots(seq, n, hits):
                    break
                seq.num_scheduled_tokens = n
                budget -= n
                self.running.append(self.waiting.popleft())
                scheduled.append(seq)
        return scheduled, any(not is_decode(s) for s in scheduled)
