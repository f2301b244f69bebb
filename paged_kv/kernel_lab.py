"""Run a student's Triton kernel the way lab 06 specifies, and compare tensors readably.

Each ``run_*`` function allocates the output itself (a NaN-filled view inside a larger buffer),
launches the kernel with the lab's arguments and the grid the student's grid function returns (plain
ints in, plain ints out), checks that nothing was written outside the output, and returns the output.
So the work happens inside the kernel: there is no place to compute in torch around it. In the
interpreter the launch runs in a forked child process when the OS allows it, so a wild pointer ends
in a readable error instead of killing the notebook's kernel.
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

from .kernel_cases import PagedCase

MAX_PROGRAMS = 4096
CHILD_TIMEOUT_S = 90
_PACKAGE_KERNEL_MODULES = ("paged_kv.triton_kernels",)


class KernelFailed(AssertionError):
    """A kernel that could not run (crashed, raised, wrote outside its output)."""


# ----------------------------------------------------------------------------- comparisons

def expect_close(case: str, got: Any, expected: torch.Tensor, *, atol: float = 1e-4, rtol: float = 1e-4,
                 hint: str = "") -> None:
    """Raise ``AssertionError`` (``[case] problem / expected / got / hint``) unless ``got`` matches ``expected``.

    Shapes and dtypes must match exactly; NaN is never accepted; ``-inf`` must sit exactly where
    expected; finite values may differ by ``atol + rtol * |expected|`` (fp32 accumulation in any order).
    """
    def fail(problem: str, want: str, have: str) -> None:
        lines = [f"[{case}] {problem}", f"expected: {want}", f"got: {have}"]
        if hint:
            lines.append(f"hint: {hint}")
        raise AssertionError("\n".join(lines))

    if type(got) is not torch.Tensor:
        fail("wrong type", "a torch.Tensor", type(got).__name__)
    if tuple(got.shape) != tuple(expected.shape):
        fail("wrong shape", str(tuple(expected.shape)), str(tuple(got.shape)))
    if got.dtype != expected.dtype:
        fail("wrong dtype", str(expected.dtype), str(got.dtype))
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    nan = torch.isnan(g) & ~torch.isnan(e)
    if nan.any():
        index = _first(nan)
        fail(f"NaN at index {index}", _fmt(e[index]), "nan")
    inf_expected, inf_got = torch.isinf(e), torch.isinf(g)
    wrong_inf = (inf_expected != inf_got) | (inf_expected & (torch.sign(e) != torch.sign(g)))
    if wrong_inf.any():
        index = _first(wrong_inf)
        fail(f"wrong value at index {index}", _fmt(e[index]), _fmt(g[index]))
    finite = ~inf_expected
    error = (g - e).abs().where(finite, torch.zeros_like(g))
    bad = error > atol + rtol * e.abs().where(finite, torch.zeros_like(e))
    if bad.any():
        index = _first(bad)
        fail(f"wrong value at index {index} (largest error {error.max().item():.3g})", _fmt(e[index]), _fmt(g[index]))


def _first(mask: torch.Tensor) -> tuple:
    return tuple(int(i) for i in mask.nonzero()[0])


def _fmt(x: torch.Tensor) -> str:
    value = float(x)
    return f"{value:.6g}"


# ----------------------------------------------------------------------------- launching

def is_stub(kernel) -> bool:
    """True while the kernel's body is still the ``raise NotImplementedError()`` stub."""
    fn = getattr(kernel, "fn", None)
    return fn is not None and "NotImplementedError" in fn.__code__.co_names


def check_kernel(kernel, name: str) -> None:
    """A ``@triton.jit`` kernel of the student's own, finished: raise otherwise."""
    if type(kernel).__name__ not in ("JITFunction", "InterpretedFunction"):
        raise AssertionError(f"[{name}] expected a @triton.jit kernel, got {type(kernel).__name__}\n"
                             "hint: keep the @triton.jit decorator above the function")
    if is_stub(kernel):
        raise NotImplementedError(f"{name} is still the stub: write its body")
    borrowed = package_kernels_used(kernel)
    if borrowed:
        raise AssertionError(f"[{name}] calls the course package's kernels ({', '.join(borrowed)})\n"
                             "hint: the point is to write the kernel yourself; this step gets no points")


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
    if (not isinstance(grid, tuple) or not 1 <= len(grid) <= 3
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid)):
        raise AssertionError(f"[{name}] the grid must be a tuple of 1 to 3 positive ints\n"
                             f"got: {grid!r}")
    total = math.prod(grid)
    if total > MAX_PROGRAMS:
        raise AssertionError(f"[{name}] the grid {grid} launches {total} programs, more than {MAX_PROGRAMS}\n"
                             "hint: one program per block or per (sequence, KV head) is enough")
    if programs is not None and total != programs:
        raise AssertionError(f"[{name}] the grid {grid} launches {total} programs\n"
                             f"expected: {programs} programs, one per (sequence, KV head)\n"
                             "hint: each program covers one KV head's whole query-head group, so K and V "
                             "are read once per group")
    return grid


