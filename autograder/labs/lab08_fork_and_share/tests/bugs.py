"""Lab 08: realistic student bugs (each must lose the points of its own TODO, and only those) and correct
variants written differently (each must keep full marks). Classes are written as the notebook writes them,
on the starter; functions as the answer cells define them."""

from __future__ import annotations

import torch

from paged_kv import Sequence
from paged_kv.lab.starters import ForkingManagerWithoutFork


class Correct(ForkingManagerWithoutFork):
    """A correct answer to TODOs 1 and 2, the base each class bug below changes in one method."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = list(parent.block_table)
        return child

    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM: no block for the new token")
            seq.block_table.append(self._allocate_block())
            return
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 1:
            if not self.free_block_ids:
                raise RuntimeError("OOM: no block for the copy")
            fresh = self._allocate_block()
            self.blocks[last].ref_count -= 1
            seq.block_table[-1] = fresh
            self.pending_copies.append((last, fresh))


# ---- TODO 1: fork ------------------------------------------------------------------------------------
class ForkSharesTheList(Correct):
    """``child.block_table = parent.block_table``: one list for two sequences."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = parent.block_table
        return child


class ForkWithoutRefCounts(Correct):
    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        child.block_table = list(parent.block_table)
        return child


class ForkCopiesEveryBlock(Correct):
    """A fork that copies: a fresh block (and a recorded copy) per block, half made when the pool runs out."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        for block_id in parent.block_table:
            fresh = self._allocate_block()
            self.pending_copies.append((block_id, fresh))
            child.block_table.append(fresh)
        return child


class ForkForgetsCachedTokens(Correct):
    """The child starts with ``num_cached_tokens = 0``: the engine would recompute the whole prompt."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = list(parent.block_table)
        return child


class ForkForgetsThePromptLength(Correct):
    """The child keeps ``Sequence``'s own ``num_prompt_tokens`` (every token it was made with): a fork after
    decode steps counts the parent's generated tokens as prompt. The old grader compared only the tokens, the
    cached tokens and the blocks, and gave this full marks."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(parent.token_ids, self.block_size)
        child.num_cached_tokens = parent.num_cached_tokens
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = list(parent.block_table)
        return child


class ForkSharesTheTokenList(Correct):
    """``child.token_ids = parent.token_ids``: a token appended to one appears in the other."""

    def fork(self, parent):
        child = Correct.fork(self, parent)
        child.token_ids = parent.token_ids
        return child


class ForkIsAShallowCopy(Correct):
    """``copy.copy(parent)`` with its own lists: the child keeps the parent's ``seq_id``."""

    def fork(self, parent):
        import copy

        self._check_allocated(parent)
        child = copy.copy(parent)
        child.token_ids = list(parent.token_ids)
        child.block_table = list(parent.block_table)
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        return child


# ---- TODO 2: may_append with copy-on-write -----------------------------------------------------------
class CopiesOnEveryAppend(Correct):
    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())
            return
        if not self.free_block_ids:
            raise RuntimeError("OOM")
        last = seq.block_table[-1]
        fresh = self._allocate_block()
        self.blocks[last].ref_count -= 1
        if self.blocks[last].ref_count == 0:
            self._deallocate_block(last)
        seq.block_table[-1] = fresh
        self.pending_copies.append((last, fresh))


class NeverCopies(Correct):
    """Lab 05's may_append: the shared partial block is written in place."""

    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())


class CopyKeepsTheOldReference(Correct):
    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())
            return
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 1:
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            fresh = self._allocate_block()
            seq.block_table[-1] = fresh
            self.pending_copies.append((last, fresh))


class CopiesOnlyWhenThreeShare(Correct):
    """``ref_count > 2``: two holders of a block write into it in place."""

    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())
            return
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 2:
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            fresh = self._allocate_block()
            self.blocks[last].ref_count -= 1
            seq.block_table[-1] = fresh
            self.pending_copies.append((last, fresh))


class DropsTheReferenceBeforeTheOomCheck(Correct):
    """Half made on OOM: the old block lost a reference before the missing free block was noticed."""

    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())
            return
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 1:
            self.blocks[last].ref_count -= 1
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            fresh = self._allocate_block()
            seq.block_table[-1] = fresh
            self.pending_copies.append((last, fresh))


class ForgetsToRecordTheCopy(Correct):
    def may_append(self, seq):
        self._check_allocated(seq)
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())
            return
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 1:
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            fresh = self._allocate_block()
            self.blocks[last].ref_count -= 1
            seq.block_table[-1] = fresh


class CopiesASharedFullBlock(Correct):
    """Checks sharing before growth: a full shared last block is copied, then a new block is added too."""

    def may_append(self, seq):
        self._check_allocated(seq)
        last = seq.block_table[-1]
        if self.blocks[last].ref_count > 1:
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            fresh = self._allocate_block()
            self.blocks[last].ref_count -= 1
            seq.block_table[-1] = fresh
            self.pending_copies.append((last, fresh))
        if seq.num_blocks > len(seq.block_table):
            if not self.free_block_ids:
                raise RuntimeError("OOM")
            seq.block_table.append(self._allocate_block())


