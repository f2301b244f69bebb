"""Paged decode attention as a Triton kernel: same contract as ``paged_decode_attention_ref``.

Importable without triton and without a GPU; the kernels are loaded on first use
(``paged_kv.kernels.triton_kernels``), which picks native GPU or interpreter mode (``paged_kv.kernels.triton_mode``).
The kernel reads K and V straight through the block table (no gathered copy), packs each KV head's
query-head group into one ``tl.dot``, accumulates in float32, and splits long sequences over several
programs (flash-decoding) when there are too few (sequence, KV head) pairs to fill the GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from paged_kv.kernels.attention import check_paged_inputs

MAX_HEAD_DIM = 256
MIN_DOT = 16  # tl.dot's K must be >= 16 (Triton 3.7, NVIDIA); older releases needed M, N >= 16 too
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class LaunchPlan:
    """How one call is launched: ``num_splits`` programs per (sequence, KV head), each over
    ``tokens_per_split`` tokens in tiles of ``tile`` tokens."""

    num_splits: int
    tokens_per_split: int
    tile: int
    num_warps: int
    num_stages: int


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def kernels():
    """The kernel module (imports triton on first call and decides native vs interpreter)."""
    from paged_kv.kernels import triton_kernels

    return triton_kernels


def check_supported(q: torch.Tensor, native: bool) -> None:
    """Raise a clear error for inputs this kernel does not handle (instead of a wrong answer)."""
    if q.dtype not in _DTYPES:
        raise TypeError(f"the Triton kernel handles float16, bfloat16 and float32, got {q.dtype}")
    if q.dtype == torch.bfloat16 and not native:
        raise TypeError("bfloat16 cannot be computed by Triton's interpreter on the CPU (its numpy backend stores "
                        "bf16 as raw bits: triton-lang/triton#4972, #11584). Use float16 or float32 here, or run "
                        "on a GPU with compute capability 8.0+ where bf16 is native.")
    head_dim = q.shape[-1]
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {head_dim} is larger than this kernel's limit of {MAX_HEAD_DIM} "
                         "(its accumulator lives in registers); use paged_decode_attention_ref")


def plan_launch(num_seqs: int, num_kv_heads: int, max_seq_len: int, *, native: bool, sm_count: int = 132,
                stages: int = 3,
                num_splits: Optional[int] = None, tile: Optional[int] = None) -> LaunchPlan:
    """Pick splits and tile size. On a GPU, split long sequences until about two programs per SM run."""
    tile = tile or (64 if native else 32)
    if tile < MIN_DOT or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= {MIN_DOT}, got {tile}")
    if num_splits is None:
        programs = num_seqs * num_kv_heads
        wanted = math.ceil(2 * sm_count / programs) if native else 1
        num_splits = max(1, min(wanted, math.ceil(max_seq_len / 512), 64))
    if not isinstance(num_splits, int) or isinstance(num_splits, bool) or num_splits < 1:
        raise ValueError(f"num_splits must be a positive int, got {num_splits!r}")
    tokens_per_split = math.ceil(math.ceil(max_seq_len / num_splits) / tile) * tile
    num_splits = math.ceil(max_seq_len / tokens_per_split)  # no split left without tokens in the longest sequence
    return LaunchPlan(num_splits, tokens_per_split, tile, num_warps=4, num_stages=stages if native else 1)


def launch(q, k_cache, v_cache, block_tables, seq_lens, out, scale: float, plan: LaunchPlan) -> torch.Tensor:
    """Launch on already checked inputs (``out`` like ``q``). No host synchronisation: the benchmark's hot path."""
    kern = kernels()
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    split = plan.num_splits > 1
    if split:
        part_out = torch.empty(num_seqs, num_q_heads, plan.num_splits, head_dim, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(num_seqs, num_q_heads, plan.num_splits, dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out  # unused when SPLIT is False
    grid = (num_seqs, num_kv_heads, plan.num_splits)
    kern.paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, out, part_out, part_lse,
        scale * kern.LOG2E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(),
        *block_tables.stride(), *out.stride(),
        plan.tokens_per_split, plan.num_splits,
        GROUP=group, GROUP_PAD=max(MIN_DOT, _next_pow2(group)), HEAD_DIM=head_dim,
        DIM_PAD=max(MIN_DOT, _next_pow2(head_dim)), BLOCK_SIZE=block_size, TILE=plan.tile, SPLIT=split,
        FP32_DOT=q.dtype == torch.float32, num_warps=plan.num_warps, num_stages=plan.num_stages)
    if split:
        kern.merge_splits_kernel[(num_seqs, num_q_heads)](
            part_out, part_lse, out, plan.num_splits, *out.stride(),
            HEAD_DIM=head_dim, DIM_PAD=max(MIN_DOT, _next_pow2(head_dim)),
            SPLITS_PAD=max(2, _next_pow2(plan.num_splits)), num_warps=4)
    return out


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: Optional[float] = None, *,
                           num_splits: Optional[int] = None, tile: Optional[int] = None) -> torch.Tensor:
    """Softmax attention of each sequence's one new query over its paged K/V: ``[num_seqs, num_q_heads, head_dim]``.

    Same shapes and semantics as ``paged_kv.kernels.attention.paged_decode_attention_ref`` (GQA, ragged
    ``seq_lens``, padding entries of ``block_tables`` never read, fp32 accumulation, output in
    ``q.dtype``). ``num_splits``/``tile`` override the launch plan (tests use them).
    """
    num_seqs, _, num_kv_heads, _, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float, got {scale!r}")
    kern = kernels()
    native = kern.MODE.native
    check_supported(q, native)
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    if native and q.device.type != "cuda":
        raise ValueError(f"Triton runs natively on the GPU here ({kern.MODE.reason}): move the tensors to 'cuda'")
    sm_count = torch.cuda.get_device_properties(q.device).multi_processor_count if native else 1
    plan = plan_launch(num_seqs, num_kv_heads, int(seq_lens.max()), native=native, sm_count=sm_count,
                       num_splits=num_splits, tile=tile)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return launch(q, k_cache, v_cache, block_tables, seq_lens, out, float(scale), plan)
