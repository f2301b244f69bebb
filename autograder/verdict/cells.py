"""Run one graded cell in the trusted process and decide its verdict.

A graded cell's text (from the lab's source, hidden tests included) runs here, in a namespace where

- every name the student's cells bind is a ``Remote`` handle to the kernel's object of that name;
- the lab's *box names* (``BOX_NAMES`` of its grader modules: the classes whose objects the
  student's code receives, e.g. ``Request``, and helpers that must run beside the student's
  objects, e.g. ``with_reference_todos``) are the kernel's objects at the import path the given
  cells import them from;
- the lab's *trusted names* (``TRUSTED_NAMES``) are the graders' replacements (e.g. building a
  Triton kernel from its submitted source);
- every other name is rebuilt here from the given cells' text: the statements that bind (and
  change) what the cell reads, run again in this process (imports, the lab's helper functions,
  its test inputs), so that expected values are computed by this process's own reference.

The cell passes when its text runs to the end; a ``CheckFailed``, an unwritten TODO, an error of the
student's code, a time limit or a broken channel is its failure, with a message for the student.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import io
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from autograder.course.notebook import checks_modules
from autograder.verdict import channel as ch
from autograder.verdict.events import VerdictKind
from autograder.verdict.notebook import Cell, Statement, free_names, given_statements, student_names
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.i18n import _, speaking

_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"


@dataclass
class Verdict:
    """What the trusted process decided for one graded cell; ``kind`` is a ``VerdictKind`` (its value is taken
    too: ``"check"`` is ``VerdictKind.CHECK``; ValueError for a kind ``VerdictKind`` does not declare)."""

    grade_id: str
    passed: bool
    kind: VerdictKind = VerdictKind.PASS
    ename: str = ""
    lines: List[str] = field(default_factory=list)
    seconds: float = 0.0
    requests: int = 0

    def __post_init__(self) -> None:
        try:
            self.kind = VerdictKind(self.kind)
        except ValueError:
            raise ValueError(
                f"a verdict's kind is one of {', '.join(k.value for k in VerdictKind)}, got {self.kind!r}: "
                "declare it in autograder.verdict.events.VerdictKind first"
            ) from None

    @property
    def message(self) -> str:
        return "\n".join(self.lines)


class Context:
    """What the graders may ask about the notebook being graded (``autograder.grade.hardened`` sets it):
    its cells as submitted, and the compile box that builds its kernels from their text."""

    def __init__(self) -> None:
        self.view: Optional[Sequence[Cell]] = None
        self.make_kernels = None
        self._kernels = None

    def kernels(self):
        if self._kernels is None:
            if self.make_kernels is None:
                raise RuntimeError("no compile box: kernels are built from a submission only while grading one")
            self._kernels = self.make_kernels()
        return self._kernels

    def kernel_events(self) -> list:
        """What the compile box's builder noted for the instructor's log, as events (``hardened``'s shape)."""
        if self._kernels is None:
            return []
        from autograder.verdict.events import EventKind, event

        return [
            event(name, EventKind(kind), detail, graded=True)
            for (kind, name), detail in getattr(self._kernels, "events", {}).items()
        ]

    def reset(self, view=None, make_kernels=None) -> None:
        if self._kernels is not None:
            self._kernels.close()
        self.view, self.make_kernels, self._kernels = view, make_kernels, None


CONTEXT = Context()


@dataclass
class LabRules:
    """What a lab's grader modules declare about names (see the module doc)."""

    box_names: Set[str] = field(default_factory=set)
    trusted: Dict[str, Any] = field(default_factory=dict)


def rules_for(cells: Sequence[Cell]) -> LabRules:
    """The rules of the grader modules the graded cells import (``from autograder.labs.<lab> import checks``)."""
    rules = LabRules()
    for cell in cells:
        if cell.tree is None:
            continue
        for name in sorted(checks_modules(cell.tree)):
            _merge(rules, importlib.import_module(name))
    return rules


def _merge(rules: LabRules, module) -> None:
    rules.box_names |= set(getattr(module, "BOX_NAMES", ()))
    rules.trusted.update(getattr(module, "TRUSTED_NAMES", {}))


# ---- the namespace -------------------------------------------------------------------------------------
def import_paths(statements: Sequence[Statement]) -> Dict[str, str]:
    """``{name: dotted path}`` for the names the given cells import (the last import of a name wins)."""
    paths: Dict[str, str] = {}
    for statement in statements:
        node = statement.node
        if isinstance(node, ast.Import):
            for alias in node.names:
                paths[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                paths[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return paths


def plan_slice(needed: Set[str], statements: Sequence[Statement], excluded: Set[str]) -> List[int]:
    """Indices (in order) of the given statements that rebuild ``needed``: for each name, the last
    statement binding it, the later statements changing it, and recursively what those read."""
    chosen: Set[int] = set()
    work: List[Tuple[str, int]] = [(n, len(statements)) for n in needed - excluded]
    seen: Set[Tuple[str, int]] = set()
    while work:
        name, before = work.pop()
        if (name, before) in seen:
            continue
        seen.add((name, before))
        binder = next((i for i in range(before - 1, -1, -1) if name in statements[i].binds), None)
        if binder is None:
            continue
        for i in [binder] + [j for j in range(binder + 1, before) if name in statements[j].changes]:
            if i not in chosen:
                chosen.add(i)
                work.extend((n, i) for n in statements[i].reads - excluded)
    return sorted(chosen)


def build_namespace(cell: Cell, cells: Sequence[Cell], session: "ch.Session", rules: LabRules) -> Dict[str, Any]:
    """The namespace ``cell``'s text runs in (see the module doc)."""
    statements = given_statements([c for c in cells if c.index < cell.index])
    paths = import_paths(statements)
    student = student_names(cells, cell.index) - set(rules.trusted) - rules.box_names
    given = {n for s in statements for n in s.binds}
    student -= given
    excluded = student | rules.box_names | set(rules.trusted)
    order = plan_slice(free_names(cell.tree), statements, excluded)
    needed = free_names(cell.tree) | {n for i in order for n in statements[i].reads}
    namespace: Dict[str, Any] = {"__builtins__": builtins, "__name__": "__graded__"}
    namespace.update({n: v for n, v in rules.trusted.items() if n in needed})
    for name in sorted(needed & rules.box_names):
        if name not in paths:
            raise LookupError(f"box name {name!r} is not imported by a given cell")
        namespace[name] = session.import_(paths[name])
    for name in sorted(needed & student):
        try:
            namespace[name] = session.name(name)
        except NameError:
            pass  # not defined in the kernel (a syntax error, a renamed TODO): reading it fails below
    with _quiet():
        for i in order:
            node = statements[i].node
            if isinstance(node, (ast.Import, ast.ImportFrom)) and statement_binds_only(node, excluded):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), f"<given cell {statements[i].cell}>", "exec")
            exec(code, namespace)  # noqa: S102 - the lab's own text, from the source notebook
            for name in excluded & statements[i].binds:  # a given import must not shadow a box or trusted name
                _restore(namespace, name, rules, session, paths, student)
    return namespace


def statement_binds_only(node: ast.stmt, names: Set[str]) -> bool:
    """An import whose every name is one of ``names`` (box, trusted or student names): skipped."""
    bound = {(a.asname or a.name).split(".")[0] for a in node.names}
    return bound <= names


def _restore(namespace, name, rules, session, paths, student) -> None:
    if name in rules.trusted:
        namespace[name] = rules.trusted[name]
    elif name in rules.box_names and name in paths:
        namespace[name] = session.import_(paths[name])
    elif name in student:
        try:
            namespace[name] = session.name(name)
        except NameError:
            namespace.pop(name, None)


@contextlib.contextmanager
def _quiet():
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


# ---- running a cell --------------------------------------------------------------------------------------
def run_graded(cell: Cell, cells: Sequence[Cell], session: "ch.Session", rules: LabRules) -> Verdict:
    """Run ``cell``'s text (see the module doc) and decide its verdict."""
    started = time.monotonic()
    verdict = Verdict(cell.grade_id, True)
    try:
        if cell.tree is None:
            raise SyntaxError("the graded cell's text does not parse")
        namespace = build_namespace(cell, cells, session, rules)
        code = compile(cell.tree, f"<graded cell {cell.grade_id}>", "exec")
        with _quiet():
            exec(code, namespace)  # noqa: S102 - the lab's own test text
    except BaseException as error:  # noqa: BLE001 - every way a test can fail is a verdict
        verdict = failed(cell.grade_id, error)
    verdict.seconds = time.monotonic() - started
    verdict.requests = session.requests
    return verdict


def failed(grade_id: str, error: BaseException) -> Verdict:
    """The verdict (and the student's message) for an exception out of a graded cell."""
    if isinstance(error, CheckFailed):
        return Verdict(grade_id, False, VerdictKind.CHECK, "CheckFailed", _check_lines(error))
    if isinstance(error, ch.TimeLimit):
        return Verdict(
            grade_id,
            False,
            VerdictKind.TIMEOUT,
            "TimeLimitExceeded",
            [
                f"{_RED}{_BOLD}Time limit{_RESET} the tests of this cell ran out of time inside your code, so it scores 0.",
                "  hint:     look for a loop that never ends (a condition that never changes, a list that never shrinks)",
            ],
        )
    if isinstance(error, ch.KernelGone):
        return Verdict(
            grade_id,
            False,
            VerdictKind.KERNEL,
            "KernelDied",
            [
                f"{_RED}{_BOLD}Kernel stopped{_RESET} {error}, so this cell scores 0.",
                "  hint:     graded code must return normally: no os._exit(), no killing its own process, "
                "no loop that ignores interrupts",
            ],
        )
    if isinstance(error, ch.StudentExit):
        return Verdict(
            grade_id,
            False,
            VerdictKind.EXIT,
            "SystemExit",
            [
                f"{_RED}{_BOLD}sys.exit(){_RESET} your code called sys.exit() (or exit()/quit()) while being tested, "
                "so this cell scores 0.",
                "  hint:     graded code must return normally",
            ],
        )
    if isinstance(error, ch.ChannelError):
        return Verdict(
            grade_id,
            False,
            VerdictKind.CHANNEL,
            "GradingChannelError",
            [
                f"{_RED}{_BOLD}Grading failed{_RESET} {error}, so this cell scores 0.",
                "  hint:     this happens when the notebook changes the grading kernel's machinery (IPython, "
                "sys.modules, the course package)",
            ],
        )
    if isinstance(error, NotImplementedError):
        remote = getattr(error, "remote", None)
        where = remote.get("where", "") if isinstance(remote, dict) else ""
        name = where.split(",", 1)[0] if where else ""
        name = "" if name in ("", "<module>") else name
        text = str(error).strip().splitlines() or [
            f"{name} still raises NotImplementedError." if name else "a TODO still raises NotImplementedError."
        ]
        lines = [f"{_RED}{_BOLD}TODO not written yet{_RESET} {text[0]}", *("  " + t.strip() for t in text[1:])]
        if "run that cell" not in str(error):
            lines += ["  Write your code in its TODO cell (replacing the `raise NotImplementedError()` line)."]
        return Verdict(grade_id, False, VerdictKind.TODO, "TodoNotWritten", lines)
    if isinstance(error, RecursionError):
        return Verdict(
            grade_id,
            False,
            VerdictKind.ERROR,
            "RecursionError",
            [
                f"{_RED}{_BOLD}RecursionError{_RESET} the tests hit Python's recursion limit",
                "  hint:     a method that calls itself (or a property that reads itself) never stops",
            ],
        )
    remote = getattr(error, "remote", None)
    where = remote.get("where", "") if isinstance(remote, dict) else ""
    name = type(error).__name__
    lines = [f"{_RED}{_BOLD}{name}{_RESET} {error}"]
    if where:
        lines.append(f"  where:    {where}")
    if isinstance(error, AssertionError) and not remote:
        lines.append(
            "  hint:     the state after your code broke one of the course's invariants (the message says which)"
        )
    return Verdict(grade_id, False, VerdictKind.ERROR, name, lines)


def _check_lines(error: CheckFailed) -> List[str]:
    """The failure's block (unwrapped), its header in the language the failure was made in, as its lines."""
    first, *rest = error._lines()
    with speaking(error.language):
        header = _("Check failed")
    return [f"{_RED}{_BOLD}{header}{_RESET} {first}", *rest]
