"""Lab 02 grader: ``allocate_for_prefill`` (ceil division, all-or-nothing, OOM leaves no trace).

The contract fixes how many blocks a request gets and that they come from the free list; it does
not fix which free blocks are chosen, so neither does the grader.
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
    plain_ints,
    student_side,
)

BOX_NAMES = ("Request",)  # the visible tests' requests are made where the student's manager lives

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 3): a
# fragment of the hint, as the visible tests and these checks give it, and its section. The first match wins.
# Ceiling division is § 1's idea, check first then commit § 2's; taking ids out of the free list, and the
# exact fit (the task's "if fewer are free"), are the task's own.
TEACHES = {
    "not 6 // 4": "§ 1",
    "a partly filled last block still needs a whole": "§ 1",
    "an exact multiple needs no extra": "§ 1",
    "check the free count before taking anything": "§ 2",
    "check first, then take all blocks at once": "§ 2",
    "a failed prefill takes nothing": "§ 2",
    "check the size before taking any block": "§ 2",
    "raise runtimeerror('oom": "§ 2",
}


def _prefill_that_fits(case: str, manager, req) -> None:
    """The student's prefill of ``req``, which fits in the free blocks: an OOM here gets the exact-fit hint."""
    needed, free = -(-req.seq_len // manager.block_size), len(manager.free_blocks)
    try:
        call(case, manager.allocate_for_prefill, req)
    except CheckFailed as failure:
        if "OOM" not in failure.problem:
            raise
        raise CheckFailed(
            case,
            _(f"raised OOM, but the prompt of {req.seq_len} tokens needs {needed} block(s) and {free} are free"),
            got=failure.problem,
            hint=_("a request that needs exactly the free blocks fits: compare with >, not >="),
        ) from None


def _prefill_ok(cls, num_blocks: int, block_size: int, prompt_len: int, taken: int = 0) -> None:
    case = (
        _(f"num_blocks={num_blocks}, block_size={block_size}, prompt_len={prompt_len}, {taken} block(s) already taken")
        if taken
        else _(f"num_blocks={num_blocks}, block_size={block_size}, prompt_len={prompt_len}")
    )
    Request = student_side(cls, "paged_kv.Request")
    manager = cls(num_blocks, block_size, 2)
    owners = [Request(99, taken * block_size)] if taken else []
    for owner in owners:
        _prefill_that_fits(case, manager, owner)
    free_before = plain_ints(case, manager.free_blocks, "free_blocks")
    req = Request(0, prompt_len)
    needed = -(-prompt_len // block_size)
    _prefill_that_fits(case, manager, req)
    table = plain_ints(case, req.block_table, "block_table")
    expect_equal(
        _(f"{case}: blocks in req.block_table"),
        len(table),
        needed,
        _(
            f"ceil({prompt_len} / {block_size}) = {needed}: a partly filled last block still needs a whole "
            "block, and an exact multiple needs no extra one"
        ),
    )
    check(
        all(b in free_before for b in table),
        case,
        _("req.block_table holds ids that were not free"),
        _("take ids out of self.free_blocks (expected: the free ids before the call)"),
        expected=free_before,
        got=table,
    )
    check(len(set(table)) == len(table), case, _("req.block_table lists a block twice"), got=table)
    free_after = plain_ints(case, manager.free_blocks, "free_blocks")
    expect_equal(
        _(f"{case}: self.free_blocks after prefill (sorted)"),
        sorted(free_after),
        sorted(set(free_before) - set(table)),
        _("remove exactly the blocks you hand out from self.free_blocks"),
    )
    audit_kv_manager(case, manager, [req] + owners)


@grades(Reference.allocate_for_prefill)
def check_block_count(cls) -> None:
    """Ceil division at and around block boundaries, block_size 1 included."""
    for num_blocks, block_size, prompt_len in [
        (10, 4, 1),
        (10, 4, 3),
        (10, 4, 4),
        (10, 4, 5),
        (10, 4, 8),
        (10, 4, 9),
        (10, 1, 1),
        (10, 1, 7),
        (6, 16, 17),
        (3, 7, 21),
    ]:
        _prefill_ok(cls, num_blocks, block_size, prompt_len)
    _prefill_ok(cls, 5, 4, 12, taken=2)  # exactly the free blocks that are left: fits


def _expect_oom(cls, num_blocks: int, block_size: int, taken: int, prompt_len: int) -> None:
    case = _(f"num_blocks={num_blocks}, block_size={block_size}, {taken} taken, prompt_len={prompt_len}")
    Request = student_side(cls, "paged_kv.Request")
    manager = cls(num_blocks, block_size, 2)
    owner = Request(1, taken * block_size) if taken else None
    if owner:
        _prefill_that_fits(case, manager, owner)
    expect_oom_unchanged(
        case,
        manager.allocate_for_prefill,
        manager,
        Request(2, prompt_len),
        _("Check the size before taking any block."),
    )


@grades(Reference.allocate_for_prefill)
def check_oom_is_atomic(cls) -> None:
    """OOM by one block at the exact boundary, with one free block, and on an empty pool."""
    _expect_oom(cls, 1, 4, 0, 5)  # needs 2, has 1
    _expect_oom(cls, 4, 4, 2, 9)  # needs 3, has 2 (one short at the boundary)
    _expect_oom(cls, 3, 2, 2, 3)  # needs 2, one free block
    _expect_oom(cls, 2, 1, 2, 1)  # nothing free at all
    _expect_oom(cls, 8, 16, 0, 16 * 8 + 1)


@grades(Reference.allocate_for_prefill)
def check_random_workload(cls, seed: int = 7, steps: int = 300) -> None:
    """Prefills and releases interleaved; outcomes and free counts must match the reference."""
    rng = random.Random(seed)
    Request = student_side(cls, "paged_kv.Request")
    for trial in range(4):
        num_blocks, block_size = rng.choice([(8, 1), (16, 4), (24, 16), (12, 7)])
        student, reference = cls(num_blocks, block_size, 2), Reference(num_blocks, block_size, 2)
        live = []
        for step in range(steps // 4):
            case = _(f"random workload {trial}, step {step} (num_blocks={num_blocks}, block_size={block_size})")
            if live and rng.random() < 0.4:
                mine, theirs = live.pop(rng.randrange(len(live)))
                student.release_request(mine)
                reference.release_request(theirs)
                continue
            length = rng.randint(1, 3 * block_size * 2)
            mine, theirs = Request(step, length), LocalRequest(step, length)
            if mirror_step(
                _(f"{case}, prompt_len={length}"),
                lambda: reference.allocate_for_prefill(theirs),
                student.allocate_for_prefill,
                student,
                mine,
                N_("prefill"),
            ):
                live.append((mine, theirs))
            expect_equal(
                _(f"{case}: number of free blocks"),
                len(student.free_blocks),
                len(reference.free_blocks),
                _("a prefill takes exactly ceil(prompt_len / block_size) blocks, or none on OOM"),
            )
            audit_kv_manager(case, student, [m for m, _theirs in live])
