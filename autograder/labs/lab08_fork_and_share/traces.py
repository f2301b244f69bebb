"""Lab 08's traces on both sides: the student's manager and ``paged_kv``'s, the same operations on each, compared
after every one (what ``checks.py`` grades with; its module doc says what is compared).

``Side`` holds a manager and its live sequences, on the student's side or this process's; ``apply`` runs one
operation (prefill, fork, append, free, compute) on both; ``expect_same`` and ``expect_same_child`` compare them;
``replay`` runs a list of operations from a new manager on each side; ``random_ops`` makes a seeded list. A hint
they are given is the checks' English, marked ``N_`` where it is written: they translate it where they show it.
"""

from __future__ import annotations

import random
from typing import List, Tuple

from paged_kv.cache.forking import ForkingBlockManager as Reference
from paged_kv.cache.invariants import check_block_state
from paged_kv.lab.fork_lab import SEQUENCE_FIELDS, fork_fields, shape_of_state

from autograder.labs.checking import (
    N_,
    CheckFailed,
    _,
    call,
    check,
    expect_equal,
    materialize,
    plain_int,
    plain_ints,
    student_side,
)


class Side:
    """A manager and its live sequences, on the student's side (``remote``) or this process's."""

    def __init__(self, manager, anchor=None):
        self.manager, self.anchor, self.seqs = manager, anchor, []

    def box(self, path: str):
        return student_side(self.anchor, path)


def shape(case: str, side: Side) -> Tuple[dict, dict]:
    """``(shape, raw state)`` of a side, every value checked to be plain data."""
    read = side.box("paged_kv.cache.invariants.block_manager_state")
    raw = materialize(call(case, read, side.manager, list(side.seqs)))
    check(type(raw) is dict, case, _("the manager's state could not be read"), got=raw)
    tables = [plain_ints(case, t, N_(f"seq {i}'s block_table")) for i, t in enumerate(raw["block tables"])]
    refs = plain_ints(case, raw["ref counts"], N_("the blocks' ref_count"))
    free = len(plain_ints(case, raw["free queue (in order)"], "free_block_ids"))
    copies = materialize(call(case, getattr, side.manager, "pending_copies"))
    check(type(copies) is list, case, _("pending_copies should be a list of (source, destination) pairs"), got=copies)
    pairs = []
    for pair in copies:
        check(
            type(pair) in (tuple, list) and len(pair) == 2,
            case,
            _("each pending copy is a (source, destination) pair"),
            _("append the pair (old block id, new block id) to self.pending_copies"),
            got=pair,
        )
        src, dst = (plain_int(case, v, N_("a pending copy's block id")) for v in pair)
        pairs.append((src, dst))
    if any(not 0 <= b < len(refs) for b in plain_ints(case, [b for t in tables for b in t], N_("block ids"))):
        raise CheckFailed(case, _("a block table holds an id outside the pool"), got=tables)
    return shape_of_state(tables, refs, free, pairs), raw


SHAPE_KEYS = (N_("tables"), N_("ref counts"), N_("free blocks"), N_("copies"))  # shape_of_state's, as shown


def expect_same(case: str, mine: Side, theirs: Side, hint: str) -> None:
    got, raw = shape(case, mine)
    want, _raw = shape(case, theirs)
    shown = _(hint)
    expect_equal(
        _(f"{case}: each sequence's token_ids"), raw["seq token ids"], [list(s.token_ids) for s in theirs.seqs], shown
    )
    expect_equal(
        _(f"{case}: each sequence's num_cached_tokens"),
        raw["num_cached_tokens"],
        [s.num_cached_tokens for s in theirs.seqs],
        _("a fork's tokens are already computed: copy the parent's num_cached_tokens") if "fork" in hint else shown,
    )
    for key in SHAPE_KEYS:
        expect_equal(
            _(f"{case}: {key} (blocks named b0, b1, ... in order of first appearance)"), got[key], want[key], shown
        )
    try:
        check_block_state(raw)
    except AssertionError as failure:
        raise CheckFailed(case, _(f"the pool is inconsistent: {failure}"), hint=shown) from None


CHILD_HINT = N_(
    "a fork is a new Sequence that is its parent's twin in every field (the same tokens, prompt length "
    "and computed tokens), with lists of its own"
)


def expect_same_child(case: str, mine: Side, theirs: Side, parent: int) -> None:
    """Every field of the fork just made against the reference's fork (``fork_fields``): the counters the
    engine reads (prompt length, cached and scheduled tokens), the tokens, and lists of its own."""
    hint = _(CHILD_HINT)
    want = fork_fields(theirs.seqs[-1], theirs.seqs[parent])
    read = mine.box("paged_kv.lab.fork_lab.fork_fields")
    got = materialize(call(case, read, mine.seqs[-1], mine.seqs[parent]))
    check(type(got) is dict and set(got) == set(want), case, _("the child's fields could not be read"), hint, got=got)
    check(got["a Sequence"] is True, case, _("fork returned something that is not a Sequence"), hint)
    check(
        got["its own seq_id"] is True,
        case,
        _("the child has the parent's seq_id: it is the parent itself, or a shallow copy of it"),
        hint,
    )
    for name in SEQUENCE_FIELDS:
        expect_equal(
            _(f"{case}: the child's {name} (the reference's child has the parent's)"), got[name], want[name], hint
        )
    check(
        got["its own token_ids list"] is True,
        case,
        _("the child's token_ids is the parent's list object: a token appended to one would appear in the other"),
        hint,
    )
    check(
        got["its own block_table list"] is True,
        case,
        _("the child's block_table is the parent's list object: a copy on write in one would change the other's table"),
        hint,
    )


