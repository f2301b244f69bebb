"""Lab 08 grader: forking and copy-on-write, each TODO on its own points.

1. ``fork``; 2. ``may_append`` with copy-on-write (and all-or-nothing on OOM); 3. ``advance_beams``,
one beam-search step (fork the chosen again, free the pruned, append); 4. ``copy_blocks``, the runner's
block copies. A check of TODO 1 or 2 runs the student's class with paged_kv's version of the other
(``with_reference_todos``); TODO 3 runs on paged_kv's ``ForkingBlockManager``.

Every check replays seeded or scripted traces on the student's side and on the reference side by side
and compares, after every operation, what sharing looks like (``paged_kv.lab.fork_lab.shape_of_state``:
blocks named by first appearance, a copy's source just before its destination, so any free-queue order is
accepted), the tokens, the copies recorded, and the pool's invariants (ref count = tables holding the
block, free xor used); after every fork, every field of the child against the reference's child
(``fork_fields``). ``copy_blocks`` gets new lists of the caches' tensors, as the runner hands them, and
the tensors are read back from lists it never saw. Both sides of a trace, and the comparisons, are ``traces.py``.
"""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

import torch

from paged_kv.cache.forking import ForkingBlockManager as Reference
from paged_kv.cache.prefix_cache import Sequence as LocalSequence
from paged_kv.cache.steps import prefill as local_prefill
from paged_kv.engine import cache_ops
from paged_kv.engine.forking import advance_beams as reference_advance
from paged_kv.lab.fork_lab import (
    make_caches as local_caches,
    step_computed as local_step,
)

from autograder.labs.checking import (
    N_,
    CheckFailed,
    _,
    call,
    check,
    expect_equal,
    grades,
    materialize,
    plain_int,
    student_side,
    with_reference_todos,
)
from autograder.labs.lab08_fork_and_share.traces import (
    Side,
    apply,
    expect_same,
    random_ops,
    replay,
    shape,
)

# The visible tests make sequences, mix in the reference's other TODOs (where the box's package has them) and
# read the pool's shape where the student's objects live.
BOX_NAMES = ("Sequence", "with_reference_todos", "prefill", "pool_shape", "step_computed", "make_caches")


# -- TODO 1: fork ---------------------------------------------------------------------------------------
FORK_HINT = N_(
    "a fork lists the parent's blocks in a new Sequence's block_table and raises each block's ref_count by 1"
)


@grades(Reference.fork)
def check_fork(cls) -> None:
    """Forks of prompts that end inside and at the end of a block, forks of forks, freeing a parent, an
    empty pool (a fork costs no block), and seeded fork/append/free traces."""
    M = with_reference_todos(cls, "fork")
    replay(
        M,
        [("prefill", list(range(1, 8)), 4), ("fork", 0), ("fork", 1), ("fork", 0)],
        8,
        4,
        _("7-token prompt, block_size=4, forked three times"),
        FORK_HINT,
    )
    replay(
        M,
        [("prefill", list(range(1, 9)), 4), ("fork", 0), ("free", 0), ("append", 0, 5), ("compute",)],
        4,
        4,
        _("8-token prompt (two full blocks), forked, the parent freed, the child decodes"),
        FORK_HINT,
    )
    replay(
        M,
        [("prefill", [3, 1, 4], 1), ("fork", 0), ("fork", 0)],
        3,
        1,
        _("block_size=1, a full pool: forking needs no free block"),
        FORK_HINT,
    )
    replay(
        M,
        [
            ("prefill", [9, 9, 9, 9, 9], 2),
            ("fork", 0),
            ("append", 1, 7),
            ("compute",),
            ("fork", 1),
            ("append", 0, 8),
            ("compute",),
        ],
        10,
        2,
        _("the child's table is its own list: appending to the child must not change the parent's"),
        FORK_HINT,
    )
    for seed in range(6):
        rng = random.Random(100 + seed)
        block_size = rng.choice([1, 2, 3, 4, 16])
        replay(
            M,
            random_ops(rng, block_size, 14),
            60,
            block_size,
            _(f"seeded trace {seed} (block_size={block_size})"),
            FORK_HINT,
        )


# -- TODO 2: may_append with copy-on-write ---------------------------------------------------------------
COW_HINT = N_(
    "if the newest token goes into a block with ref_count > 1, take a fresh block, record (old, new) in "
    "self.pending_copies and drop one reference on the old block; a block only this sequence holds is "
    "written in place"
)


