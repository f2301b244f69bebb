"""Lab 03 grader: ``allocate_for_decode`` (a block exactly when a token starts one; OOM rolls back).

Positions are 0-based everywhere: a request of ``seq_len`` tokens holds positions ``0 .. seq_len - 1``
and its next token goes to position ``seq_len``, which starts a new block when
``seq_len % block_size == 0``.
"""

from __future__ import annotations

import random

from paged_kv import KVCacheManager as Reference, Request as LocalRequest

from autograder.labs.checking import (
    N_,
    CheckFailed,
    _,
    audit_kv_manager,
    call,
    check,
    expect_equal,
    expect_oom_unchanged,
    grades,
    mirror_step,
    student_side,
)

BOX_NAMES = ("Request",)  # the visible tests' requests are made where the student's manager lives

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 3): a
# fragment of the hint, as the visible tests and these checks give it, and its section. The first match wins.
TEACHES = {
    "a full pool must not stop": "§ 2",
    "check for a free block only when": "§ 2",
    "raise oom only when the token starts": "§ 2",
    "update seq_len only after the block is secured": "§ 2",
    "raise runtimeerror('oom": "§ 2",
    "a failed decode takes nothing": "§ 2",
    "p % block_size == 0": "§ 1",
    "is your condition true for": "§ 1",
    "every token starts a block": "§ 1",
    "slot 2 of block 1 is free": "§ 1",
    "% 4 == 0: a new block": "§ 1",
}


def _walk(cls, block_size: int, prompt_len: int, steps: int) -> None:
    Request = student_side(cls, "paged_kv.Request")
    manager = cls(steps + prompt_len + 2, block_size, 2)
    req = Request(0, prompt_len)
    manager.allocate_for_prefill(req)
    for _step in range(steps):
        position, before_blocks = req.seq_len, len(req.block_table)
        starts_block = position % block_size == 0
        case = (
            _(f"block_size={block_size}, decoding the token at position {position} (0-based), which starts a new block")
            if starts_block
            else _(
                f"block_size={block_size}, decoding the token at position {position} (0-based), which fits in the last block"
            )
        )
        call(case, manager.allocate_for_decode, req)
        expect_equal(_(f"{case}: seq_len"), req.seq_len, position + 1, _("one decode step adds exactly one token"))
        expect_equal(
            _(f"{case}: blocks in req.block_table"),
            len(req.block_table),
            before_blocks + starts_block,
            _("with block_size 1 every token starts a block; is your condition true for 1?")
            if block_size == 1
            else _("the token at position p starts a new block exactly when p % block_size == 0"),
        )
        audit_kv_manager(case, manager, [req])


@grades(Reference.allocate_for_decode, teaches="§ 1")
def check_boundaries(cls) -> None:
    """Growth at exact multiples of the block size, for several block sizes."""
    for block_size, prompt_len in [(4, 4), (4, 1), (4, 6), (2, 2), (3, 5), (16, 16), (17, 1)]:
        _walk(cls, block_size, prompt_len, 3 * block_size + 2)


@grades(Reference.allocate_for_decode, teaches="§ 1")
def check_block_size_one(cls) -> None:
    """``block_size == 1``: every decoded token takes a block (the tutorial's formula never does)."""
    _walk(cls, 1, 1, 6)
    _walk(cls, 1, 3, 6)


@grades(Reference.allocate_for_decode, teaches="§ 2")
def check_oom_rolls_back(cls) -> None:
    """OOM exactly at a boundary leaves seq_len and tables as they were; no OOM when no block is needed."""
    Request = student_side(cls, "paged_kv.Request")
    manager = cls(1, 4, 2)
    req = Request(0, 4)
    manager.allocate_for_prefill(req)
    expect_oom_unchanged(
        _("block_size=4, pool full, the token at position 4 (0-based) starts a second block"),
        manager.allocate_for_decode,
        manager,
        req,
        _("Update seq_len only after the block is secured."),
    )
    manager = cls(1, 4, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    case = _("block_size=4, pool full, the token at position 2 (0-based) fits in the first block")
    try:
        call(case, manager.allocate_for_decode, req)
    except CheckFailed as failure:
        raise CheckFailed(
            case,
            _("this token needs no new block, so a full pool must not stop it"),
            got=failure.problem,
            hint=_("check for a free block only when the token starts a new block"),
        ) from None
    check(
        req.seq_len == 3 and len(req.block_table) == 1,
        case,
        _("no block is needed here, so a full pool must not stop the decode"),
        _("raise OOM only when the token starts a new block and none is free"),
        expected=(3, 1),
        got=(req.seq_len, len(req.block_table)),
    )
    manager = cls(2, 1, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    expect_oom_unchanged(
        _("block_size=1, pool full, the token at position 2 (0-based)"),
        manager.allocate_for_decode,
        manager,
        req,
        _("With block_size 1 every token needs a block."),
    )


@grades(Reference.allocate_for_decode)
def check_random_workload(cls, seed: int = 11, steps: int = 400) -> None:
    """Decodes across several live requests; outcomes and free counts must match the reference."""
    rng = random.Random(seed)
    Request = student_side(cls, "paged_kv.Request")
    for trial in range(4):
        num_blocks, block_size = rng.choice([(10, 1), (12, 4), (20, 3), (30, 16)])
        student, reference = cls(num_blocks, block_size, 2), Reference(num_blocks, block_size, 2)
        pairs = []
        for i in range(3):
            length = rng.randint(1, 2 * block_size)
            mine, theirs = Request(i, length), LocalRequest(i, length)
            reference.allocate_for_prefill(theirs)
            student.allocate_for_prefill(mine)
            pairs.append((mine, theirs))
        for step in range(steps // 4):
            mine, theirs = rng.choice(pairs)
            case = _(
                f"random workload {trial} (num_blocks={num_blocks}, block_size={block_size}), step {step}: "
                f"request {mine.request_id}, the token at position {mine.seq_len} (0-based)"
            )
            mirror_step(
                case,
                lambda: reference.allocate_for_decode(theirs),
                student.allocate_for_decode,
                student,
                mine,
                N_("decode"),
            )
            expect_equal(
                _(f"{case}: (seq_len, blocks)"),
                (mine.seq_len, len(mine.block_table)),
                (theirs.seq_len, len(theirs.block_table)),
                _("a block exactly when the token's position is a multiple of block_size"),
            )
            audit_kv_manager(case, student, [m for m, _theirs in pairs])