def apply(case: str, op: tuple, mine: Side, theirs: Side, hint: str) -> None:
    """One trace operation on both sides; an OOM of the reference must be an unchanged OOM of the student's."""
    kind = op[0]
    if kind == "prefill":
        for side in (theirs, mine):
            seq = side.box("paged_kv.Sequence")(list(op[1]), op[2])
            call(case, side.box("paged_kv.cache.steps.prefill"), side.manager, seq)
            side.seqs.append(seq)
    elif kind == "fork":
        for side in (theirs, mine):
            side.seqs.append(call(case, side.manager.fork, side.seqs[op[1]]))
        expect_same_child(case, mine, theirs, op[1])
    elif kind == "free":
        for side in (theirs, mine):
            call(case, side.manager.deallocate, side.seqs.pop(op[1]))
    elif kind == "compute":
        for side in (theirs, mine):
            call(case, side.box("paged_kv.lab.fork_lab.step_computed"), side.manager, list(side.seqs))
    elif kind == "append":
        _kind, i, token = op
        theirs.seqs[i].append_token(token)
        try:
            theirs.manager.may_append(theirs.seqs[i])
        except RuntimeError:
            theirs.seqs[i].token_ids.pop()
            expect_unchanged_oom(case, mine, i, token, hint)
            return
        seq = mine.seqs[i]
        call(case, seq.append_token, token)
        try:
            call(case, mine.manager.may_append, seq)
        except CheckFailed as failure:
            raise CheckFailed(
                case,
                failure.problem,
                hint=_(
                    "the reference, in the same state, completes this "
                    "may_append: raise OOM only when a block is needed and none is free"
                ),
            ) from None
    else:  # pragma: no cover - a grader bug
        raise ValueError(op)


def expect_unchanged_oom(case: str, mine: Side, i: int, token: int, hint: str) -> None:
    before, _raw = shape(case, mine)
    seq = mine.seqs[i]
    call(case, seq.append_token, token)
    try:
        mine.manager.may_append(seq)
    except NotImplementedError:  # an unwritten TODO (a RuntimeError subclass): not an OOM
        raise
    except RuntimeError as error:
        check("OOM" in str(error), case, _("an OOM must raise RuntimeError('OOM ...')"), got=str(error))
    except Exception as error:  # noqa: BLE001 - the student's own failure, reported as such
        raise CheckFailed(
            case,
            _(f"with no free block this may_append raised {type(error).__name__}: {error}"),
            hint=_("raise RuntimeError('OOM ...') before changing anything"),
        ) from None
    else:
        raise CheckFailed(
            case,
            _("no free block is left, yet may_append raised no OOM"),
            hint=_("a copy on write needs a free block too: check before taking one"),
        )
    finally:
        call(case, seq.token_ids.pop)
    after, _raw = shape(case, mine)
    check(
        after == before,
        case,
        _("a failed may_append must change nothing (tables, ref counts, free blocks, copies)"),
        _("check for a free block before dropping a reference or recording a copy"),
        expected=before,
        got=after,
    )


def replay(
    cls, ops: List[tuple], num_blocks: int, block_size: int, case: str, hint: str, reference_cls: type = Reference
) -> None:
    mine = Side(call(_(f"{case}: creating the manager"), cls, num_blocks, block_size), cls)
    theirs = Side(reference_cls(num_blocks, block_size))
    for step, op in enumerate(ops):
        where = _(f"{case}, step {step}: {describe(op)}")
        apply(where, op, mine, theirs, hint)
        expect_same(where, mine, theirs, hint)


def describe(op: tuple) -> str:
    if op[0] == "prefill":
        return _(f"prefill of a {len(op[1])}-token prompt")
    if op[0] == "append":
        return _(f"append a token to seq {op[1]} and may_append")
    if op[0] == "compute":
        return _("the step is computed (copies taken, tokens cached)")
    if op[0] == "fork":
        return _(f"fork seq {op[1]}")
    return _(f"free seq {op[1]}")


def random_ops(rng: random.Random, block_size: int, steps: int, max_seqs: int = 5) -> List[tuple]:
    """Prefill one prompt, then fork, append (a decode step: append to all, compute), free, at random."""
    ops = [("prefill", [rng.randrange(50) for _token in range(rng.randint(1, 3 * block_size))], block_size)]
    live = 1
    for _step in range(steps):
        r = rng.random()
        if r < 0.3 and live < max_seqs:
            ops.append(("fork", rng.randrange(live)))
            live += 1
        elif r < 0.4 and live > 1:
            ops.append(("free", rng.randrange(live)))
            live -= 1
        else:
            for i in rng.sample(range(live), live):
                ops.append(("append", i, rng.randrange(50)))
            ops.append(("compute",))
    return ops