# ---- TODO 3: advance_beams ---------------------------------------------------------------------------
def appends_before_forking(manager, beams, choices):
    """Each choice handled at once: a later fork of the same beam inherits the token just appended."""
    continued, new_beams = set(), []
    for b, token in choices:
        seq = beams[b] if b not in continued else manager.fork(beams[b])
        continued.add(b)
        seq.append_token(token)
        manager.may_append(seq)
        new_beams.append(seq)
    for b, seq in enumerate(beams):
        if b not in continued:
            manager.deallocate(seq)
    return new_beams


def frees_after_appending(manager, beams, choices):
    """Right beams, but the pruned ones are freed last: the step needs more free blocks at its peak."""
    continued, new_beams = set(), []
    for b, _ in choices:
        new_beams.append(beams[b] if b not in continued else manager.fork(beams[b]))
        continued.add(b)
    for seq, (_, token) in zip(new_beams, choices):
        seq.append_token(token)
        manager.may_append(seq)
    for b, seq in enumerate(beams):
        if b not in continued:
            manager.deallocate(seq)
    return new_beams


def frees_pruned_blocks_directly(manager, beams, choices):
    """Treats a pruned beam's blocks as its own: blocks its siblings still hold go back to the pool."""
    continued, new_beams = set(), []
    for b, _ in choices:
        new_beams.append(beams[b] if b not in continued else manager.fork(beams[b]))
        continued.add(b)
    for b, seq in enumerate(beams):
        if b not in continued:
            for block_id in seq.block_table:
                if block_id in manager.used_block_ids:
                    manager.blocks[block_id].ref_count = 0
                    manager._deallocate_block(block_id)
            seq.block_table.clear()
    for seq, (_, token) in zip(new_beams, choices):
        seq.append_token(token)
        manager.may_append(seq)
    return new_beams


def never_frees_pruned_beams(manager, beams, choices):
    continued, new_beams = set(), []
    for b, _ in choices:
        new_beams.append(beams[b] if b not in continued else manager.fork(beams[b]))
        continued.add(b)
    for seq, (_, token) in zip(new_beams, choices):
        seq.append_token(token)
        manager.may_append(seq)
    return new_beams


def returns_beams_sorted_by_parent(manager, beams, choices):
    """Right forks, frees and appends, but the new beams come back ordered by parent, not as ``choices``."""
    order = sorted(range(len(choices)), key=lambda i: choices[i][0])
    continued = set()
    new_beams = {}
    for i in order:
        b = choices[i][0]
        new_beams[i] = beams[b] if b not in continued else manager.fork(beams[b])
        continued.add(b)
    for b, seq in enumerate(beams):
        if b not in continued:
            manager.deallocate(seq)
    for i, (_, token) in enumerate(choices):
        new_beams[i].append_token(token)
        manager.may_append(new_beams[i])
    return [new_beams[i] for i in order]


# ---- TODO 4: copy_blocks -----------------------------------------------------------------------------
def copies_only_k(k_caches, v_caches, copies):
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies])
    dst = torch.tensor([d for _, d in copies])
    for cache in k_caches:
        cache[dst] = cache[src]


def copies_only_layer_0(k_caches, v_caches, copies):
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies])
    dst = torch.tensor([d for _, d in copies])
    for cache in (k_caches[0], v_caches[0]):
        cache[dst] = cache[src]


def copies_the_wrong_way(k_caches, v_caches, copies):
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies])
    dst = torch.tensor([d for _, d in copies])
    for cache in list(k_caches) + list(v_caches):
        cache[src] = cache[dst]


def copies_into_a_new_tensor(k_caches, v_caches, copies):
    """``cache = cache.index_copy(...)``: a new tensor, the runner's caches unchanged."""
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies])
    dst = torch.tensor([d for _, d in copies])
    for cache in list(k_caches) + list(v_caches):
        cache = cache.index_copy(0, dst, cache[src])


def puts_new_tensors_in_the_list(k_caches, v_caches, copies):
    """``k_caches[layer] = k_caches[layer].index_copy(...)``: the list holds copied tensors, the tensors the
    runner's model reads are unchanged. The old grader read the tensors back from that same list, and gave
    this full marks."""
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies])
    dst = torch.tensor([d for _, d in copies])
    for caches in (k_caches, v_caches):
        for layer in range(len(caches)):
            caches[layer] = caches[layer].index_copy(0, dst, caches[layer][src])


def copies_the_first_pair_only(k_caches, v_caches, copies):
    if not copies:
        return
    src, dst = copies[0]
    for cache in list(k_caches) + list(v_caches):
        cache[dst] = cache[src]


