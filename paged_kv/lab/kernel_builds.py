"""Build a student's kernel for a GPU, and judge what the compiler made of step 5's (the interpreter runs any Python).

``require_gpu_build`` compiles a kernel for ``sm_90`` with a launch's own arguments (``paged_kv.kernels.
triton_compile``: no GPU needed) and turns a compiler error into feedback. ``expect_fast_builds`` builds step 5's
kernel for one Llama-3.1-8B layer at several block sizes and judges each build: two ``tl.dot`` on 16-bit tiles
accumulating in fp32 (``judge_fast_build``), nothing spilled, and the same tiles whatever the block size
(``judge_same_tiles``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple

import torch

from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.i18n import N_, _
from paged_kv.lab.kernel_args import fast_decode_args
from paged_kv.lab.kernel_cases import paged_case
from paged_kv.lab.kernel_launch import check_kernel


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
        product = (_("the q . K tl.dot"), _("the p . V tl.dot"))[which] if which < 2 else _(f"tl.dot number {number}")
        types = _(" and ").join(dict.fromkeys(dot_input_types(dot)))
        raise CheckFailed(
            label,
            _(f"{product} takes {types} tiles ({dot}), not 16-bit ones"),
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
