"""Lab 05's student manager beside the reference (``paged_kv.BlockManager``): a manager's whole state as plain values,
compared key by key, and the same operations (nano-vllm's scheduler's admissions, decodes and releases, seeded) run
on both at once. The checks (``checks.py``) grade each part with these."""

from __future__ import annotations

import random
from collections import deque
from typing import List, Tuple

from paged_kv import BlockManager as Reference, Sequence as LocalSequence
from paged_kv.cache.invariants import check_block_state

from autograder.labs.checking import (
    N_,
    _,
    call,
    check,
    expect_equal,
    joined,
    materialize,
    plain_int,
    plain_ints,
    student_side,
)


def seq_for(manager, tokens, block_size: int):
    """A ``Sequence`` on the side where ``manager`` lives (the grading kernel's, or this process's)."""
    return student_side(manager, "paged_kv.Sequence")(list(tokens), block_size)


# -- state of a manager, as plain values ----------------------------------------------------------------
def state(case: str, manager, seqs, raw_out: list = None) -> dict:
    """Everything the policy fixes: tables, cached tokens, ref counts, hashes, free order, used set, map.

    Read in one go where the manager lives (``paged_kv.cache.invariants.block_manager_state``), then every
    value is checked to be a plain int here."""
    raw = materialize(call(case, student_side(manager, "paged_kv.cache.invariants.block_manager_state"), manager, seqs))
    check(type(raw) is dict, case, _("the manager's state could not be read"), got=raw)
    if raw_out is not None:
        raw_out.append(raw)
    ids = plain_ints(case, raw["block ids"], N_("the blocks' block_id"))
    mapping = {}
    for pair in raw["hash_to_block_id"]:
        h, block_id = pair if type(pair) is tuple and len(pair) == 2 else (pair, None)
        mapping[plain_int(case, h, N_("a hash_to_block_id key"))] = plain_int(
            case, block_id, N_("a hash_to_block_id value")
        )
    return {
        N_("block tables"): [
            plain_ints(case, t, N_(f"seq {i}'s block_table")) for i, t in enumerate(raw["block tables"])
        ],
        "num_cached_tokens": [plain_int(case, n, "num_cached_tokens") for n in raw["num_cached_tokens"]],
        N_("ref counts"): [plain_int(case, n, N_(f"block {b}'s ref_count")) for b, n in zip(ids, raw["ref counts"])],
        N_("block hashes"): [plain_int(case, h, N_(f"block {b}'s hash")) for b, h in zip(ids, raw["block hashes"])],
        N_("block token ids"): [
            plain_ints(case, t, N_(f"block {b}'s token_ids")) for b, t in zip(ids, raw["block token ids"])
        ],
        N_("free queue (in order)"): plain_ints(case, raw["free queue (in order)"], "free_block_ids"),
        N_("used blocks"): plain_ints(case, raw["used blocks"], "used_block_ids"),
        "hash_to_block_id": mapping,
    }


def expect_same_state(case: str, student, student_seqs, reference, reference_seqs, hint: str) -> None:
    """The student's manager's state (``state``) equals the reference's, key by key; ``hint`` marked ``N_``."""
    raw: list = []
    mine, theirs = state(case, student, student_seqs, raw), state(case, reference, reference_seqs)
    hint = _(hint)
    for key in theirs:
        expect_equal(joined(case, key), mine[key], theirs[key], hint)
    call(case, check_block_state, raw[0])


# -- nano-vllm's scheduler, on two managers at once -----------------------------------------------------
class Twin:
    """One request as a pair of ``Sequence`` objects: the student's manager's and the reference's."""

    def __init__(self, tokens: List[int], block_size: int, sequence):
        self.mine, self.theirs = sequence(tokens, block_size), LocalSequence(tokens, block_size)

    def append(self, token: int) -> None:
        self.mine.append_token(token)
        self.theirs.append_token(token)


def compute_tokens(case: str, manager, seq, tokens: int = None) -> None:
    """The model computed ``tokens`` of ``seq`` (default: all not cached yet): the manager registers the
    blocks they filled, then they count as cached. Done where the manager lives (one request)."""
    if tokens is None:
        call(case, student_side(manager, "paged_kv.cache.steps.compute_rest"), manager, seq)
    else:
        call(case, student_side(manager, "paged_kv.cache.steps.compute"), manager, seq, tokens)


