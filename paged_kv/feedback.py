"""Readable checks for the labs' visible tests: which case, what was expected, what came back, a hint.

The comparison never trusts the student's objects: types are checked first, and values are compared
only once both sides are plain Python values of the same type.
"""
from __future__ import annotations

from typing import Any


def expect_equal(case: str, got: Any, expected: Any, hint: str = "") -> None:
    """Raise ``AssertionError`` unless ``got`` has ``expected``'s type and value."""
    if type(got) is not type(expected):
        raise AssertionError(
            f"[{case}] expected a {type(expected).__name__} ({expected!r}), got a {type(got).__name__}: {got!r}."
            + (f" Hint: {hint}" if hint else ""))
    if got != expected:
        raise AssertionError(f"[{case}] expected {expected!r}, got {got!r}." + (f" Hint: {hint}" if hint else ""))


def expect_raises(case: str, error: type, func, *args, hint: str = "", match: str = "") -> BaseException:
    """Call ``func(*args)`` and require it to raise ``error`` (whose message contains ``match``)."""
    try:
        func(*args)
    except NotImplementedError:
        raise
    except error as caught:
        if match and match not in str(caught):
            raise AssertionError(f"[{case}] the {error.__name__} message should contain {match!r}, got {str(caught)!r}."
                                 + (f" Hint: {hint}" if hint else "")) from None
        return caught
    except Exception as other:
        raise AssertionError(f"[{case}] expected {error.__name__}, got {type(other).__name__}: {other}."
                             + (f" Hint: {hint}" if hint else "")) from None
    raise AssertionError(f"[{case}] expected {error.__name__}, but nothing was raised." + (f" Hint: {hint}" if hint else ""))


def show_when_ready(make, todo: str = "the TODO above"):
    """Run ``make()`` (a picture, a table, a widget) once the student's code exists.

    While the TODO still raises ``NotImplementedError`` this prints a short note instead of a
    traceback, so the rest of the notebook keeps running. Any other error is raised as usual: it
    points at a real bug.
    """
    try:
        return make()
    except NotImplementedError:
        print(f"Finish {todo}, run its cell again, then run this cell to see what you built.")
        return None
