"""Run a student's Triton kernel the way lab 06 specifies, and compare tensors readably.

Each ``run_*`` function allocates the output itself (a NaN-filled view inside a larger buffer),
launches the kernel with the lab's arguments and the grid the student's grid function returns (plain
ints in, plain ints out), checks that nothing was written outside the output, and returns the output.
So the work happens inside the kernel: there is no place to compute in torch around it. In the
interpreter the launch runs in a forked child process when the OS allows it, so a wild pointer ends
in a readable error instead of killing the notebook's kernel. A ``before_launch(args)`` given to a ``run_*``
sees the very arguments the kernel is then launched with (the grader builds each launch's own
specialisation for a GPU there, before the interpreter runs it).

This is the module the notebook imports. Its pieces live beside it, and their names are importable from here:
``kernel_launch`` (checking a kernel and its grid, launching it in a child process, the guarded output),
``kernel_args`` (each step's arguments, in the stub's order) and ``kernel_builds`` (a build for a GPU, and the
judge of step 5's builds).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from paged_kv.lab.feedback import CheckFailed, materialize
from paged_kv.lab.i18n import N_, _
from paged_kv.lab.kernel_args import (  # noqa: F401 - the notebook's names
    attend_args,
    decode_args,
    fast_decode_args,
    gather_args,
    scores_args,
    split_args,
)
from paged_kv.lab.kernel_builds import (  # noqa: F401 - the notebook's names
    LLAMA_LAYER,
    NO_DOT_HINT,
    SIXTEEN_BIT_INPUTS,
    TILES_HINT,
    dot_input_types,
    expect_fast_builds,
    fast_build_args,
    judge_fast_build,
    judge_same_tiles,
    require_gpu_build,
)
from paged_kv.lab.kernel_cases import PagedCase
from paged_kv.lab.kernel_launch import (  # noqa: F401 - the notebook's and the compile box's names
    _NO_VALUE,
    CHILD_TIMEOUT_S,
    MAX_PROGRAMS,
    OUTSIDE_HINT,
    KernelFailed,
    check_grid,
    check_kernel,
    guarded_output,
    is_stub,
    launch,
    output_checked,
    package_kernels_used,
    run_isolated,
    student_line,
    unwritten,
)


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


# ----------------------------------------------------------------------------- the lab's steps


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
    buffer, out = guarded_output(shape, dtype, device, margin)
    args = make_args(out)
    if before_launch is not None:
        before_launch(args)

    def body():
        launch(kernel, grid, name, *args)
        return output_checked(buffer, out, name, hint)

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
        buffer, out = guarded_output((seqs, heads, dim), case.q.dtype, device)
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
        return output_checked(buffer, out, name)

    return run_isolated(body, name)