def run_trace(cls, seed: int, hint: str, *, steps: int = 60) -> None:
    """A seeded engine run on ``cls`` and on the reference, compared after every step.

    Like nano-vllm's scheduler: admit from the head of the waiting queue while ``can_allocate`` says
    it fits (several prompts can be admitted in one step, before any of them is hashed), then decode
    the running ones, preempting the newest when a block is missing; finished requests are released.
    Prompts share a few system prompts so that prefix hits, sharing and cached-free reuse all happen.
    ``hint`` is marked ``N_`` where it is written.
    """
    hint = _(hint)
    rng = random.Random(seed)
    Sequence = student_side(cls, "paged_kv.Sequence")  # the student's manager gets the kernel's sequences
    block_size = rng.choice([1, 2, 3, 4])
    num_blocks = rng.randint(6, 16)
    student, reference = (
        call(_(f"trace {seed}: creating the manager"), cls, num_blocks, block_size),
        Reference(num_blocks, block_size),
    )
    systems = [[rng.randrange(40) for _token in range(rng.randint(1, 3 * block_size))] for _system in range(3)]
    waiting: deque = deque()
    running: List[Twin] = []
    for step in range(steps):
        if rng.random() < 0.6:
            own = [rng.randrange(40) for _token in range(rng.randint(0, 2 * block_size))]
            waiting.append(Twin(rng.choice(systems) + own if rng.random() < 0.85 else own or [1], block_size, Sequence))
        case = _(f"trace {seed} (block_size={block_size}, {num_blocks} blocks), step {step}")
        admitted: List[Twin] = []
        while waiting:
            twin = waiting[0]
            expected = reference.can_allocate(twin.theirs)
            got = plain_int(case, call(case, student.can_allocate, twin.mine), N_("can_allocate's result"))
            expect_equal(_(f"{case}: can_allocate for a {len(twin.theirs)}-token prompt"), got, expected, hint)
            if expected == -1:
                break
            reference.allocate(twin.theirs, expected)
            call(case, student.allocate, twin.mine, expected)
            expect_equal(
                _(f"{case}: num_cached_tokens right after allocate"),
                twin.mine.num_cached_tokens,
                twin.theirs.num_cached_tokens,
                hint,
            )
            waiting.popleft()
            admitted.append(twin)
        for twin in admitted:  # the model computes the whole admitted batch, then every block is hashed
            for seq, manager in ((twin.theirs, reference), (twin.mine, student)):
                compute_tokens(case, manager, seq)
        running.extend(admitted)
        if not admitted:
            for twin in list(running):
                if twin not in running:
                    continue
                twin.append(rng.randrange(40))  # the token sampled last step: this step computes its KV
                while not reference.can_append(twin.theirs):
                    victim = running.pop()  # preempt the newest running request
                    reference.deallocate(victim.theirs)
                    call(_(f"{case}: preempting a request"), student.deallocate, victim.mine)
                    waiting.appendleft(victim)
                    if victim is twin:
                        break
                else:
                    reference.may_append(twin.theirs)
                    call(case, student.may_append, twin.mine)
                    for seq, manager in ((twin.theirs, reference), (twin.mine, student)):
                        compute_tokens(case, manager, seq, 1)
        for twin in [t for t in running if rng.random() < 0.15]:
            running.remove(twin)
            reference.deallocate(twin.theirs)
            call(_(f"{case}: releasing a finished request"), student.deallocate, twin.mine)
        expect_same_state(case, student, [t.mine for t in running], reference, [t.theirs for t in running], hint)


def admit_and_compute(manager, seq) -> int:
    hits = plain_int(_("prefill"), manager.can_allocate(seq), N_("can_allocate's result"))
    if hits < 0:
        raise RuntimeError(_(f"OOM: can_allocate returned {hits}"))
    manager.allocate(seq, hits)
    compute_tokens(_("prefill"), manager, seq)
    return hits


def manager_pair(cls, num_blocks: int, block_size: int) -> Tuple[object, Reference]:
    return cls(num_blocks, block_size), Reference(num_blocks, block_size)


OPS = {"prefill": N_("prefill"), "batch": N_("a batch admitted in one step"), "free": N_("free a sequence")}  # shown


def same_ops(case: str, student, reference, ops, hint: str) -> None:
    """Run ``ops`` (``(kind, tokens or index)``) on both managers and compare the state after each; ``hint`` is
    marked ``N_`` where it is written."""
    hint = _(hint)
    mine: list = []
    theirs: list = []
    for i, (kind, arg) in enumerate(ops):
        step = _(f"{case}, op {i + 1} ({OPS[kind]})")
        if kind == "prefill":
            theirs.append(LocalSequence(arg, reference.block_size))
            mine.append(seq_for(student, arg, reference.block_size))
            expected = reference.can_allocate(theirs[-1])
            got = plain_int(step, call(step, student.can_allocate, mine[-1]), N_("can_allocate's result"))
            expect_equal(_(f"{step}: can_allocate for {arg}"), got, expected, hint)
            reference.allocate(theirs[-1], expected)
            call(step, student.allocate, mine[-1], expected)
            expect_equal(
                _(f"{step}: num_cached_tokens right after allocate"),
                mine[-1].num_cached_tokens,
                theirs[-1].num_cached_tokens,
                _("allocate sets num_cached_tokens = hits * block_size"),
            )
            for manager, seq in ((reference, theirs[-1]), (student, mine[-1])):
                compute_tokens(step, manager, seq)
        elif kind == "batch":  # admitted in one step: all allocated before any is computed and hashed
            new = [
                (LocalSequence(tokens, reference.block_size), seq_for(student, tokens, reference.block_size))
                for tokens in arg
            ]
            for ref_seq, my_seq in new:
                expected = reference.can_allocate(ref_seq)
                got = plain_int(step, call(step, student.can_allocate, my_seq), N_("can_allocate's result"))
                expect_equal(_(f"{step}: can_allocate for {ref_seq.token_ids}"), got, expected, hint)
                reference.allocate(ref_seq, expected)
                call(step, student.allocate, my_seq, expected)
            for ref_seq, my_seq in new:
                for manager, seq in ((reference, ref_seq), (student, my_seq)):
                    compute_tokens(step, manager, seq)
                theirs.append(ref_seq)
                mine.append(my_seq)
        elif kind == "free":
            reference.deallocate(theirs.pop(arg))
            freed = mine.pop(arg)
            call(step, student.deallocate, freed)
            expect_equal(
                _(f"{step}: the freed sequence's block_table"),
                freed.block_table,
                [],
                _("deallocate clears seq.block_table"),
            )
            expect_equal(
                _(f"{step}: the freed sequence's num_cached_tokens"),
                freed.num_cached_tokens,
                0,
                _("deallocate sets seq.num_cached_tokens = 0"),
            )
        expect_same_state(step, student, mine, reference, theirs, hint)