def launch(kernel, grid: Tuple[int, ...], name: str, *args, **constexprs) -> None:
    """``kernel[grid](*args, **constexprs)``; the student's exception comes back readable."""
    try:
        kernel[grid](*args, **constexprs)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - anything a kernel raises is feedback
        inner = _unwrap(error)
        if isinstance(inner, NotImplementedError):
            raise NotImplementedError(f"{name} is still the stub: write its body") from None
        text = str(inner).strip().splitlines()
        raise KernelFailed(f"[{name}] the kernel raised {type(inner).__name__}: {' '.join(text)[:600]}") from None


def run_isolated(func: Callable[[], Any], name: str, timeout_s: int = CHILD_TIMEOUT_S) -> Any:
    """``func()`` in a forked child (interpreter mode on Linux/macOS), else in this process.

    A segmentation fault or a hang in the child becomes a ``KernelFailed`` naming the step; the
    child's printed output is replayed here; exceptions come back with their type and message.
    """
    from .triton_mode import configure

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

            torch.set_num_threads(1)
            capture = io.StringIO()
            sys.stdout = sys.stderr = capture
            signal.alarm(timeout_s)
            try:
                payload = ("ok", func(), capture.getvalue())
            except BaseException as error:  # noqa: BLE001
                payload = ("error", (type(error).__name__, _error_kind(error), str(error),
                                     traceback.format_exc(limit=3)), capture.getvalue())
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
    _, status = os.waitpid(pid, 0)
    if not data:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGALRM:
                raise KernelFailed(f"[{name}] the kernel ran for more than {timeout_s} s and was stopped\n"
                                   "hint: look for a loop whose bound never stops it")
            raise KernelFailed(f"[{name}] the kernel crashed the process ({signal.Signals(sig).name}): it read or "
                               "wrote memory far outside every tensor\nhint: check the offsets you add to the "
                               "pointers (block id x stride, slot, head) and mask every load and store")
        raise KernelFailed(f"[{name}] the kernel's process ended without a result (exit status {status})")
    kind, value, printed = pickle.loads(data)
    if printed:
        print(printed, end="")
    if kind == "ok":
        return value
    type_name, family, message, _ = value
    if family == "NotImplementedError":
        raise NotImplementedError(message)
    if family == "AssertionError":
        raise AssertionError(message)
    raise KernelFailed(f"[{name}] {type_name}: {message}")


def _error_kind(error: BaseException) -> str:
    for family in (NotImplementedError, AssertionError):
        if isinstance(error, family):
            return family.__name__
    return "other"


def _guarded_output(shape: Sequence[int], dtype: torch.dtype, margin: int = 64) -> Tuple[torch.Tensor, torch.Tensor]:
    count = math.prod(shape)
    buffer = torch.full((count + 2 * margin,), float("nan"), dtype=dtype)
    return buffer, buffer[margin:margin + count].view(*shape)


def _check_margins(buffer: torch.Tensor, inner: torch.Tensor, name: str) -> None:
    margin = (buffer.numel() - inner.numel()) // 2
    outside = torch.cat([buffer[:margin], buffer[margin + inner.numel():]])
    if not torch.isnan(outside).all():
        raise KernelFailed(f"[{name}] the kernel wrote outside its output tensor\n"
                           "hint: mask the store, and check the row/head offsets of the output pointer")


def _finish(buffer: torch.Tensor, inner: torch.Tensor, name: str) -> torch.Tensor:
    _check_margins(buffer, inner, name)
    return inner.clone()


# ----------------------------------------------------------------------------- the lab's steps

def run_gather(kernel, grid_fn: Callable, case: PagedCase, seq: int = 0, kv_head: int = 0,
               name: str = "gather_keys_kernel") -> torch.Tensor:
    """Step 1: ``[seq_len, head_dim]`` keys of one sequence and KV head, read through its block table."""
    check_kernel(kernel, name)
    n = case.seq_len(seq)
    grid = check_grid(grid_fn(n, case.block_size), name)
    k = case.k_cache

    def body():
        buffer, out = _guarded_output((n, case.head_dim), k.dtype)
        launch(kernel, grid, name, k, case.block_tables[seq], out, n, kv_head, k.stride(0), k.stride(1), k.stride(2),
               BLOCK_SIZE=case.block_size, HEAD_DIM=case.head_dim)
        return _finish(buffer, out, name)

    return run_isolated(body, name)


