"""Lab 06's trusted launchers and case makers: what a graded cell's ``run_gather``, ``paged_case``... are, whatever the
notebook's names hold (``TRUSTED_NAMES``). A kernel of the grading kernel is built and run from its submitted text in
the compile box (``autograder.verdict.kernels``), on the case rebuilt there from its recipe, with the grid the
student's grid function returns from plain ints (checked here); a kernel of this process runs through the lab's own
launchers (``paged_kv.lab.kernel_lab``)."""

from __future__ import annotations

from typing import Callable

import torch

from paged_kv.lab import kernel_cases
from paged_kv.lab import kernel_lab as lab
from paged_kv.lab.feedback import materialize
from paged_kv.lab.kernel_cases import PagedCase

from autograder.labs.checking import CheckFailed, _, call, is_remote


def paged_case(*args, **kwargs) -> PagedCase:
    """The lab's ``paged_case``, made on this process's CPU (the grading kernel rebuilds it from its recipe)."""
    return kernel_cases.paged_case(*args, **{"device": "cpu", **kwargs})


def far_pool_case(*args, **kwargs) -> PagedCase:
    """The lab's ``far_pool_case``, made on this process's CPU (a sparse file: no memory, no disk)."""
    return kernel_cases.far_pool_case(*args, **{"device": "cpu", **kwargs})


def require_gpu_build(kernel, args, name: str, arch: int = 90):
    """Build ``kernel`` for ``sm_{arch}``: from its submitted text when it lives in the grading kernel."""
    if is_remote(kernel):
        from autograder.verdict.cells import CONTEXT

        return CONTEXT.kernels().build(name, args, arch)
    return lab.require_gpu_build(kernel, args, name, arch=arch)


def _grid(grid_fn, name: str, *sizes: int, programs=None):
    """What the student's grid function returns for these plain ints, checked as the lab's launchers do."""
    return lab.check_grid(materialize(call(_(f"{name}'s grid"), grid_fn, *sizes)), name, programs)


def _in_compile_box(name: str, launcher: str, case: PagedCase, grid=None, **params) -> torch.Tensor:
    """The submitted kernel ``name`` run by ``launcher`` in the compile box, on ``case`` rebuilt there."""
    from autograder.verdict.cells import CONTEXT

    try:
        return CONTEXT.kernels().launch(name, launcher, case, grid, **params)
    except MemoryError as error:
        raise no_room(error) from None


def run_gather(
    kernel, grid_fn: Callable, case: PagedCase, seq: int = 0, kv_head: int = 0, name: str = "gather_keys_kernel"
) -> torch.Tensor:
    """The lab's ``run_gather``; a kernel of the grading kernel runs from its text in the compile box."""
    if not is_remote(kernel):
        return lab.run_gather(kernel, grid_fn, case, seq, kv_head, name)
    grid = _grid(grid_fn, name, case.seq_len(seq), case.block_size)
    return _in_compile_box(name, "run_gather", case, grid, seq=seq, kv_head=kv_head)


def run_scores(
    kernel, grid_fn: Callable, case: PagedCase, seq: int = 0, q_head: int = 0, name: str = "scores_kernel"
) -> torch.Tensor:
    """The lab's ``run_scores``; a kernel of the grading kernel runs from its text in the compile box."""
    if not is_remote(kernel):
        return lab.run_scores(kernel, grid_fn, case, seq, q_head, name)
    grid = _grid(grid_fn, name, case.seq_len(seq), case.block_size)
    return _in_compile_box(name, "run_scores", case, grid, seq=seq, q_head=q_head)


def run_attend(kernel, case: PagedCase, seq: int = 0, q_head: int = 0, name: str = "attend_kernel") -> torch.Tensor:
    """The lab's ``run_attend``; a kernel of the grading kernel runs from its text in the compile box."""
    if not is_remote(kernel):
        return lab.run_attend(kernel, case, seq, q_head, name)
    return _in_compile_box(name, "run_attend", case, seq=seq, q_head=q_head)


def run_decode(kernel, grid_fn: Callable, case: PagedCase, name: str = "paged_decode_kernel") -> torch.Tensor:
    """The lab's ``run_decode``; a kernel of the grading kernel runs from its text in the compile box."""
    if not is_remote(kernel):
        return lab.run_decode(kernel, grid_fn, case, name)
    grid = _grid(grid_fn, name, case.num_seqs, case.num_kv_heads, programs=case.num_seqs * case.num_kv_heads)
    return _in_compile_box(name, "run_decode", case, grid)


def run_fast_decode(kernel, case: PagedCase, tile: int = 64, name: str = "fast_decode_kernel") -> torch.Tensor:
    """The lab's ``run_fast_decode``; a kernel of the grading kernel runs from its text in the compile box."""
    if not is_remote(kernel):
        return lab.run_fast_decode(kernel, case, tile, name)
    lab.fast_decode_args(case, case.q, tile)  # a bad tile is the caller's error, before anything runs
    return _in_compile_box(name, "run_fast_decode", case, tile=tile)


# The graded cells' launchers and case makers are these, whatever the notebook's names hold.
TRUSTED_NAMES = {
    "require_gpu_build": require_gpu_build,
    "paged_case": paged_case,
    "far_pool_case": far_pool_case,
    "run_gather": run_gather,
    "run_scores": run_scores,
    "run_attend": run_attend,
    "run_decode": run_decode,
    "run_fast_decode": run_fast_decode,
}


def no_room(error: MemoryError) -> CheckFailed:
    """The failure of a case that found no room to run here (the int64 pool's sparse file): not the student's."""
    return CheckFailed(
        _("pool past 2**32 elements"),
        _(f"the int64 case could not run here ({error}), so this check scores 0"),
        hint=_(
            "ask your instructor to grade this notebook again on the CPU "
            "(the interpreter) or on a GPU with enough free memory"
        ),
    )
