"""Lab 04 grader: ``get_physical_cache`` (block-table order, tail truncated, a new tensor)."""

from __future__ import annotations

import random

import torch

from paged_kv import KVCacheManager as Reference, Request as LocalRequest

from autograder.labs.checking import (
    CheckFailed,
    _,
    call,
    check,
    expect_equal,
    expect_raises,
    grades,
    materialize,
    student_side,
)

BOX_NAMES = ("Request",)  # the visible tests' requests are made where the student's manager lives

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 2): a
# fragment of the hint, as the visible tests and these checks give it, and its section. The first match wins.
# Table order and the stale tail of the last block are § 1's ideas; a new tensor, not a view, and the dtype
# are the task's own.
TEACHES = {
    "read blocks in table order": "§ 1",
    "read blocks in block_table order": "§ 1",
    "the second table entry is block 1": "§ 1",
    "block 2 first": "§ 1",
    "drop the stale tail of the last block": "§ 1",
    "cut the unused tail of the last block": "§ 1",
}


def _filled(cls, num_blocks: int, block_size: int, head_dim: int, seed: int):
    manager = cls(num_blocks, block_size, head_dim)
    gen = torch.Generator().manual_seed(seed)
    manager.physical_kv_cache.copy_(torch.randn(num_blocks, block_size, head_dim, generator=gen))
    return manager


def _compare(cls, num_blocks: int, block_size: int, head_dim: int, table, seq_len: int, seed: int = 0) -> None:
    case = _(f"block_size={block_size}, block_table={list(table)}, seq_len={seq_len}")
    manager = _filled(cls, num_blocks, block_size, head_dim, seed)
    reference = Reference(num_blocks, block_size, head_dim)
    pool_before = materialize(manager.physical_kv_cache).clone()
    reference.physical_kv_cache.copy_(pool_before)
    req, ref_req = student_side(cls, "paged_kv.Request")(0, seq_len), LocalRequest(0, seq_len)
    req.block_table, ref_req.block_table = list(table), list(table)
    result = call(case, manager.get_physical_cache, req)  # where the student's code made it
    got = materialize(result)
    expected = reference.get_physical_cache(ref_req)
    check(
        type(got) is torch.Tensor,
        case,
        _("should return a torch.Tensor"),
        _("build the result with torch operations"),
        got=type(got).__name__,
    )
    expect_equal(
        _(f"{case}: shape"),
        tuple(got.shape),
        tuple(expected.shape),
        _("[seq_len, head_dim]: did you cut the unused tail of the last block?"),
    )
    expect_equal(_(f"{case}: dtype"), str(got.dtype), str(expected.dtype), _("keep the pool's dtype"))
    if not torch.equal(got, expected):
        wrong = int((got != expected).any(dim=-1).nonzero()[0])
        logical_block, slot = divmod(wrong, block_size)
        raise CheckFailed(
            case,
            _(
                f"position {wrong} (0-based) should hold slot {slot} of physical block "
                f"{table[logical_block]} (block_table[{logical_block}])"
            ),
            expected=[round(x, 4) for x in expected[wrong].tolist()],
            got=[round(x, 4) for x in got[wrong].tolist()],
            hint=_("read blocks in block_table order, never in sorted or physical order"),
        )
    check(
        list(req.block_table) == list(table),
        case,
        _("get_physical_cache must not change the block table"),
        expected=list(table),
        got=list(req.block_table),
    )
    check(
        torch.equal(materialize(manager.physical_kv_cache), pool_before),
        case,
        _("get_physical_cache must not change the pool"),
        _("read the pool only; write nothing into self.physical_kv_cache"),
    )
    result.add_(1.0)
    check(
        torch.equal(materialize(manager.physical_kv_cache), pool_before),
        case,
        _("the result shares memory with the pool: writing to it changed the cache"),
        _(
            "return a new tensor: index_select, indexing with a tensor of ids and torch.cat copy; slicing one "
            "block does not (add .clone())"
        ),
    )


@grades(Reference.get_physical_cache)
def check_table_order(cls) -> None:
    """Scattered and non-monotonic tables are read in table order, never physical order."""
    for table in ([3, 1], [4, 0, 2], [5, 4, 3, 2, 1, 0], [2], [0, 5, 1, 4]):
        _compare(cls, 6, 2, 3, table, len(table) * 2)
    empty = student_side(cls, "paged_kv.Request")(1, 3)
    expect_raises(
        _("empty block_table"),
        ValueError,
        cls(4, 2, 2).get_physical_cache,
        empty,
        hint=_("a request without blocks has nothing to read"),
    )


@grades(Reference.get_physical_cache)
def check_tail_truncation(cls) -> None:
    """Exactly full, one token in the last block, single block, block_size 1 and 17."""
    _compare(cls, 6, 4, 3, [5, 2], 8)
    _compare(cls, 6, 4, 3, [5, 2], 5)
    _compare(cls, 6, 4, 3, [1], 1)
    _compare(cls, 6, 1, 3, [3, 0, 5], 3)
    _compare(cls, 6, 17, 2, [4, 1, 3], 35)


@grades(Reference.get_physical_cache)
def check_random_tables(cls, seed: int = 5, count: int = 60) -> None:
    """Seeded random permutations of the pool as tables, random lengths and sizes."""
    rng = random.Random(seed)
    for i in range(count):
        num_blocks, block_size, head_dim = rng.randint(1, 12), rng.choice([1, 2, 3, 4, 16]), rng.choice([1, 4, 8])
        table = rng.sample(range(num_blocks), rng.randint(1, num_blocks))
        seq_len = rng.randint((len(table) - 1) * block_size + 1, len(table) * block_size)
        _compare(cls, num_blocks, block_size, head_dim, table, seq_len, seed=i)