# ---- correct, written differently ---------------------------------------------------------------------
class ReadsTheGivenHelper(ForkingManagerWithoutFork):
    """Fork built with a comprehension; may_append in the given helper's terms, copies counted first."""

    def fork(self, parent):
        self._check_allocated(parent)
        child = Sequence(list(parent.token_ids), self.block_size)
        child.block_table = [block_id for block_id in parent.block_table]
        for block_id in child.block_table:
            self.blocks[block_id].ref_count = self.blocks[block_id].ref_count + 1
        child.num_prompt_tokens, child.num_cached_tokens = parent.num_prompt_tokens, parent.num_cached_tokens
        return child

    def may_append(self, seq):
        self._check_allocated(seq)
        if self._num_new_blocks_for_decode(seq) > self.num_free_blocks:
            raise RuntimeError(f"OOM: sequence {seq.seq_id}")
        grows = seq.num_blocks == len(seq.block_table) + 1
        if grows:
            seq.block_table.append(self._allocate_block())
        elif self.blocks[seq.block_table[-1]].ref_count >= 2:
            old = seq.block_table.pop()
            self.blocks[old].ref_count -= 1
            new = self._allocate_block()
            seq.block_table.append(new)
            self.pending_copies += [(old, new)]


class ChecksWithCanAppend(Correct):
    """may_append asks the given ``can_append`` whether the pool has the block (a new one or a copy) first, as the
    lab's table of given helpers offers, then decides which of the two it is."""

    def may_append(self, seq):
        self._check_allocated(seq)
        if not self.can_append(seq):
            raise RuntimeError(f"OOM: sequence {seq.seq_id} needs a block and none is free")
        if seq.num_blocks > len(seq.block_table):
            seq.block_table.append(self._allocate_block())
        elif self.blocks[seq.block_table[-1]].ref_count > 1:
            shared = seq.block_table[-1]
            seq.block_table[-1] = self._allocate_block()
            self.blocks[shared].ref_count -= 1
            self.pending_copies.append((shared, seq.block_table[-1]))


def forks_every_choice_then_frees_all(manager, beams, choices):
    """Forks for every choice, then drops every old beam: the same tables and counts as continuing one."""
    new_beams = [manager.fork(beams[b]) for b, _ in choices]
    for seq in beams:
        manager.deallocate(seq)
    for seq, (_, token) in zip(new_beams, choices):
        seq.append_token(token)
        manager.may_append(seq)
    return new_beams


def counts_choices_first(manager, beams, choices):
    from collections import Counter

    wanted = Counter(b for b, _ in choices)
    for b in range(len(beams)):
        if not wanted[b]:
            manager.deallocate(beams[b])
    seen = set()
    out = []
    for b, _ in choices:
        out.append(manager.fork(beams[b]) if b in seen else beams[b])
        seen.add(b)
    for i in range(len(out)):
        out[i].append_token(choices[i][1])
        manager.may_append(out[i])
    return out


def copies_pair_by_pair(k_caches, v_caches, copies):
    for src, dst in copies:
        for layer in range(len(k_caches)):
            k_caches[layer][dst].copy_(k_caches[layer][src])
            v_caches[layer][dst].copy_(v_caches[layer][src])


def copies_with_index_copy(k_caches, v_caches, copies):
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies], dtype=torch.long)
    dst = torch.tensor([d for _, d in copies], dtype=torch.long)
    for k, v in zip(k_caches, v_caches):
        k.index_copy_(0, dst, k.index_select(0, src))
        v.index_copy_(0, dst, v.index_select(0, src))


# TODO number -> bugs of that TODO
BUGS = {
    ForkSharesTheList: 1,
    ForkWithoutRefCounts: 1,
    ForkCopiesEveryBlock: 1,
    ForkForgetsCachedTokens: 1,
    ForkForgetsThePromptLength: 1,
    ForkSharesTheTokenList: 1,
    ForkIsAShallowCopy: 1,
    CopiesOnEveryAppend: 2,
    NeverCopies: 2,
    CopyKeepsTheOldReference: 2,
    CopiesOnlyWhenThreeShare: 2,
    DropsTheReferenceBeforeTheOomCheck: 2,
    ForgetsToRecordTheCopy: 2,
    CopiesASharedFullBlock: 2,
    appends_before_forking: 3,
    frees_after_appending: 3,
    frees_pruned_blocks_directly: 3,
    never_frees_pruned_beams: 3,
    returns_beams_sorted_by_parent: 3,
    copies_only_k: 4,
    copies_only_layer_0: 4,
    copies_the_wrong_way: 4,
    copies_into_a_new_tensor: 4,
    copies_the_first_pair_only: 4,
    puts_new_tensors_in_the_list: 4,
}
# Bugs the grader of issue 27 catches and the one before it gave full marks (test_lab08_grader proves both).
MISSED_BEFORE_ISSUE_27 = (ForkForgetsThePromptLength, ForkIsAShallowCopy, puts_new_tensors_in_the_list)
VARIANTS = {
    ReadsTheGivenHelper: (1, 2),
    ChecksWithCanAppend: (2,),
    forks_every_choice_then_frees_all: (3,),
    counts_choices_first: (3,),
    copies_pair_by_pair: (4,),
    copies_with_index_copy: (4,),
}