@grades(Reference.may_append)
def check_copy_on_write(cls) -> None:
    """Shared partial blocks copied once per writer, the last holder writing in place, shared full blocks
    never copied (the token starts a new block), block_size 1, and seeded traces."""
    M = with_reference_todos(cls, "may_append")
    replay(
        M,
        [("prefill", [1, 2, 3, 4, 5, 6], 4), ("fork", 0), ("append", 0, 7), ("append", 1, 8), ("compute",)],
        6,
        4,
        _("a 6-token prompt (block_size=4) and its fork both append"),
        COW_HINT,
    )
    replay(
        M,
        [
            ("prefill", [1, 2, 3], 4),
            ("fork", 0),
            ("fork", 0),
            ("append", 2, 5),
            ("append", 1, 6),
            ("append", 0, 7),
            ("compute",),
            ("append", 0, 1),
            ("compute",),
        ],
        8,
        4,
        _("three holders of a partial block write in turn: two copies, the last writes in place"),
        COW_HINT,
    )
    replay(
        M,
        [("prefill", [1, 2, 3, 4], 4), ("fork", 0), ("append", 0, 5), ("append", 1, 6), ("compute",)],
        6,
        4,
        _("a full shared last block: the new tokens start new blocks, nothing is copied"),
        COW_HINT,
    )
    replay(
        M,
        [("prefill", [1, 2, 3], 1), ("fork", 0), ("append", 1, 4), ("append", 0, 5), ("compute",)],
        8,
        1,
        _("block_size=1: every token starts a block, nothing is ever copied"),
        COW_HINT,
    )
    replay(
        M,
        [("prefill", [1, 2], 4), ("append", 0, 3), ("compute",), ("append", 0, 4), ("compute",)],
        2,
        4,
        _("a sequence alone in its block writes in place"),
        COW_HINT,
    )
    for seed in range(8):
        rng = random.Random(200 + seed)
        block_size = rng.choice([2, 3, 4, 5, 16])
        replay(
            M,
            random_ops(rng, block_size, 16),
            80,
            block_size,
            _(f"seeded trace {seed} (block_size={block_size})"),
            COW_HINT,
        )


@grades(Reference.may_append)
def check_append_oom(cls) -> None:
    """Full pools: a copy on write or a new block that cannot be had is an OOM that changes nothing;
    an in-place write needs no free block; seeded traces on small pools."""
    M = with_reference_todos(cls, "may_append")
    hint = N_("raise RuntimeError('OOM ...') before changing anything when the block you need is not free")
    replay(
        M,
        [("prefill", [1, 2, 3], 4), ("fork", 0), ("append", 0, 4)],
        1,
        4,
        _("one block in the pool, shared by two sequences: the copy cannot be made"),
        hint,
    )
    replay(
        M,
        [("prefill", [1, 2, 3, 4], 4), ("fork", 0), ("append", 1, 5)],
        1,
        4,
        _("a full shared block, no free block: the new block cannot be had"),
        hint,
    )
    replay(
        M,
        [("prefill", [1, 2, 3], 4), ("fork", 0), ("free", 0), ("append", 0, 4), ("compute",)],
        1,
        4,
        _("one holder left after a free, no free block: it writes in place"),
        hint,
    )
    replay(
        M,
        [("prefill", [1, 2], 2), ("fork", 0), ("append", 0, 3), ("append", 1, 4)],
        2,
        2,
        _("two blocks: the first writer gets the last free block, the second gets OOM"),
        hint,
    )
    for seed in range(8):
        rng = random.Random(300 + seed)
        block_size = rng.choice([1, 2, 3, 4])
        replay(
            M,
            random_ops(rng, block_size, 18),
            rng.randint(4, 9),
            block_size,
            _(f"seeded trace {seed} on a small pool (block_size={block_size})"),
            hint,
        )


# -- TODO 3: advance_beams --------------------------------------------------------------------------------
BEAM_HINT = N_(
    "fork every beam chosen more than once (before appending anything), deallocate every beam no "
    "choice names, then append each token and call manager.may_append"
)


def _beam_step_choices(rng: random.Random, beams: int, width: int) -> List[Tuple[int, int]]:
    """``width`` distinct (beam, token) pairs: some beams chosen several times, some not at all."""
    favourites = rng.sample(range(beams), rng.randint(1, beams))
    choices = set()
    while len(choices) < width:
        choices.add((rng.choice(favourites), rng.randrange(60)))
    out = sorted(choices, key=lambda c: rng.random())
    return out


