"""Launch a student's Triton kernel safely: a finished kernel of their own, a sane grid, readable failures.

What every step of lab 06 shares (``paged_kv.lab.kernel_lab`` runs each step through these):

- ``check_kernel``: a ``@triton.jit`` kernel, no longer the stub, that calls none of the course package's kernels;
- ``check_grid``: what a grid function returned, 1 to 3 positive ints, at most ``MAX_PROGRAMS`` programs;
- ``launch``: ``kernel[grid](*args)``, whatever it raises turned into a ``KernelFailed`` that names the line of the
  student's kernel that raised it;
- ``run_isolated``: a launch in a forked child in the interpreter (a wild pointer or a hang ends in a readable
  error instead of killing the notebook's kernel);
- ``guarded_output`` / ``output_checked``: an output tensor with a NaN margin around it, and the check that the
  kernel wrote nothing in that margin.
"""

from __future__ import annotations

import math
import os
import pickle
import signal
import sys
import traceback
from typing import Any, Callable, Optional, Sequence, Tuple

import torch

from paged_kv.lab.feedback import CheckFailed, TodoNotWritten
from paged_kv.lab.i18n import N_, _

MAX_PROGRAMS = 4096
_NO_VALUE = CheckFailed('', '').expected  # the feedback module's 'no value given' marker
CHILD_TIMEOUT_S = 90


class KernelFailed(CheckFailed):
    """A kernel that could not run (crashed, raised, wrote outside its output)."""


def is_stub(kernel) -> bool:
    """True while the kernel's body is still the ``raise NotImplementedError()`` stub."""
    fn = getattr(kernel, "fn", None)
    return fn is not None and "NotImplementedError" in fn.__code__.co_names


def unwritten(name: str) -> TodoNotWritten:
    """The error for a kernel whose body is still the stub: names the student's kernel and what to do."""
    return TodoNotWritten(
        _(
            f"{name} is still the stub: write its body in its TODO cell (in place of\n"
            "  `raise NotImplementedError()`), run that cell, then run this cell again."
        )
    )


def check_kernel(kernel, name: str) -> None:
    """A ``@triton.jit`` kernel of the student's own, finished: raise otherwise."""
    if type(kernel).__name__ not in ("JITFunction", "InterpretedFunction"):
        kind = type(kernel).__name__
        raise CheckFailed(
            name,
            _(f"expected a @triton.jit kernel, got {kind}"),
            hint=_("keep the @triton.jit decorator above the function"),
        )
    if is_stub(kernel):
        raise unwritten(name)
    borrowed = package_kernels_used(kernel)
    if borrowed:
        kernels = ", ".join(borrowed)
        raise CheckFailed(
            "integrity",
            _(f"{name} uses the course package's kernels ({kernels})"),
            hint=_("write the kernel yourself; this step gets no points"),
        )


def package_kernels_used(kernel, _seen=None) -> list:
    """Names of ``paged_kv`` jit functions or modules that ``kernel`` (or its jit helpers) refers to."""
    seen = set() if _seen is None else _seen
    fn = getattr(kernel, "fn", None)
    if fn is None or id(fn) in seen:
        return []
    seen.add(id(fn))
    found = []
    if fn.__module__.startswith("paged_kv"):
        return [f"{fn.__module__}.{fn.__name__}"]
    for name in fn.__code__.co_names:
        value = fn.__globals__.get(name)
        module = getattr(value, "__name__", "") if type(value).__name__ == "module" else ""
        if module.startswith("paged_kv"):
            found.append(module)
        elif type(value).__name__ in ("JITFunction", "InterpretedFunction"):
            found += package_kernels_used(value, seen)
    return found


def _unwrap(error: BaseException) -> BaseException:
    """The student's own exception inside Triton's ``InterpreterError`` wrapper."""
    while type(error).__name__ == "InterpreterError" and error.__cause__ is not None:
        error = error.__cause__
    return error


def check_grid(grid: Any, name: str, programs: Optional[int] = None) -> Tuple[int, ...]:
    """Validate what a grid function returned: 1-3 positive ints (and ``programs`` of them, if given)."""
    if isinstance(grid, list):
        grid = tuple(grid)
    if (
        not isinstance(grid, tuple)
        or not 1 <= len(grid) <= 3
        or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid)
    ):
        raise CheckFailed(name, _("the grid function must return a tuple of 1 to 3 positive ints"), got=grid)
    total = math.prod(grid)
    if total > MAX_PROGRAMS:
        raise CheckFailed(
            name,
            _(f"the grid {grid} launches {total} programs, more than {MAX_PROGRAMS}"),
            hint=_("one program per block or per (sequence, KV head) is enough"),
        )
    if programs is not None and total != programs:
        raise CheckFailed(
            name,
            _(f"the grid {grid} launches {total} programs, not one per (sequence, KV head)"),
            expected=programs,
            got=total,
            hint=_("each program covers one KV head's whole query-head group, so K and V are read once per group"),
        )
    return grid


def _library_dirs() -> Tuple[str, ...]:
    """Folders of code the student did not write: Triton, torch, numpy and this package."""
    import numpy

    import triton

    return tuple(
        os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (triton, torch, numpy, sys.modules["paged_kv"])
    )


def student_line(error: BaseException) -> str:
    """Where in the student's own code ``error`` was raised (the interpreter runs kernels as Python):
    ``"scores_kernel, line 12 of its cell: scores = ..."``, or ``""`` when no frame is theirs."""
    found = ""
    library = _library_dirs()
    for frame in traceback.extract_tb(error.__traceback__):
        if not os.path.abspath(frame.filename).startswith(library):
            code, function, line = (frame.line or "").strip(), frame.name, frame.lineno
            found = _(f"{function}, line {line} of its cell") + (f": {code[:100]}" if code else "")
    return found


