"""Run a student's Triton kernel the way lab 06 specifies, and compare tensors readably.

Each ``run_*`` function allocates the output itself (a NaN-filled view inside a larger buffer),
launches the kernel with the lab's arguments and the grid the student's grid function returns (plain
ints in, plain ints out), checks that nothing was written outside the output, and returns the output.
So the work happens inside the kernel: there is no place to compute in torch around it. In the
interpreter the launch runs in a forked child process when the OS allows it, so a wild pointer ends
in a readable error instead of killing the notebook's kernel. A ``before_launch(args)`` given to a ``run_*``
sees the very arguments the kernel is then launched with (the grader builds each launch's own
specialisation for a GPU there, before the interpreter runs it).
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

from paged_kv.lab.feedback import CheckFailed, TodoNotWritten, materialize
from paged_kv.lab.i18n import N_, _
from paged_kv.lab.kernel_cases import PagedCase

MAX_PROGRAMS = 4096
_NO_VALUE = CheckFailed('', '').expected  # the feedback module's 'no value given' marker
CHILD_TIMEOUT_S = 90
_PACKAGE_KERNEL_MODULES = ("paged_kv.kernels.triton_kernels",)


class KernelFailed(CheckFailed):
    """A kernel that could not run (crashed, raised, wrote outside its output)."""


# ----------------------------------------------------------------------------- comparisons


def expect_close(
    case: str, got: Any, expected: torch.Tensor, *, atol: float = 1e-4, rtol: float = 1e-4, hint: str = ""
) -> None:
    """Raise :class:`CheckFailed` unless the tensor ``got`` matches ``expected``.

    Shapes and dtypes must match exactly; NaN is never accepted; ``-inf`` must sit exactly where
    expected; finite values may differ by ``atol + rtol * |expected|`` (fp32 accumulation in any order).
    """
    got, expected = materialize(got), materialize(expected)
    if type(got) is not torch.Tensor:
        kind = type(got).__name__
        raise CheckFailed(case, _(f"expected a torch.Tensor, got {kind}"), hint=hint)
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailed(case, _("wrong shape"), expected=tuple(expected.shape), got=tuple(got.shape), hint=hint)
    if got.dtype != expected.dtype:
        raise CheckFailed(case, _("wrong dtype"), expected=expected.dtype, got=got.dtype, hint=hint)
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    finite = torch.isfinite(e)
    error = (g - e).abs().where(finite, torch.zeros_like(g))
    bad = (torch.isnan(g) & ~torch.isnan(e)) | (torch.isinf(e) & (g != e)) | (torch.isinf(g) & finite)
    bad |= error > atol + rtol * e.abs().where(finite, torch.zeros_like(e))
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        where = index[0] if len(index) == 1 else index
        count, total = int(bad.sum()), bad.numel()
        raise CheckFailed(
            case,
            _(f"{count} of {total} values wrong, first at index {where}"),
            expected=round(float(e[index]), 6),
            got=round(float(g[index]), 6),
            hint=hint,
        )


# ----------------------------------------------------------------------------- launching


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


def _guarded_output(
    shape: Sequence[int], dtype: torch.dtype, device, margin: int = 64
) -> Tuple[torch.Tensor, torch.Tensor]:
    count = math.prod(shape)
    buffer = torch.full((count + 2 * margin,), float("nan"), dtype=dtype, device=device)
    return buffer, buffer[margin : margin + count].view(*shape)


OUTSIDE_HINT = N_("mask the store, and check the row/head offsets of the output pointer")


def _check_margins(buffer: torch.Tensor, inner: torch.Tensor, name: str, hint: str = OUTSIDE_HINT) -> None:
    margin = (buffer.numel() - inner.numel()) // 2
    outside = torch.cat([buffer[:margin], buffer[margin + inner.numel() :]])
    if not torch.isnan(outside).all():
        raise KernelFailed(name, _("the kernel wrote outside its output tensor"), hint=_(hint))


def _finish(buffer: torch.Tensor, inner: torch.Tensor, name: str, hint: str = OUTSIDE_HINT) -> torch.Tensor:
    _check_margins(buffer, inner, name, hint)
    return inner.clone()


# ----------------------------------------------------------------------------- the lab's steps
# Each step's kernel takes its arguments in the stub's order; they are passed positionally (constexprs
# included), so a renamed parameter changes nothing.


def gather_args(case: PagedCase, out: torch.Tensor, seq: int, kv_head: int) -> list:
    k = case.k_cache
    return [
        k,
        case.block_tables[seq],
        out,
        case.seq_len(seq),
        kv_head,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def scores_args(case: PagedCase, scores: torch.Tensor, seq: int, q_head: int) -> list:
    k = case.k_cache
    return [
        case.q[seq, q_head],
        k,
        case.block_tables[seq],
        scores,
        case.seq_len(seq),
        q_head // case.group,
        case.scale,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def attend_args(case: PagedCase, out: torch.Tensor, seq: int, q_head: int) -> list:
    k = case.k_cache
    return [
        case.q[seq, q_head],
        k,
        case.v_cache,
        case.block_tables[seq],
        out,
        case.seq_len(seq),
        q_head // case.group,
        case.scale,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def decode_args(case: PagedCase, out: torch.Tensor) -> list:
    q, k, tables = case.q, case.k_cache, case.block_tables
    group = case.group
    return [
        q,
        k,
        case.v_cache,
        tables,
        case.seq_lens,
        out,
        case.scale,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        tables.stride(0),
        out.stride(0),
        out.stride(1),
        group,
        1 << (group - 1).bit_length(),
        case.block_size,
        case.head_dim,
    ]


def _one_launch(
    kernel,
    grid,
    name: str,
    shape,
    dtype,
    make_args: Callable,
    device,
    margin: int = 64,
    hint: str = OUTSIDE_HINT,
    before_launch: Optional[Callable[[list], None]] = None,
) -> Callable[[], torch.Tensor]:
    """The launch as a function to run (in a child, in the interpreter). Its output and arguments are made here,
    first, so that ``before_launch(args)`` sees the very arguments the kernel is launched with (the grader's
    compile box builds each launch's own specialisation for a GPU before it runs)."""
    buffer, out = _guarded_output(shape, dtype, device, margin)
    args = make_args(out)
    if before_launch is not None:
        before_launch(args)

    def body():
        launch(kernel, grid, name, *args)
        return _finish(buffer, out, name, hint)

    return body


def run_gather(
    kernel,
    grid_fn: Callable,
    case: PagedCase,
    seq: int = 0,
    kv_head: int = 0,
    name: str = "gather_keys_kernel",
    before_launch: Optional[Callable] = None,
) -> torch.Tensor:
    """Step 1: ``[seq_len, head_dim]`` keys of one sequence and KV head, read through its block table."""
    check_kernel(kernel, name)
    grid = check_grid(grid_fn(case.seq_len(seq), case.block_size), name)
    shape = (case.seq_len(seq), case.head_dim)
    return run_isolated(
        _one_launch(
            kernel,
            grid,
            name,
            shape,
            case.k_cache.dtype,
            lambda out: gather_args(case, out, seq, kv_head),
            case.q.device,
            before_launch=before_launch,
        ),
        name,
    )


def run_scores(
    kernel,
    grid_fn: Callable,
    case: PagedCase,
    seq: int = 0,
    q_head: int = 0,
    name: str = "scores_kernel",
    before_launch: Optional[Callable] = None,
) -> torch.Tensor:
    """Step 2: float32 scores of one query head over its sequence's blocks, ``-inf`` in the tail."""
    check_kernel(kernel, name)
    n = case.seq_len(seq)
    grid = check_grid(grid_fn(n, case.block_size), name)
    shape = (-(-n // case.block_size) * case.block_size,)
    return run_isolated(
        _one_launch(
            kernel,
            grid,
            name,
            shape,
            torch.float32,
            lambda out: scores_args(case, out, seq, q_head),
            case.q.device,
            before_launch=before_launch,
        ),
        name,
    )


def run_attend(
    kernel,
    case: PagedCase,
    seq: int = 0,
    q_head: int = 0,
    name: str = "attend_kernel",
    before_launch: Optional[Callable] = None,
) -> torch.Tensor:
    """Step 3: attention output ``[head_dim]`` (in ``q.dtype``) of one query head, one program."""
    check_kernel(kernel, name)
    return run_isolated(
        _one_launch(
            kernel,
            (1,),
            name,
            (case.head_dim,),
            case.q.dtype,
            lambda out: attend_args(case, out, seq, q_head),
            case.q.device,
            before_launch=before_launch,
        ),
        name,
    )


def run_decode(
    kernel,
    grid_fn: Callable,
    case: PagedCase,
    name: str = "paged_decode_kernel",
    before_launch: Optional[Callable] = None,
) -> torch.Tensor:
    """Step 4: the whole batch, ``[num_seqs, num_q_heads, head_dim]``, one program per (sequence, KV head)."""
    check_kernel(kernel, name)
    grid = check_grid(grid_fn(case.num_seqs, case.num_kv_heads), name, programs=case.num_seqs * case.num_kv_heads)
    return run_isolated(
        _one_launch(
            kernel,
            grid,
            name,
            tuple(case.q.shape),
            case.q.dtype,
            lambda out: decode_args(case, out),
            case.q.device,
            before_launch=before_launch,
        ),
        name,
    )


def fast_decode_args(case: PagedCase, out: torch.Tensor, tile: int = 64) -> list:
    """Step 5's arguments: step 4's, with ``GROUP_PAD`` at least 16 (``tl.dot``'s smallest M) and ``TILE`` last."""
    if not isinstance(tile, int) or isinstance(tile, bool) or tile < 16 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 16 (tl.dot's smallest size), got {tile!r}")
    args = decode_args(case, out)
    args[-3] = max(16, args[-3])
    return args + [tile]


def run_fast_decode(
    kernel, case: PagedCase, tile: int = 64, name: str = "fast_decode_kernel", before_launch: Optional[Callable] = None
) -> torch.Tensor:
    """Step 5: the whole batch like step 4, grid ``(num_seqs, num_kv_heads)``, each program walking ``TILE``
    tokens per iteration whatever the block size."""
    check_kernel(kernel, name)
    fast_decode_args(case, case.q, tile)  # a bad tile is the caller's error, before anything runs
    grid = (case.num_seqs, case.num_kv_heads)
    # The guard after the output holds a whole padded group: unmasked padding rows land there, not in the heap.
    margin = 64 + max(16, 2 * case.group) * case.head_dim
    return run_isolated(
        _one_launch(
            kernel,
            grid,
            name,
            tuple(case.q.shape),
            case.q.dtype,
            lambda out: fast_decode_args(case, out, tile),
            case.q.device,
            margin,
            hint=N_(
                "mask the store with the rows < GROUP: the GROUP_PAD - GROUP padding rows "
                "belong to no query head of this program"
            ),
            before_launch=before_launch,
        ),
        name,
    )


def split_args(case: PagedCase, part_out: torch.Tensor, part_lse: torch.Tensor, tokens_per_split: int) -> list:
    q, k, tables = case.q, case.k_cache, case.block_tables
    return (
        decode_args(case, q)[:5]
        + [
            part_out,
            part_lse,
            case.scale,
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            tables.stride(0),
            tokens_per_split,
            part_out.shape[2],
        ]
        + decode_args(case, q)[-4:]
    )


def run_split_decode(
    split_kernel, merge_kernel, case: PagedCase, tokens_per_split: int, name: str = "split-KV kernels"
) -> torch.Tensor:
    """Stretch: split-KV. ``split_kernel`` (grid ``(num_seqs, num_kv_heads, num_splits)``) writes float32
    partial outputs ``[num_seqs, num_q_heads, num_splits, head_dim]`` and their natural-log log-sum-exp
    ``[num_seqs, num_q_heads, num_splits]``; ``merge_kernel`` (grid ``(num_seqs, num_q_heads)``) combines them."""
    check_kernel(split_kernel, name)
    check_kernel(merge_kernel, name)
    num_splits = -(-int(case.seq_lens.max()) // tokens_per_split)
    seqs, heads, dim = case.q.shape

    def body():
        device = case.q.device
        part_out = torch.full((seqs, heads, num_splits, dim), float("nan"), device=device)
        part_lse = torch.full((seqs, heads, num_splits), float("nan"), device=device)
        buffer, out = _guarded_output((seqs, heads, dim), case.q.dtype, device)
        launch(
            split_kernel,
            (seqs, case.num_kv_heads, num_splits),
            name,
            *split_args(case, part_out, part_lse, tokens_per_split),
        )
        launch(
            merge_kernel,
            (seqs, heads),
            name,
            part_out,
            part_lse,
            out,
            out.stride(0),
            out.stride(1),
            num_splits,
            1 << (num_splits - 1).bit_length(),
            dim,
        )
        return _finish(buffer, out, name)

    return run_isolated(body, name)


# ----------------------------------------------------------------------------- a real GPU kernel?


def require_gpu_build(kernel, args: Sequence[Any], name: str, arch: int = 90):
    """Compile ``kernel`` for ``sm_{arch}`` with these launch arguments; a ``CheckFailed`` if it cannot be.

    The interpreter runs any Python inside a kernel; the GPU compiler accepts only Triton operations.
    """
    from paged_kv.kernels.triton_compile import compile_error_message, compile_for_gpu, kernel_parameters

    check_kernel(kernel, name)  # an unwritten stub says so, rather than that it does not compile
    params = kernel_parameters(kernel)
    if len(params) != len(args):
        taken, passed = len(params), len(args)
        raise CheckFailed(
            name,
            _(f"the kernel takes {taken} parameters, the lab passes {passed}"),
            hint=_("keep the stub's parameter list as it is"),
        )
    try:
        return compile_for_gpu(kernel, dict(zip(params, args)), arch=arch)
    except Exception as error:  # noqa: BLE001 - any compiler error is the student's feedback
        message = compile_error_message(error)
        raise CheckFailed(
            name,
            _(f"does not compile for an NVIDIA GPU (sm_{arch}): {message}"),
            hint=_(
                "the interpreter runs any Python, the GPU compiler only Triton code: inside "
                "@triton.jit use tl.* operations on tensors, no torch/numpy calls, no int(x) "
                "on a tensor, no Python lists of values"
            ),
        ) from None


# ---- step 5: what the GPU compiler makes of the fast kernel ------------------------------------------------
# One layer of Llama-3.1-8B (its config.json: 32 attention heads, 8 KV heads, head dim 4096 / 32 = 128), in fp16.
LLAMA_LAYER = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, dtype=torch.float16)
NO_DOT_HINT = N_(
    "scores = tl.dot(q, tl.trans(k)) with q [GROUP_PAD, HEAD_DIM] and k [TILE, HEAD_DIM]; then "
    "acc += tl.dot(p.to(v.dtype), v)"
)
TILES_HINT = N_(
    "the work per iteration must be TILE tokens whatever the block size: pos = start + tl.arange(0, TILE), "
    "block = table[pos // BLOCK_SIZE], slot = pos % BLOCK_SIZE"
)


def fast_build_args(block_size: int, tile: int = 64) -> list:
    """Arguments of step 5's kernel for one Llama-3.1-8B layer at ``block_size`` (for an offline build)."""
    from paged_kv.lab.kernel_cases import paged_case

    case = paged_case([block_size + 3], block_size=block_size, device="cpu", **LLAMA_LAYER)
    return fast_decode_args(case, case.q.clone(), tile)


def dot_input_types(dot: str) -> Tuple[str, str]:
    """The element types of a ``tl.dot``'s two inputs, from its ``dot_shapes`` text (``"16x128xf16 * ..."``)."""
    inputs = dot.split("->")[0].split("*")
    return tuple(operand.strip().rsplit("x", 1)[-1] for operand in inputs[:2])


SIXTEEN_BIT_INPUTS = ("f16", "bf16")


def judge_fast_build(build, block_size: int) -> None:
    """A ``CheckFailed`` unless the sm_90 build has two ``tl.dot`` on 16-bit tiles accumulating in fp32 and spills
    nothing."""
    arch, dots = build.arch, len(build.dots)
    label = _(f"sm_{arch}, Llama-3.1-8B layer, block size {block_size}")
    if len(build.dots) < 2:
        raise CheckFailed(
            label,
            _(
                f"{dots} tl.dot in the compiled kernel, 2 expected (q . K and p . V): a "
                "product written as a broadcast and tl.sum never reaches the tensor cores"
            ),
            hint=_(NO_DOT_HINT),
        )
    narrow = [d for d in build.dots if not d.endswith("xf32")]
    if narrow:
        first = narrow[0]
        raise CheckFailed(
            label,
            _(f"tl.dot accumulates in 16 bits ({first})"),
            hint=_(
                "leave tl.dot's out_dtype at its default, float32: a 16-bit running sum of 128 products loses "
                "about three digits"
            ),
        )
    wide = [(i, d) for i, d in enumerate(build.dots) if any(t not in SIXTEEN_BIT_INPUTS for t in dot_input_types(d))]
    if wide:
        which, dot = wide[0]
        number = which + 1
        product = ("q . K", "p . V")[which] if which < 2 else _(f"tl.dot number {number}")
        types = _(" and ").join(dict.fromkeys(dot_input_types(dot)))
        raise CheckFailed(
            label,
            _(f"the {product} tl.dot takes {types} tiles ({dot}), not 16-bit ones"),
            hint=_(
                "tl.dot should take fp16/bf16 tiles (the tensor cores' full-rate inputs; fp32 ones run "
                "as tf32 or without them) and accumulate in fp32, its default: keep q, K and V in the "
                "cache's dtype and cast p to V's dtype for the second one, tl.dot(p.to(v.dtype), v)"
            ),
        )
    if build.spill_bytes is None:
        raise CheckFailed(
            label,
            _("ptxas is not available here, so spills cannot be counted and this check fails"),
            hint=_("Triton's wheel ships ptxas; reinstall triton, or grade where it is present"),
        )
    if build.spill_bytes > 0:
        spilled, registers = build.spill_bytes, build.registers
        raise CheckFailed(
            label,
            _(f"{spilled} bytes per thread spilled to local memory ({registers} registers per thread)"),
            hint=_("a tile that grows with BLOCK_SIZE does not fit in registers: ") + _(TILES_HINT),
        )


def judge_same_tiles(first, first_block_size: int, build, block_size: int) -> None:
    """A ``CheckFailed`` when the kernel's ``tl.dot`` shapes change with the block size."""
    if build.dots != first.dots:
        arch, before, after = build.arch, first.dots[0], build.dots[0]
        raise CheckFailed(
            _(f"sm_{arch}, block sizes {first_block_size} and {block_size}"),
            _(
                f"the tiles follow BLOCK_SIZE: tl.dot works on {before} at block size {first_block_size} and on "
                f"{after} at {block_size}"
            ),
            hint=_(TILES_HINT),
        )


def expect_fast_builds(
    kernel,
    block_sizes: Sequence[int] = (16, 32),
    name: str = "fast_decode_kernel",
    *,
    build_with: Optional[Callable] = None,
) -> dict:
    """Build step 5's kernel for sm_90 at each block size (TILE 64) and judge each build; ``{block_size: build}``.
    ``build_with(kernel, args, name)`` builds (default ``require_gpu_build``; a grader builds from the submitted text)."""
    builds: dict = {}
    for block_size in block_sizes:
        build = (build_with or require_gpu_build)(kernel, fast_build_args(block_size), name)
        judge_fast_build(build, block_size)
        if builds:
            first_size, first = next(iter(builds.items()))
            judge_same_tiles(first, first_size, build, block_size)
        builds[block_size] = build
    return builds
