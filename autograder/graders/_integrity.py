"""No marks for delegating: a TODO is graded only on the student's own code.

Every grader check carries ``@grades(reference, ...)``, naming the reference implementations of the
TODO it grades. Before the check runs, the student's TODO must not *be* a reference (inherited from
``paged_kv``'s class, or assigned from it). While it runs, a profile hook watches for a reference's code
starting with student code anywhere on the call stack (``super()``, a direct call, an import under
another name, a copied code object); the grader's own calls to the reference, for comparison, have no
student frame above them and stay allowed. A check that saw delegation fails with an ``[integrity]``
message, whatever else happened.

"Student code" is any code outside ``paged_kv``, ``autograder/graders``, the standard library and
installed packages: notebook cells, and in the tests the bug catalogue.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
import threading
import types
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Set, Tuple

import paged_kv
from paged_kv.feedback import CheckFailed

_TRUSTED_PREFIXES = tuple(sorted({
    str(Path(paged_kv.__file__).resolve().parent) + os.sep,
    str(Path(__file__).resolve().parent) + os.sep,
    *(str(Path(p).resolve()) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
      if (p := sysconfig.get_paths().get(key))),
    *(str(Path(p).resolve()) + os.sep for p in sys.path if p and "site-packages" in p),
}))


def _code_of(obj: Any):
    """The code object behind a function, method, classmethod, staticmethod, property or Triton kernel."""
    for attr in ("__func__", "fget", "fn"):  # classmethod/bound method, property, triton JITFunction
        inner = getattr(obj, attr, None)
        if inner is not None and inner is not obj:
            return _code_of(inner)
    return getattr(obj, "__code__", None)


def _key(code) -> Tuple[str, int, str]:
    return code.co_filename, code.co_firstlineno, code.co_name


_student_cache: dict = {}


def is_student_code(code) -> bool:
    """True for code that is not the package's, the graders', the standard library's or a library's."""
    filename = code.co_filename
    known = _student_cache.get(filename)
    if known is None:
        resolved = filename
        if not filename.startswith("<"):
            try:
                resolved = str(Path(filename).resolve())
            except OSError:
                pass
        known = not (filename.startswith("<frozen") or resolved.startswith(_TRUSTED_PREFIXES))
        _student_cache[filename] = known
    return known


class DelegationGuard:
    """Records every start of a watched code object while student code is on the stack."""

    def __init__(self, references: Iterable[Any], outer_frame=None, student: Any = None):
        self.outer_frame = outer_frame  # the check's caller: frames from there up are not the check's
        # A reference method run on an instance of the student's class is the student's delegation even
        # when no student frame is left on the stack (a partial or a bound method handed back).
        self.student_type = student if isinstance(student, type) else None
        codes = [c for c in map(_code_of, references) if c is not None]
        self.names: Set[str] = {c.co_name for c in codes}
        self.codes = set(codes)
        self.keys = {_key(c) for c in codes}
        self.violations: List[str] = []
        self._previous = None

    def _profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_name in self.names and (code in self.codes or _key(code) in self.keys):
                if self.student_type is not None and code.co_argcount:
                    first = frame.f_locals.get(code.co_varnames[0])
                    if isinstance(first, self.student_type):
                        self.violations.append(f"your TODO hands its work to paged_kv's reference "
                                               f"implementation: {code.co_name} ran on your object")
                        return
                caller = frame.f_back
                while caller is not None and caller is not self.outer_frame:
                    if is_student_code(caller.f_code):
                        self.violations.append(f"your TODO delegates to paged_kv's reference implementation: "
                                               f"{caller.f_code.co_name} called the reference {code.co_name}")
                        break
                    caller = caller.f_back

    def __enter__(self) -> "DelegationGuard":
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        tampered = sys.getprofile() != self._profile
        sys.setprofile(self._previous)
        threading.setprofile(None)
        if tampered:
            self.violations.append("the grading hooks were switched off during the check (sys.setprofile)")


def _todo_attribute(student: Any, reference: Any) -> Optional[Tuple[Any, Any, str]]:
    """``(reference code, student's TODO attribute, label)`` for a class or a function, or None when the
    reference has no code or the student's class has no such attribute (calling it fails on its own)."""
    ref_code = _code_of(reference)
    if ref_code is None:
        return None
    name = ref_code.co_name
    if not isinstance(student, type):
        return ref_code, student, getattr(student, "__name__", type(student).__name__)
    try:
        attribute = inspect.getattr_static(student, name)
    except AttributeError:
        return None
    owner = next((k.__qualname__ for k in student.__mro__ if name in vars(k)), student.__qualname__)
    return ref_code, attribute, f"{student.__name__}.{name} (from {owner})"


def _reference_in_place_of(student: Any, reference: Any) -> Optional[str]:
    """Why ``student`` (a class or a function) uses ``reference`` itself as its TODO, or None."""
    found = _todo_attribute(student, reference)
    if found is None:
        return None
    ref_code, attribute, label = found
    code = _code_of(attribute)
    if code is not None and (code is ref_code or _key(code) == _key(ref_code)):
        return f"{label} is paged_kv's reference implementation, not your own code"
    return None


def _is_triton_kernel(attribute: Any) -> bool:
    """A ``@triton.jit`` kernel: a JITFunction, or an InterpretedFunction under TRITON_INTERPRET=1."""
    return type(attribute).__module__.split(".")[0] == "triton" and isinstance(getattr(attribute, "fn", None),
                                                                                  types.FunctionType)


def _own_function(attribute: Any):
    """The plain function behind a TODO as written with ``def`` (through the wrappers a reference may
    carry: classmethod, staticmethod, property, a Triton kernel), or None for anything else."""
    for attr in ("__func__", "fget", "fn"):
        inner = getattr(attribute, attr, None)
        if isinstance(attribute, (classmethod, staticmethod, property)) or _is_triton_kernel(attribute):
            if inner is not None and inner is not attribute:
                return _own_function(inner)
    return attribute if isinstance(attribute, types.FunctionType) else None


def _not_written_by_student(student: Any, reference: Any) -> Optional[str]:
    """Why ``student``'s TODO is not a function of the student's own code (None when it is, or when it is
    still the starter's stub, which fails on its own when called)."""
    found = _todo_attribute(student, reference)
    if found is None:
        return None
    _, attribute, label = found
    function = _own_function(attribute)
    if function is not None and Path(function.__code__.co_filename).name == "starters.py" and \
            function.__code__.co_filename.startswith(_TRUSTED_PREFIXES):
        return None  # the starter's stub: calling it says the TODO is not written yet
    if function is None:
        return f"{label} is a {type(attribute).__name__}, not a function you wrote with def"
    if not is_student_code(function.__code__) and not _decorates_student_code(function):
        return f"{label} is not code from your notebook ({function.__code__.co_filename})"
    return None


def _decorates_student_code(function: types.FunctionType) -> bool:
    """A library decorator's wrapper (``@torch.no_grad()``, ``functools.wraps``) around the student's own
    function: every function it closes over is student code (and there is at least one)."""
    inner = [cell.cell_contents for cell in (function.__closure__ or ())
             if isinstance(getattr(cell, "cell_contents", None), types.FunctionType)]
    return bool(inner) and all(is_student_code(f.__code__) or _decorates_student_code(f) for f in inner)


def grades(*references: Any) -> Callable:
    """Mark a grader check as grading the TODO whose reference implementations are ``references``."""
    if not references:
        raise ValueError("grades() needs the reference implementation(s) of the graded TODO")

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def guarded(student, *args, **kwargs):
            for reference in references:
                reason = _reference_in_place_of(student, reference)
                if reason:
                    raise CheckFailed("integrity", reason,
                                      hint="write this TODO yourself; do not inherit or assign paged_kv's version")
            for reference in references:
                reason = _not_written_by_student(student, reference)
                if reason:
                    raise CheckFailed("integrity", reason,
                                      hint="write this TODO as a plain function (def) in the answer cell")
            guard = DelegationGuard(references, outer_frame=sys._getframe(), student=student)
            failure: Optional[BaseException] = None
            try:
                with guard:
                    result = check(student, *args, **kwargs)
            except BaseException as error:  # noqa: B902 - re-raised below unless delegation explains it
                failure = error
            if guard.violations:
                raise CheckFailed("integrity", guard.violations[0],
                                  hint="call your own code only; super(), paged_kv's class or a copy of its "
                                       "method earn no marks") from None
            if failure is not None:
                raise failure
            return result

        guarded.__grades__ = references
        return guarded

    return decorate