def launch(kernel, grid: Tuple[int, ...], name: str, *args, **constexprs) -> None:
    """``kernel[grid](*args, **constexprs)``; the student's exception comes back readable, with the line of
    their kernel that raised it when the interpreter ran it."""
    try:
        kernel[grid](*args, **constexprs)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - anything a kernel raises is feedback
        inner = _unwrap(error)
        if isinstance(inner, NotImplementedError):
            raise unwritten(name) from None
        text = str(inner).strip().splitlines()
        where = student_line(inner)
        shapes = any(word in str(inner).lower() for word in ("shape", "dimension", "broadcast"))
        advice = (
            _("check the shapes of the tiles there ([:, None] adds an axis, axis= picks the one a reduction removes)")
            if shapes
            else _("check the values and types that line combines")
        )
        hint = _(f"raised in {where}; {advice}") if where else advice
        kind, message = type(inner).__name__, " ".join(text)[:600]
        raise KernelFailed(name, _(f"the kernel raised {kind}: {message}"), hint=hint) from None


def run_isolated(func: Callable[[], Any], name: str, timeout_s: int = CHILD_TIMEOUT_S) -> Any:
    """``func()`` in a forked child (interpreter mode on Linux/macOS), else in this process.

    A segmentation fault or a hang in the child becomes a ``KernelFailed`` naming the step; the
    child's printed output is replayed here; exceptions come back with their type and message.
    """
    from paged_kv.kernels.triton_mode import configure

    if configure().native or not hasattr(os, "fork") or os.environ.get("PAGED_KV_NO_FORK"):
        return func()
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        code = 0
        try:
            import io

            import warnings

            torch.set_num_threads(1)
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow notes: the check explains
            capture = io.StringIO()
            sys.stdout = sys.stderr = capture
            signal.alarm(timeout_s)
            try:
                payload = ("ok", func(), capture.getvalue())
            except BaseException as error:  # noqa: BLE001
                payload = ("error", _portable(error), capture.getvalue())
            data = pickle.dumps(payload)
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _pid, status = os.waitpid(pid, 0)
    if not data:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGALRM:
                raise KernelFailed(
                    name,
                    _(f"the kernel ran for more than {timeout_s} s and was stopped"),
                    hint=_("look for a loop whose bound never stops it"),
                )
            signal_name = signal.Signals(sig).name
            raise KernelFailed(
                name,
                _(f"the kernel crashed the process ({signal_name}): it read or wrote memory far outside every tensor"),
                hint=_(
                    "check the offsets you add to the pointers (block id x stride, slot, head) "
                    "and mask every load and store"
                ),
            )
        raise KernelFailed(name, _(f"the kernel's process ended without a result (exit status {status})"))
    kind, value, printed = pickle.loads(data)
    if printed:
        print(printed, end="")
    if kind == "ok":
        return value
    raise _rebuilt(value)


def _portable(error: BaseException) -> tuple:
    """What the parent needs to raise the same kind of error (exceptions do not always pickle)."""
    if isinstance(error, CheckFailed):
        fields = {k: getattr(error, k) for k in ("expected", "got") if getattr(error, k) is not _NO_VALUE}
        try:
            pickle.dumps(fields)
        except Exception:  # noqa: BLE001
            fields = {k: repr(v) for k, v in fields.items()}
        return ("check", error.case, error.problem, error.hint, fields)
    if isinstance(error, NotImplementedError):
        return ("todo", str(error))
    return ("other", type(error).__name__, str(error), traceback.format_exc(limit=4))


def _rebuilt(value: tuple) -> BaseException:
    if value[0] == "check":
        _kind, case, problem, hint, fields = value
        return CheckFailed(case, problem, hint=hint, **fields)
    if value[0] == "todo":
        return TodoNotWritten(value[1])
    _kind, type_name, message, trace = value
    return RuntimeError(f"{type_name}: {message}\n{trace}")


def guarded_output(
    shape: Sequence[int], dtype: torch.dtype, device, margin: int = 64
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, out)``: a NaN-filled ``buffer`` and ``out``, the view of ``shape`` in its middle, with ``margin``
    elements of NaN on each side (what a kernel writes there, ``output_checked`` finds)."""
    count = math.prod(shape)
    buffer = torch.full((count + 2 * margin,), float("nan"), dtype=dtype, device=device)
    return buffer, buffer[margin : margin + count].view(*shape)


OUTSIDE_HINT = N_("mask the store, and check the row/head offsets of the output pointer")


def _check_margins(buffer: torch.Tensor, inner: torch.Tensor, name: str, hint: str = OUTSIDE_HINT) -> None:
    margin = (buffer.numel() - inner.numel()) // 2
    outside = torch.cat([buffer[:margin], buffer[margin + inner.numel() :]])
    if not torch.isnan(outside).all():
        raise KernelFailed(name, _("the kernel wrote outside its output tensor"), hint=_(hint))


def output_checked(buffer: torch.Tensor, inner: torch.Tensor, name: str, hint: str = OUTSIDE_HINT) -> torch.Tensor:
    """A copy of ``inner`` (the ``out`` of ``guarded_output``), or a ``KernelFailed`` when the kernel wrote in
    ``buffer``'s margins (``hint``: what to check, a text marked with ``N_``)."""
    _check_margins(buffer, inner, name, hint)
    return inner.clone()
