"""Helpers shared by the graders: calling student code with context, and state snapshots."""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

from paged_kv.feedback import expect_equal, expect_raises  # noqa: F401  (re-exported for graders)


def call(case: str, func: Callable, *args: Any) -> Any:
    """Run student code; an unexpected exception becomes an ``AssertionError`` naming the case."""
    try:
        return func(*args)
    except NotImplementedError:
        raise
    except AssertionError as error:
        raise AssertionError(f"[{case}] {error}") from None
    except Exception as error:
        raise AssertionError(f"[{case}] raised {type(error).__name__}: {error}") from None


def check(condition: bool, case: str, message: str) -> None:
    if not condition:
        raise AssertionError(f"[{case}] {message}")


def snapshot(manager, *requests) -> Tuple[List[int], List[Tuple[int, List[int]]]]:
    """Everything a failed operation must leave as it was: the free list and each request's state."""
    return list(manager.free_blocks), [(r.seq_len, list(r.block_table)) for r in requests]


def expect_oom_unchanged(case: str, student_op: Callable, manager, req, advice: str) -> None:
    """``student_op(req)`` must raise ``RuntimeError('OOM ...')`` and leave ``manager`` and ``req`` unchanged."""
    before = snapshot(manager, req)
    expect_raises(case, RuntimeError, student_op, req, match="OOM",
                  hint="raise RuntimeError('OOM ...') when the free list is too short")
    after = snapshot(manager, req)
    check(after == before, case, f"a failed call must change nothing, but (free list, [(seq_len, block_table)]) "
                                 f"went from {before} to {after}. {advice}")


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
    call(case, student_op, req)
    return True
