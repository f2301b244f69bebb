"""Lab 02 grader: ``allocate_for_prefill`` (ceil division, all-or-nothing, OOM leaves no trace).

The contract fixes how many blocks a request gets and that they come from the free list; it does
not fix which free blocks are chosen, so neither does the grader.
"""
from __future__ import annotations

import random

from paged_kv import KVCacheManager as Reference, Request, check_kv_manager

from ._common import call, check, expect_oom_unchanged, grades, mirror_step, plain_ints


def _prefill_ok(cls, num_blocks: int, block_size: int, prompt_len: int, taken: int = 0) -> None:
    case = f"num_blocks={num_blocks}, block_size={block_size}, prompt_len={prompt_len}" + (
        f", {taken} block(s) already taken" if taken else "")
    manager = cls(num_blocks, block_size, 2)
    owners = [Request(99, taken * block_size)] if taken else []
    for owner in owners:
        call(case, manager.allocate_for_prefill, owner)
    free_before = plain_ints(case, manager.free_blocks, "free_blocks")
    req = Request(0, prompt_len)
    call(case, manager.allocate_for_prefill, req)
    needed = -(-prompt_len // block_size)
    table = plain_ints(case, req.block_table, "block_table")
    check(len(table) == needed, case,
          f"expected {needed} block(s) (ceil({prompt_len} / {block_size})), got block_table={table!r}. "
          "Check your rounding: a partly filled last block still needs a whole block.")
    check(all(b in free_before for b in table), case,
          f"block_table={table} must hold ids taken from the free list {free_before}")
    check(len(set(table)) == len(table), case, f"block_table={table} lists a block twice")
    check(sorted(plain_ints(case, manager.free_blocks, "free_blocks")) == sorted(set(free_before) - set(table)), case,
          f"after prefill the free list should be the old one minus {table}, got {manager.free_blocks}")
    call(case, check_kv_manager, manager, [req] + owners)


@grades(Reference.allocate_for_prefill)
def check_block_count(cls) -> None:
    """Ceil division at and around block boundaries, block_size 1 included."""
    for num_blocks, block_size, prompt_len in [(10, 4, 1), (10, 4, 3), (10, 4, 4), (10, 4, 5), (10, 4, 8),
                                               (10, 4, 9), (10, 1, 1), (10, 1, 7), (6, 16, 17), (3, 7, 21)]:
        _prefill_ok(cls, num_blocks, block_size, prompt_len)
    _prefill_ok(cls, 5, 4, 12, taken=2)  # exactly the free blocks that are left: fits


def _expect_oom(cls, num_blocks: int, block_size: int, taken: int, prompt_len: int) -> None:
    case = f"num_blocks={num_blocks}, block_size={block_size}, {taken} taken, prompt_len={prompt_len}"
    manager = cls(num_blocks, block_size, 2)
    owner = Request(1, taken * block_size) if taken else None
    if owner:
        call(case, manager.allocate_for_prefill, owner)
    expect_oom_unchanged(case, manager.allocate_for_prefill, manager, Request(2, prompt_len),
                         "Check the size before taking any block.")


@grades(Reference.allocate_for_prefill)
def check_oom_is_atomic(cls) -> None:
    """OOM by one block at the exact boundary, with one free block, and on an empty pool."""
    _expect_oom(cls, 1, 4, 0, 5)      # needs 2, has 1
    _expect_oom(cls, 4, 4, 2, 9)      # needs 3, has 2 (one short at the boundary)
    _expect_oom(cls, 3, 2, 2, 3)      # needs 2, one free block
    _expect_oom(cls, 2, 1, 2, 1)      # nothing free at all
    _expect_oom(cls, 8, 16, 0, 16 * 8 + 1)


@grades(Reference.allocate_for_prefill)
def check_random_workload(cls, seed: int = 7, steps: int = 300) -> None:
    """Prefills and releases interleaved; outcomes and free counts must match the reference."""
    rng = random.Random(seed)
    for trial in range(4):
        num_blocks, block_size = rng.choice([(8, 1), (16, 4), (24, 16), (12, 7)])
        student, reference = cls(num_blocks, block_size, 2), Reference(num_blocks, block_size, 2)
        live = []
        for step in range(steps // 4):
            case = f"random workload {trial}, step {step} (num_blocks={num_blocks}, block_size={block_size})"
            if live and rng.random() < 0.4:
                mine, theirs = live.pop(rng.randrange(len(live)))
                student.release_request(mine)
                reference.release_request(theirs)
                continue
            length = rng.randint(1, 3 * block_size * 2)
            mine, theirs = Request(step, length), Request(step, length)
            if mirror_step(f"{case}, prompt_len={length}", lambda: reference.allocate_for_prefill(theirs),
                           student.allocate_for_prefill, student, mine, "prefill"):
                live.append((mine, theirs))
            check(len(student.free_blocks) == len(reference.free_blocks), case,
                  f"{len(student.free_blocks)} free blocks, expected {len(reference.free_blocks)}")
            call(case, check_kv_manager, student, [m for m, _ in live])