def _beam_step(fn, where: str, choices: List[Tuple[int, int]], mine: Side, theirs: Side, failed_hint: str = "") -> None:
    """One beam step on both sides (the reference's ``advance_beams``, the student's ``fn``), compared, then
    computed. ``failed_hint`` replaces the hint of a student step that raised."""
    theirs.seqs = reference_advance(theirs.manager, theirs.seqs, choices)
    try:
        got = call(where, fn, mine.manager, list(mine.seqs), choices)
    except CheckFailed as failure:
        if not failed_hint:
            raise
        raise CheckFailed(where, failure.problem, hint=failed_hint) from None
    count = plain_int(where, call(where, len, got), N_("the number of beams returned"))
    check(
        count == len(choices),
        where,
        _(f"advance_beams returned {count} beams for {len(choices)} choices"),
        _("return one Sequence per choice, in the order of choices"),
        expected=len(choices),
        got=count,
    )
    mine.seqs = [got[i] for i in range(count)]
    expect_same(where, mine, theirs, BEAM_HINT)
    apply(where, ("compute",), mine, theirs, BEAM_HINT)


def run_beams(
    fn, seed: int, *, width: int, block_size: int, prompt_len: int, steps: int, num_blocks: Optional[int] = None
) -> None:
    rng = random.Random(seed)
    case = _(f"beam trace {seed} (width {width}, block_size={block_size}, {prompt_len}-token prompt)")
    pool = num_blocks or width * (-(-(prompt_len + steps) // block_size) + 1)
    mine = Side(
        call(
            _(f"{case}: creating the manager"),
            student_side(fn, "paged_kv.cache.forking.ForkingBlockManager"),
            pool,
            block_size,
        ),
        fn,
    )
    theirs = Side(Reference(pool, block_size))
    prompt = [rng.randrange(60) for _token in range(prompt_len)]
    apply(case, ("prefill", prompt, block_size), mine, theirs, BEAM_HINT)
    for step in range(steps):
        choices = _beam_step_choices(rng, len(theirs.seqs), width)
        _beam_step(fn, _(f"{case}, step {step}: choices {choices}"), choices, mine, theirs)
    for side in (theirs, mine):
        for seq in side.seqs:
            call(case, side.manager.deallocate, seq)
        side.seqs = []
    end, _raw = shape(_(f"{case}, all beams freed at the end"), mine)
    expect_equal(
        _(f"{case}, all beams freed at the end: free blocks"),
        end["free blocks"],
        pool,
        _("a block leaked: every beam that was never chosen must be deallocated"),
    )


@grades(reference_advance)
def check_beam_traces(fn) -> None:
    """Seeded beam-search steps compared after every step; block sizes 1 to 16, widths 1 to 6, and pools
    with exactly the blocks the step needs once the pruned beams are freed."""
    run_beams(fn, 1, width=3, block_size=4, prompt_len=6, steps=8)
    run_beams(fn, 2, width=4, block_size=1, prompt_len=3, steps=6)
    run_beams(fn, 3, width=6, block_size=16, prompt_len=20, steps=10)
    run_beams(fn, 4, width=1, block_size=2, prompt_len=5, steps=5)
    run_beams(fn, 5, width=2, block_size=3, prompt_len=4, steps=12)
    # Tight: one beam, forked into two each step and its sibling pruned; frees must come before appends.
    for seed, (block_size, prompt_len) in enumerate([(2, 3), (4, 4), (1, 2)]):
        _tight_beams(fn, 10 + seed, block_size, prompt_len)


def _tight_beams(fn, seed: int, block_size: int, prompt_len: int) -> None:
    """Two beams on the smallest pool the reference needs: the pruned beam's blocks pay for the copy."""
    rng = random.Random(seed)
    steps = 6
    choices_per_step = [[(0, rng.randrange(60)), (0, rng.randrange(60) + 60)] for _step in range(steps)]
    prompt = [rng.randrange(60) for _token in range(prompt_len)]
    # The smallest pool the reference runs this on without OOM.
    pool = next(n for n in range(1, 200) if _fits(n, block_size, prompt, choices_per_step))
    case = _(f"tight beam trace {seed} (2 beams, block_size={block_size}, a pool of {pool}: the least that fits)")
    mine = Side(call(case, student_side(fn, "paged_kv.cache.forking.ForkingBlockManager"), pool, block_size), fn)
    theirs = Side(Reference(pool, block_size))
    apply(case, ("prefill", prompt, block_size), mine, theirs, BEAM_HINT)
    apply(case, ("fork", 0), mine, theirs, BEAM_HINT)
    apply(case, ("compute",), mine, theirs, BEAM_HINT)
    for step, choices in enumerate(choices_per_step):
        _beam_step(
            fn,
            _(f"{case}, step {step}: choices {choices} (beam 1 is pruned)"),
            choices,
            mine,
            theirs,
            failed_hint=_(
                "the reference fits this step in this pool: free the pruned beams before appending, so their "
                "blocks can pay for the copies"
            ),
        )


def _fits(pool: int, block_size: int, prompt: List[int], steps: List[List[Tuple[int, int]]]) -> bool:
    manager = Reference(pool, block_size)
    try:
        seq = LocalSequence(prompt, block_size)
        local_prefill(manager, seq)
        beams = [seq, manager.fork(seq)]
        local_step(manager, beams)
        for choices in steps:
            beams = reference_advance(manager, beams, choices)
            local_step(manager, beams)
    except RuntimeError:
        return False
    return True


# -- TODO 4: copy_blocks ----------------------------------------------------------------------------------
COPY_HINT = N_(
    "for every layer, K and V: block dst gets every slot of block src, in place (e.g. "
    "cache[dst_ids] = cache[src_ids], or index_copy_)"
)


def _copy_case(
    fn,
    case: str,
    num_layers: int,
    num_blocks: int,
    block_size: int,
    heads: int,
    dim: int,
    copies: List[Tuple[int, int]],
) -> None:
    k, v = call(
        _(f"{case}: making the caches"),
        student_side(fn, "paged_kv.lab.fork_lab.make_caches"),
        num_layers,
        num_blocks,
        block_size,
        heads,
        dim,
    )
    # The function gets new lists of the same tensors, as the model runner hands it its caches; the tensors are
    # then read from the lists it never saw: a copy put into its lists instead of into the tensors is not seen.
    call(case, fn, [k[i] for i in range(num_layers)], [v[i] for i in range(num_layers)], list(copies))
    got_k, got_v = materialize([k[i] for i in range(num_layers)]), materialize([v[i] for i in range(num_layers)])
    want_k, want_v = local_caches(num_layers, num_blocks, block_size, heads, dim)
    untouched_k, untouched_v = local_caches(num_layers, num_blocks, block_size, heads, dim)
    cache_ops.copy_blocks(want_k, want_v, copies)
    for name, got, want in (("K", got_k, want_k), ("V", got_v, want_v)):
        for layer in range(num_layers):
            tensor = got[layer]
            check(
                isinstance(tensor, torch.Tensor)
                and tensor.shape == want[layer].shape
                and tensor.dtype == want[layer].dtype,
                case,
                _(f"layer {layer}'s {name} cache changed type or shape: copy into it in place"),
                _(COPY_HINT),
                expected=(tuple(want[layer].shape), str(want[layer].dtype)),
                got=(tuple(getattr(tensor, "shape", ())), str(getattr(tensor, "dtype", type(tensor).__name__))),
            )
            wrong = [b for b in range(num_blocks) if not torch.equal(tensor[b], want[layer][b])]
            untouched = torch.equal(tensor, untouched_k[layer] if name == "K" else untouched_v[layer])
            check(
                not (wrong and untouched),
                case,
                _(f"layer {layer}'s {name} cache tensor did not change at all with the copies {copies}"),
                _(
                    "the model reads the cache tensors it holds: write into those "
                    "tensors (in place), not into new tensors or new lists"
                ),
                expected=_("the copies made"),
                got=_("unchanged"),
            )
            check(
                not wrong,
                case,
                _(f"layer {layer}'s {name} cache: block(s) {wrong} hold the wrong values after the copies {copies}"),
                _(COPY_HINT),
            )


@grades(cache_ops.copy_blocks)
def check_copy_blocks(fn) -> None:
    """One and several copies, every layer's K and V, destinations below and above their sources, block
    size 1, several heads, no copies at all; every other block untouched; the copies land in the tensors
    themselves (read from lists the function never saw, as the runner holds its caches)."""
    _copy_case(fn, _("one copy, one layer"), 1, 4, 2, 1, 2, [(1, 3)])
    _copy_case(fn, _("three copies in each of 4 layers"), 4, 10, 4, 2, 3, [(0, 7), (5, 2), (9, 4)])
    _copy_case(fn, _("block_size=1, 2 heads of 8"), 2, 6, 1, 2, 8, [(2, 0), (3, 5)])
    _copy_case(fn, _("no copies: nothing changes"), 2, 4, 2, 1, 2, [])
    _copy_case(fn, _("one source copied to two destinations"), 3, 8, 2, 1, 4, [(4, 1), (4, 6)])
