"""Forking sequences over shared blocks, with copy-on-write: parallel sampling and beam search.

A fork is a second block table that lists the parent's physical blocks: every block's ``ref_count``
goes up by one and nothing is copied. Blocks are immutable while shared, so a write goes through
``may_append``: when the block that will hold a sequence's newest token is listed by another table
too (``ref_count > 1``), the sequence gets a fresh block, the copy ``(source, destination)`` is
recorded for the runner, and the old block loses one reference. The runner must make the copy before
the step writes any new key or value: in that same step the last holder of the old block writes its
own new token into it in place, and the copy must take the old block as it was before that write. A full block is never written again (the next token starts a new block),
so only a partial last block is ever copied. Freeing a branch is ``deallocate``: a block goes back to
the pool when its last reference goes.

This is what vLLM's V0 block manager did (block tables forked, copy-on-write of the last block);
see lab 08 for what later engines do instead.
"""

from __future__ import annotations

from typing import List, Tuple

from paged_kv.cache.prefix_cache import BlockManager, Sequence

Copy = Tuple[int, int]  # (source block id, destination block id): copy every slot of the source


class ForkingBlockManager(BlockManager):
    """``BlockManager`` (prefix caching, ref counts) plus ``fork`` and copy-on-write in ``may_append``.

    ``pending_copies`` collects the copies that ``may_append`` decided, in order; the engine takes
    them with ``take_copies()`` and performs them before the step's attention.
    """

    def __init__(self, num_blocks: int, block_size: int):
        BlockManager.__init__(self, num_blocks, block_size)  # no super(): lab 08's starter copies this method
        self.pending_copies: List[Copy] = []

    def fork(self, parent: Sequence) -> Sequence:
        """A child with the parent's tokens whose table lists the parent's blocks (each ``ref_count`` + 1).

        The parent must hold a block for every token and have no tokens left to compute (fork after a
        step), so that the child's KV is already in the shared blocks. Costs no free block.
        """
        self._check_allocated(parent)
        if len(parent.block_table) != parent.num_blocks:
            raise ValueError(
                f"sequence {parent.seq_id} has {len(parent)} tokens but blocks for {len(parent.block_table)} "
                f"block(s) only; call may_append for its newest token before forking it"
            )
        child = Sequence(parent.token_ids, self.block_size)
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = list(parent.block_table)
        return child

    def _num_new_blocks_for_decode(self, seq: Sequence) -> int:
        if seq.num_blocks > len(seq.block_table):
            return 1  # the newest token starts a block
        return 1 if self.blocks[seq.block_table[-1]].ref_count > 1 else 0  # copy-on-write

    def may_append(self, seq: Sequence) -> None:
        """Before a decode step: give the newest token a block it may write, a fresh one or a copy.

        Out of free blocks: ``RuntimeError('OOM ...')`` and nothing changes (no reference dropped,
        no copy recorded).
        """
        self._check_allocated(seq)
        if not self._num_new_blocks_for_decode(seq):
            return
        if not self.free_block_ids:
            need = "a new block" if seq.num_blocks > len(seq.block_table) else "a copy of its shared last block"
            raise RuntimeError(
                f"OOM: sequence {seq.seq_id} needs {need} for token {len(seq)} but none of {self.num_blocks} "
                "blocks is free; check can_append first or free a branch"
            )
        if seq.num_blocks > len(seq.block_table):
            seq.block_table.append(self._allocate_block())
            return
        shared = seq.block_table[-1]
        fresh = self._allocate_block()
        self.blocks[shared].ref_count -= 1  # still >= 1: the other holders keep it
        seq.block_table[-1] = fresh
        self.pending_copies.append((shared, fresh))

    def take_copies(self) -> List[Copy]:
        """The copies decided since the last call, in order; the list is emptied."""
        copies, self.pending_copies = self.pending_copies, []
        return copies


FORKING_METHODS = ("fork", "may_append", "take_copies", "deallocate")


def is_forking_manager_class(cls) -> bool:
    """A ``BlockManager`` class with fork, copy-on-write and copies to take (``ForkingBlockManager``, or a
    class built on lab 08's starter)."""
    return (
        isinstance(cls, type)
        and issubclass(cls, BlockManager)
        and all(callable(getattr(cls, name, None)) for name in FORKING_METHODS)
    )