def run_scores(kernel, grid_fn: Callable, case: PagedCase, seq: int = 0, q_head: int = 0,
               name: str = "scores_kernel") -> torch.Tensor:
    """Step 2: float32 scores of one query head over its sequence's blocks, ``-inf`` in the tail."""
    check_kernel(kernel, name)
    n = case.seq_len(seq)
    padded = -(-n // case.block_size) * case.block_size
    grid = check_grid(grid_fn(n, case.block_size), name)
    k = case.k_cache

    def body():
        buffer, scores = _guarded_output((padded,), torch.float32)
        launch(kernel, grid, name, case.q[seq, q_head], k, case.block_tables[seq], scores, n, q_head // case.group,
               case.scale, k.stride(0), k.stride(1), k.stride(2), BLOCK_SIZE=case.block_size, HEAD_DIM=case.head_dim)
        return _finish(buffer, scores, name)

    return run_isolated(body, name)


def run_attend(kernel, case: PagedCase, seq: int = 0, q_head: int = 0, name: str = "attend_kernel") -> torch.Tensor:
    """Step 3: attention output ``[head_dim]`` (in ``q.dtype``) of one query head, one program."""
    check_kernel(kernel, name)
    n = case.seq_len(seq)
    k = case.k_cache

    def body():
        buffer, out = _guarded_output((case.head_dim,), case.q.dtype)
        launch(kernel, (1,), name, case.q[seq, q_head], k, case.v_cache, case.block_tables[seq], out, n,
               q_head // case.group, case.scale, k.stride(0), k.stride(1), k.stride(2),
               BLOCK_SIZE=case.block_size, HEAD_DIM=case.head_dim)
        return _finish(buffer, out, name)

    return run_isolated(body, name)


def decode_args(case: PagedCase, out: torch.Tensor) -> tuple:
    """Positional arguments of step 4's ``paged_decode_kernel`` (before the constexprs)."""
    q, k, tables = case.q, case.k_cache, case.block_tables
    return (q, k, case.v_cache, tables, case.seq_lens, out, case.scale, q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), k.stride(2), tables.stride(0), out.stride(0), out.stride(1))


def decode_constexprs(case: PagedCase) -> dict:
    group = case.group
    return dict(GROUP=group, GROUP_PAD=1 << (group - 1).bit_length(), BLOCK_SIZE=case.block_size,
                HEAD_DIM=case.head_dim)


def run_decode(kernel, grid_fn: Callable, case: PagedCase, name: str = "paged_decode_kernel") -> torch.Tensor:
    """Step 4: the whole batch, ``[num_seqs, num_q_heads, head_dim]``, one program per (sequence, KV head)."""
    check_kernel(kernel, name)
    grid = check_grid(grid_fn(case.num_seqs, case.num_kv_heads), name, programs=case.num_seqs * case.num_kv_heads)

    def body():
        buffer, out = _guarded_output(tuple(case.q.shape), case.q.dtype)
        launch(kernel, grid, name, *decode_args(case, out), **decode_constexprs(case))
        return _finish(buffer, out, name)

    return run_isolated(body, name)


def run_split_decode(split_kernel, merge_kernel, case: PagedCase, tokens_per_split: int,
                     name: str = "split-KV kernels") -> torch.Tensor:
    """Stretch: split-KV. Grid ``(num_seqs, num_kv_heads, num_splits)`` writes float32 partial outputs
    ``[num_seqs, num_q_heads, num_splits, head_dim]`` and their log-sum-exp; ``merge_kernel`` (grid
    ``(num_seqs, num_q_heads)``) combines them into ``[num_seqs, num_q_heads, head_dim]``."""
    check_kernel(split_kernel, name)
    check_kernel(merge_kernel, name)
    num_splits = -(-int(case.seq_lens.max()) // tokens_per_split)
    shape = tuple(case.q.shape)

    def body():
        part_out = torch.full((shape[0], shape[1], num_splits, shape[2]), float("nan"))
        part_lse = torch.full((shape[0], shape[1], num_splits), float("nan"))
        buffer, out = _guarded_output(shape, case.q.dtype)
        q, k, tables = case.q, case.k_cache, case.block_tables
        launch(split_kernel, (shape[0], case.num_kv_heads, num_splits), name, q, k, case.v_cache, tables,
               case.seq_lens, part_out, part_lse, case.scale, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
               k.stride(2), tables.stride(0), TOKENS_PER_SPLIT=tokens_per_split, NUM_SPLITS=num_splits,
               **decode_constexprs(case))
        launch(merge_kernel, (shape[0], shape[1]), name, part_out, part_lse, out, out.stride(0), out.stride(1),
               NUM_SPLITS=num_splits, SPLITS_PAD=1 << (num_splits - 1).bit_length(), HEAD_DIM=case.head_dim)
        return _finish(buffer, out, name)

    return run_isolated(body, name)
