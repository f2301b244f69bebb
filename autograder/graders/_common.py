"""Helpers shared by the graders: calling student code with context, checks, and state snapshots.

Every failure is a :class:`paged_kv.feedback.CheckFailed` whose first line is ``[case] problem``; every
check function carries ``@grades`` (re-exported here from ``_integrity``).
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

from paged_kv.feedback import CheckFailed, attempt, expect, expect_equal, expect_raises  # noqa: F401

from ._integrity import grades  # noqa: F401  (re-exported for graders)


def call(case: str, func: Callable, *args: Any) -> Any:
    """Run student code; an unexpected exception becomes a ``CheckFailed`` naming the case."""
    return attempt(case, func, *args)


def check(condition: bool, case: str, message: str, hint: str = "", **shown: Any) -> None:
    """Fail with ``[case] message`` unless ``condition`` is exactly True (never trust a student's truthiness).

    ``shown`` may hold ``expected=`` and ``got=``, printed on their own lines of the failure block.
    """
    if condition is not True:
        raise CheckFailed(case, message, hint=hint, **shown)


def plain_ints(case: str, values: Any, what: str) -> List[int]:
    """``values`` as a list of plain ints; an int subclass or any other object fails the check."""
    if type(values) not in (list, tuple):
        raise CheckFailed(case, f"{what} should be a list of ints, got {type(values).__name__}", got=values)
    for value in values:
        if type(value) is not int:
            raise CheckFailed(case, f"{what} should hold plain ints, found {type(value).__name__}: {value!r}",
                              hint="use Python ints (e.g. block ids from the free list), not floats or tensors")
    return list(values)


def plain_int(case: str, value: Any, what: str) -> int:
    """``value`` if it is a plain int, else the check fails."""
    return plain_ints(case, [value], what)[0]


def snapshot(manager, *requests) -> Tuple[List[int], List[Tuple[int, List[int]]]]:
    """Everything a failed operation must leave as it was: the free list and each request's state."""
    case = "state after the call"
    return (plain_ints(case, manager.free_blocks, "free_blocks"),
            [(plain_int(case, r.seq_len, "seq_len"), plain_ints(case, r.block_table, "block_table"))
             for r in requests])


def expect_oom_unchanged(case: str, student_op: Callable, manager, req, advice: str) -> None:
    """``student_op(req)`` must raise ``RuntimeError('OOM ...')`` and leave ``manager`` and ``req`` unchanged."""
    before = snapshot(manager, req)
    expect_raises(case, RuntimeError, student_op, req, match="OOM",
                  hint="raise RuntimeError('OOM ...') when the free list is too short")
    after = snapshot(manager, req)
    check(after == before, case, "a failed call must change nothing: (free list, [(seq_len, block_table)]) changed",
          advice, expected=before, got=after)


def mirror_step(case: str, reference_op: Callable[[], Any], student_op: Callable, manager, req, what: str) -> bool:
    """Run one step on the reference, then the same on the student's manager, and compare outcomes.

    When the reference succeeds the student's step must too; when it raises OOM the student's must
    raise ``RuntimeError('OOM ...')`` and leave ``manager`` and ``req`` unchanged. Returns success.
    """
    try:
        reference_op()
    except RuntimeError:
        expect_oom_unchanged(case, student_op, manager, req, f"A failed {what} must leave everything as it was.")
        return False
    try:
        call(case, student_op, req)
    except CheckFailed as failure:
        raise CheckFailed(case, failure.problem, hint=f"the reference manager, in the same state, completes this "
                          f"{what}: raise OOM only when the blocks it needs are not free") from None
    return True
