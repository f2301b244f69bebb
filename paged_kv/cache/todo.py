"""What an unwritten TODO raises, and the marks an edition of the package puts on the code it leaves out.

``TodoNotWritten`` is raised by a starter class for a TODO the student's class does not define, and by
every stub of a package *edition*: a copy of this package, built from its source by
``autograder.editions``, in which a lab's TODOs (and every other implementation of the same thing) have
no body. A class handout for lab NN carries the edition of lab NN (its TODOs and every later lab's are
stubs), and so does the box that grades lab NN: a TODO can only be passed by the student's own code.

``@stub`` marks such a function (``is_stub`` reads the mark, through classmethod, staticmethod and
property); ``stub_kernel`` stands for a Triton kernel the edition leaves out (``kernel[grid](...)`` and
``kernel(...)`` both raise).
"""

from __future__ import annotations

from typing import Any, Callable, List

_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
MARK = "__pkv_stub__"


class TodoNotWritten(NotImplementedError):
    """A TODO with no implementation here: the student's class does not define it, or this edition of the
    package leaves it out."""

    def _render_traceback_(self) -> List[str]:
        first, *rest = str(self).splitlines() or [""]
        return [f"{_RED}{_BOLD}TODO not written yet{_RESET} {first}", *rest]


def stub(function: Callable) -> Callable:
    """Mark ``function`` as an edition's stub (it raises ``TodoNotWritten``)."""
    setattr(function, MARK, True)
    return function


def is_stub(value: Any) -> bool:
    """True for an edition's stub, also when wrapped in classmethod, staticmethod or property."""
    if isinstance(value, (classmethod, staticmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    return getattr(value, MARK, False) is True


class stub_kernel:
    """A Triton kernel an edition leaves out: launching it (``kernel[grid](...)``) or calling it raises."""

    def __init__(self, function: Callable):
        self.fn = stub(function)
        self.__name__ = getattr(function, "__name__", "kernel")
        self.__doc__ = getattr(function, "__doc__", None)
        setattr(self, MARK, True)

    def __getitem__(self, grid: Any) -> Callable:
        return self.fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<stub of the Triton kernel {self.__name__}: this edition of the package leaves it out>"
