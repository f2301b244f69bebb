"""Lab 01 grader: ``estimate_kv_cache_bytes`` at every level of the ledger."""

from __future__ import annotations

import random
from typing import Callable, Dict, List

from paged_kv import MODEL_PRESETS, estimate_kv_cache_bytes as reference

from autograder.labs.checking import N_, _, call, check, expect_equal, grades, materialize

FIELDS = ("num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim", "dtype_bytes")
HINTS = {
    "kv_bytes_per_token": N_(
        "one token stores a K and a V vector per layer and per KV head: "
        "2 * num_layers * num_kv_heads * head_dim * dtype_bytes"
    ),
    "kv_bytes_per_block": N_("a block holds block_size tokens"),
    "total_cache_bytes": N_("the pool holds num_blocks blocks"),
}

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 3): a
# fragment of the hint, as the visible tests and these checks give it, and its section. The first match wins.
# A token's bytes are § 1's idea, blocks and the pool § 2's; the dict, the given layout and integer arithmetic
# are the task's own.
TEACHES = {
    "2 * num_layers * num_kv_heads * head_dim * dtype_bytes": "§ 1",
    "one k byte and one v byte": "§ 1",
    "128 kib per token": "§ 1",
    "a block holds block_size tokens": "§ 2",
    "the pool holds num_blocks blocks": "§ 2",
}


def _edge_cases() -> List[Dict[str, int]]:
    cases = [
        dict(num_blocks=1, block_size=1, num_layers=1, num_kv_heads=1, head_dim=1, dtype_bytes=1),
        dict(num_blocks=4, block_size=4, num_layers=2, num_kv_heads=8, head_dim=16, dtype_bytes=2),
        dict(num_blocks=3, block_size=17, num_layers=5, num_kv_heads=3, head_dim=7, dtype_bytes=4),
    ]
    for preset in MODEL_PRESETS.values():  # real shapes, and pool sizes far beyond 32-bit integers
        cases.append(
            dict(
                num_blocks=500_000,
                block_size=16,
                num_layers=preset.num_layers,
                num_kv_heads=preset.num_kv_heads,
                head_dim=preset.head_dim,
                dtype_bytes=2,
            )
        )
    return cases


def _random_cases(seed: int, count: int) -> List[Dict[str, int]]:
    rng = random.Random(seed)
    return [
        dict(
            num_blocks=rng.randint(1, 10**6),
            block_size=rng.choice([1, 2, 8, 16, 17, 32, 256]),
            num_layers=rng.randint(1, 128),
            num_kv_heads=rng.choice([1, 2, 4, 8, 16, 32, 64]),
            head_dim=rng.choice([1, 32, 64, 80, 96, 128, 256]),
            dtype_bytes=rng.choice([1, 2, 4]),
        )
        for _case in range(count)
    ]


def _check_key(student: Callable, key: str, cases: List[Dict[str, int]]) -> None:
    for args in cases:
        label = "estimate_kv_cache_bytes(" + ", ".join(f"{f}={args[f]}" for f in FIELDS) + ")"
        got = materialize(call(label, student, *[args[f] for f in FIELDS]))
        check(
            type(got) is dict and key in got,
            label,
            _(f"the result should be a dict with the key {key!r}"),
            _("return the dict built at the end of the function (keep its four keys)"),
            got=got,
        )
        expect_equal(f"{label}[{key!r}]", got[key], reference(**args)[key], _(HINTS[key]))


@grades(reference)
def check_bytes_per_token(student: Callable) -> None:
    """Level 1: bytes of K and V for one token, every layer and KV head."""
    _check_key(student, "kv_bytes_per_token", _edge_cases())


@grades(reference)
def check_bytes_per_block(student: Callable) -> None:
    """Level 2: one block of ``block_size`` tokens."""
    _check_key(student, "kv_bytes_per_block", _edge_cases())


@grades(reference)
def check_total_bytes(student: Callable) -> None:
    """Level 3: the whole pool, exact even for pools of hundreds of GB."""
    _check_key(student, "total_cache_bytes", _edge_cases())


@grades(reference)
def check_random_configs(student: Callable, seed: int = 2024, count: int = 300) -> None:
    """Every key, including ``layout_shape``, on seeded random configurations."""
    cases = _random_cases(seed, count)
    for key in HINTS:
        _check_key(student, key, cases)
    for args in cases[:20]:
        label = "estimate_kv_cache_bytes(" + ", ".join(f"{f}={args[f]}" for f in FIELDS) + ")"
        got = materialize(call(label, student, *[args[f] for f in FIELDS]))
        check(
            type(got) is dict and "layout_shape" in got,
            label,
            _("the result should be a dict with the key 'layout_shape'"),
            _("layout_shape is given code: leave it as it was"),
            got=got,
        )
        expect_equal(
            f"{label}['layout_shape']",
            got["layout_shape"],
            reference(**args)["layout_shape"],
            _("layout_shape is given code: leave it as it was"),
        )
