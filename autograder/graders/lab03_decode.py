"""Lab 03 grader: ``allocate_for_decode`` (a block exactly when a token starts one; OOM rolls back)."""
from __future__ import annotations

import random

from paged_kv import KVCacheManager as Reference, Request, check_kv_manager

from ._common import call, check, expect_oom_unchanged, grades, mirror_step


def _walk(cls, block_size: int, prompt_len: int, steps: int) -> None:
    manager = cls(steps + prompt_len + 2, block_size, 2)
    req = Request(0, prompt_len)
    manager.allocate_for_prefill(req)
    for _ in range(steps):
        before_len, before_blocks = req.seq_len, len(req.block_table)
        case = f"block_size={block_size}, decoding token {before_len + 1}"
        call(case, manager.allocate_for_decode, req)
        starts_block = before_len % block_size == 0
        check(req.seq_len == before_len + 1, case, f"seq_len should become {before_len + 1}, got {req.seq_len}")
        check(len(req.block_table) == before_blocks + starts_block, case,
              f"token {before_len + 1} {'starts a new block' if starts_block else 'fits in the last block'}: "
              f"expected {before_blocks + starts_block} block(s), got {len(req.block_table)}. "
              + ("Check your condition for block_size == 1: every token starts a block."
                 if block_size == 1 else "A new block is needed exactly when seq_len % block_size == 0 before the token."))
        call(case, check_kv_manager, manager, [req])


@grades(Reference.allocate_for_decode)
def check_boundaries(cls) -> None:
    """Growth at exact multiples of the block size, for several block sizes."""
    for block_size, prompt_len in [(4, 4), (4, 1), (4, 6), (2, 2), (3, 5), (16, 16), (17, 1)]:
        _walk(cls, block_size, prompt_len, 3 * block_size + 2)


@grades(Reference.allocate_for_decode)
def check_block_size_one(cls) -> None:
    """``block_size == 1``: every decoded token takes a block (the tutorial's formula never does)."""
    _walk(cls, 1, 1, 6)
    _walk(cls, 1, 3, 6)


@grades(Reference.allocate_for_decode)
def check_oom_rolls_back(cls) -> None:
    """OOM exactly at a boundary leaves seq_len and tables as they were; no OOM when no block is needed."""
    manager = cls(1, 4, 2)
    req = Request(0, 4)
    manager.allocate_for_prefill(req)
    expect_oom_unchanged("pool full, token 5 starts block 2", manager.allocate_for_decode, manager, req,
                         "Update seq_len only after the block is secured.")
    manager = cls(1, 4, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    call("pool full, token 3 fits in block 1", manager.allocate_for_decode, req)
    check(req.seq_len == 3 and len(req.block_table) == 1, "pool full, token 3 fits in block 1",
          "no block is needed here, so a full pool must not stop the decode")
    manager = cls(2, 1, 2)
    req = Request(0, 2)
    manager.allocate_for_prefill(req)
    expect_oom_unchanged("block_size=1, pool full", manager.allocate_for_decode, manager, req,
                         "With block_size 1 every token needs a block.")


@grades(Reference.allocate_for_decode)
def check_random_workload(cls, seed: int = 11, steps: int = 400) -> None:
    """Decodes across several live requests; outcomes and free counts must match the reference."""
    rng = random.Random(seed)
    for trial in range(4):
        num_blocks, block_size = rng.choice([(10, 1), (12, 4), (20, 3), (30, 16)])
        student, reference = cls(num_blocks, block_size, 2), Reference(num_blocks, block_size, 2)
        pairs = []
        for i in range(3):
            length = rng.randint(1, 2 * block_size)
            mine, theirs = Request(i, length), Request(i, length)
            reference.allocate_for_prefill(theirs)
            student.allocate_for_prefill(mine)
            pairs.append((mine, theirs))
        for step in range(steps // 4):
            mine, theirs = rng.choice(pairs)
            case = f"random workload {trial}, step {step}, request {mine.request_id} at seq_len {mine.seq_len}"
            mirror_step(case, lambda: reference.allocate_for_decode(theirs), student.allocate_for_decode,
                        student, mine, "decode")
            check(mine.seq_len == theirs.seq_len and len(mine.block_table) == len(theirs.block_table), case,
                  f"expected seq_len={theirs.seq_len} with {len(theirs.block_table)} blocks, got "
                  f"seq_len={mine.seq_len} with {len(mine.block_table)}")
            call(case, check_kv_manager, student, [m for m, _ in pairs])
