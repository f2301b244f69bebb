"""Helpers shared by the graders: calling student code with context, checks, and state snapshots.

Every failure is a :class:`paged_kv.lab.feedback.CheckFailed` whose first line is ``[case] problem``; every
check function carries ``@grades``, naming the reference implementations of the TODO it grades.

A check's texts (its cases, problems and hints) are written in English and passed through ``_`` where they are
made, so that the student reads them in the graded notebook's language, as the feedback's own wording around
them (grading runs under ``speaking(language_of(nb))``: ``autograder.grade.hardened``). ``_`` marks a text for the
autograder's catalog (``autograder/verdict/locale/``, extracted by ``tools/message_catalogs.py``): a string literal
or an f-string, whose template matches the text it makes. A text built in pieces is marked piece by piece: ``N_``
marks a constant that ``_`` translates where it is shown; ``joined`` makes ``case: what``.

A grader runs in the trusted grading process, where the student's class or function is a handle to
the grading kernel's object (``autograder.verdict.channel``), and in-process in tests and in the
solutions' own runs. It works the same in both: objects the student's code receives are made on the
student's side (``student_side``), values are read as plain data (``materialize``) before any check.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, List, Tuple

from autograder.verdict import student_text
from autograder.verdict.student_text import N_  # noqa: F401 (the checks mark constants with it)
from paged_kv.lab import i18n
from paged_kv.lab.feedback import CheckFailed, attempt, expect, expect_equal, expect_raises, materialize  # noqa: F401


def _(text: str) -> str:
    """A check's ``text`` (English: a case, a problem, a hint) in the language being spoken, English where no
    translation is known; marks ``text`` for the autograder's catalog (see the module doc). A message of the
    package inside it (an invariant's ``AssertionError`` in ``{failure}``) is translated by the package's."""
    language = i18n.language()
    return text if language == i18n.SOURCE else _catalog(language).translate(text)


@lru_cache(maxsize=None)
def _catalog(language: str) -> i18n.Catalog:
    """The autograder's translations and the package's (whose messages the checks' texts may hold), as one."""
    return i18n.Catalog({**i18n.catalog(language).by_template, **student_text.catalog(language).by_template})


def joined(case: str, what: str) -> str:
    """``case: what`` (a case, already in the language spoken, and the part of its result a check compares, marked
    ``N_`` where it is written), in the language spoken."""
    return case + _(": ") + _(what)


def grades(*references: Any, teaches: str = "") -> Callable:
    """Mark a check as grading the TODO whose reference implementations are ``references``; ``teaches``
    (optional, e.g. ``"§ 1"``) names the lab's section that teaches what the check's hints are about, where it
    is not the section holding the task.

    Nothing happens when the check runs: the provenance checks and the instructor's report read the
    marks (``check.__grades__``, ``check.__teaches__``), to know which code a TODO must not reach or resemble
    and which section to name as "taught in"."""
    if not references:
        raise ValueError("grades() needs the reference implementation(s) of the graded TODO")
    if teaches and not re.fullmatch(r"§ \d+(\.\d+)*", teaches):
        raise ValueError(f"teaches={teaches!r}: name a section of the lab's notebook as '§ 3' or '§ 9.2'")

    def decorate(check: Callable) -> Callable:
        check.__grades__ = references
        check.__teaches__ = teaches
        return check

    return decorate


def student_side(student: Any, path: str) -> Any:
    """The object at ``path`` (``paged_kv.Request``) where the student's code runs: the grading kernel's
    when ``student`` is a handle to it, this process's own otherwise."""
    session = _session_of(student)
    if session is not None:
        return session.import_(path)
    import importlib

    module, _dot, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def with_reference_todos(cls: Any, *own: str) -> Any:
    """The student's class with paged_kv's version of every TODO but ``own``, made on the student's side."""
    return student_side(cls, "paged_kv.lab.starters.with_reference_todos")(cls, *own)


def is_remote(value: Any) -> bool:
    """True for a handle to an object of the grading kernel (see ``autograder.verdict.channel``)."""
    return _session_of(value) is not None


def _session_of(student: Any):
    from autograder.verdict.channel import BoundRemote, Remote

    if type(student) is Remote:
        return student._pkv_session
    if type(student) is BoundRemote:
        return student._pkv_target._pkv_session
    return None


def call(case: str, func: Callable, *args: Any) -> Any:
    """Run student code; an unexpected exception becomes a ``CheckFailed`` naming the case."""
    return attempt(case, func, *args)


def check(condition: bool, case: str, message: str, hint: str = "", **shown: Any) -> None:
    """Fail with ``[case] message`` unless ``condition`` is exactly True (never trust a student's truthiness).

    ``shown`` may hold ``expected=`` and ``got=``, printed on their own lines of the failure block.
    """
    if materialize(condition) is not True:
        raise CheckFailed(case, message, hint=hint, **shown)


def plain_ints(case: str, values: Any, what: str) -> List[int]:
    """``values`` as a list of plain ints; an int subclass or any other object fails the check."""
    values = materialize(values)
    if type(values) not in (list, tuple):
        kind = type(values).__name__
        raise CheckFailed(case, _(f"{what} should be a list of ints, got {kind}"), got=values)
    for value in values:
        if type(value) is not int:
            kind = type(value).__name__
            raise CheckFailed(
                case,
                _(f"{what} should hold plain ints, found {kind}: {value!r}"),
                hint=_("use Python ints (e.g. block ids from the free list), not floats or tensors"),
            )
    return list(values)


def plain_int(case: str, value: Any, what: str) -> int:
    """``value`` if it is a plain int, else the check fails."""
    return plain_ints(case, [value], what)[0]


def audit_kv_manager(case: str, manager, requests) -> None:
    """``paged_kv.check_kv_manager``: the state read where the manager lives (one request), checked here."""
    from paged_kv.cache.invariants import check_kv_state

    state = materialize(
        call(case, student_side(manager, "paged_kv.cache.invariants.kv_manager_state"), manager, list(requests))
    )
    call(case, check_kv_state, state)


def snapshot(manager, *requests) -> Tuple[List[int], List[Tuple[int, List[int]]]]:
    """Everything a failed operation must leave as it was: the free list and each request's state."""
    case = _("state after the call")
    return (
        plain_ints(case, manager.free_blocks, "free_blocks"),
        [(plain_int(case, r.seq_len, "seq_len"), plain_ints(case, r.block_table, "block_table")) for r in requests],
    )


def expect_oom_unchanged(case: str, student_op: Callable, manager, req, advice: str) -> None:
    """``student_op(req)`` must raise ``RuntimeError('OOM ...')`` and leave ``manager`` and ``req`` unchanged."""
    before = snapshot(manager, req)
    expect_raises(
        case,
        RuntimeError,
        student_op,
        req,
        match="OOM",
        hint=_("raise RuntimeError('OOM ...') when the free list is too short"),
    )
    after = snapshot(manager, req)
    check(
        after == before,
        case,
        _("a failed call must change nothing: (free list, [(seq_len, block_table)]) changed"),
        advice,
        expected=before,
        got=after,
    )


def mirror_step(case: str, reference_op: Callable[[], Any], student_op: Callable, manager, req, what: str) -> bool:
    """Run one step on the reference, then the same on the student's manager, and compare outcomes.

    When the reference succeeds the student's step must too; when it raises OOM the student's must
    raise ``RuntimeError('OOM ...')`` and leave ``manager`` and ``req`` unchanged. Returns success.
    """
    try:
        reference_op()
    except RuntimeError:
        expect_oom_unchanged(case, student_op, manager, req, _(f"A failed {what} must leave everything as it was."))
        return False
    try:
        call(case, student_op, req)
    except CheckFailed as failure:
        raise CheckFailed(
            case,
            failure.problem,
            hint=_(
                f"the reference manager, in the same state, completes this {what}: raise OOM only when the blocks "
                "it needs are not free"
            ),
        ) from None
    return True
