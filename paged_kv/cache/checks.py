"""Argument checks shared by the package: each raises before any state is touched.

Messages name the argument, show the value that came in, and say what was expected, so that a
student reading a traceback knows what to fix without opening this file.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, List

from paged_kv.cache.messages import N_


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int if it is an integer (not a bool) and ``>= minimum``."""
    if type(value) is int and (minimum is None or value >= minimum):
        return value  # the common case, without the slower isinstance(numbers.Integral) test
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int, got {value!r} of type {type(value).__name__}; "
            f"check the argument you passed for {name}"
        )
    value = int(value)
    if minimum is not None and value < minimum:
        kind = N_("positive") if minimum == 1 else (N_("non-negative") if minimum == 0 else f">= {minimum}")
        raise ValueError(f"{name} must be a {kind} int, got {value}")
    return value


def check_ints(name: str, values: Iterable[Any], *, minimum: int | None = None) -> List[int]:
    """``values`` as a new list of Python ints, each checked like :func:`check_int`.

    A list of plain ints is checked in one pass of C-level builtins (``set(map(type, ...))``, ``min``);
    anything else goes element by element, so the error names the first bad position.
    """
    items = list(values)
    if not items or (set(map(type, items)) == {int} and (minimum is None or min(items) >= minimum)):
        return items
    return [check_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(items)]


def check_positive_int(name: str, value: Any) -> int:
    """Shorthand for :func:`check_int` with ``minimum=1`` (sizes, counts, lengths)."""
    return check_int(name, value, minimum=1)


def check_instance(name: str, value: Any, cls: type) -> None:
    """Raise ``TypeError`` unless ``value`` is an instance of ``cls``."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}: {value!r}")


def check_block_ids(
    name: str, block_ids: Iterable[Any], num_blocks: int, *, allow_duplicates: bool = False
) -> List[int]:
    """Validate a list of physical block ids: ints in ``[0, num_blocks)``, distinct unless allowed."""
    ids = list(block_ids)
    if (
        set(map(type, ids)) <= {int}
        and (not ids or (min(ids) >= 0 and max(ids) < num_blocks))
        and (allow_duplicates or len(set(ids)) == len(ids))
    ):
        return ids  # the common case, checked by C-level builtins; the loop below names what is wrong
    for position, block_id in enumerate(ids):
        if isinstance(block_id, bool) or not isinstance(block_id, numbers.Integral):
            raise TypeError(
                f"{name}[{position}] must be an int block id, got {block_id!r} of type {type(block_id).__name__}"
            )
        if not 0 <= block_id < num_blocks:
            raise ValueError(
                f"{name}[{position}] = {block_id} is out of range: the pool has block ids 0..{num_blocks - 1}"
            )
    if not allow_duplicates and len(set(ids)) != len(ids):
        seen, dupes = set(), []
        for block_id in ids:
            if block_id in seen:
                dupes.append(block_id)
            seen.add(block_id)
        raise ValueError(
            f"{name} holds block id(s) {sorted(set(dupes))} more than once: {ids}; "
            "a request must own each physical block at most once"
        )
    return [int(b) for b in ids]


def ceil_div(numerator: int, denominator: int) -> int:
    """Integer ceiling of ``numerator / denominator`` for non-negative ints (no floats involved)."""
    return -(-numerator // denominator)
