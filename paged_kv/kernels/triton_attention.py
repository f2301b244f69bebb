"""Paged decode attention as a Triton kernel: same contract as ``paged_decode_attention_ref``.

Importable without triton and without a GPU; the kernels are loaded on first use
(``paged_kv.kernels.triton_kernels``), which picks native GPU or interpreter mode (``paged_kv.kernels.triton_mode``).
The kernel reads K and V straight through the block table (no gathered copy), packs each KV head's
query-head group into one ``tl.dot``, accumulates in float32, and splits long sequences over several
programs (flash-decoding) when there are too few (sequence, KV head) pairs to fill the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple, Union

import torch

from paged_kv.kernels.attention import check_paged_inputs
from paged_kv.kernels.launch_table import LaunchTable, load_table
from paged_kv.kernels.occupancy import (
    SM90,
    KernelResources,
    SmLimits,
    limits_of_device,
    one_wave_splits,
    programs_per_sm,
)

MAX_HEAD_DIM = 256
MIN_DOT = 16  # tl.dot's K must be >= 16 (Triton 3.5.0 to 3.7.1, NVIDIA); 3.4.0 and earlier needed M, N >= 16 too
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class LaunchPlan:
    """How one call is launched: ``num_splits`` programs per (sequence, KV head), each over
    ``tokens_per_split`` tokens in tiles of ``tile`` tokens. ``source`` says where the numbers came from
    (defaults, a launch-table entry, the occupancy rule); it takes no part in equality."""

    num_splits: int
    tokens_per_split: int
    tile: int
    num_warps: int
    num_stages: int
    source: str = field(default="defaults", compare=False)


DEFAULT_TILE, DEFAULT_WARPS, DEFAULT_STAGES = 64, 4, 3
INTERPRETER_TILE = 32
MIN_SPLIT_TOKENS = 512  # a split shorter than this costs more in the merge than it gains
MAX_SPLITS = 64
FALLBACK_PROGRAMS_PER_SM = 2  # used only while the compiled kernel's occupancy is unknown

ResourcesFor = Callable[[int, int, int], Optional[KernelResources]]


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
        raise TypeError(
            "bfloat16 cannot be computed by Triton's interpreter on the CPU (its numpy backend stores "
            "bf16 as raw bits: triton-lang/triton#4972, #11584). Use float16 or float32 here, or run "
            "on a GPU with compute capability 8.0+ where bf16 is native."
        )
    head_dim = q.shape[-1]
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim {head_dim} is larger than this kernel's limit of {MAX_HEAD_DIM} "
            "(its accumulator lives in registers); use paged_decode_attention_ref"
        )


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def plan_launch(
    num_seqs: int,
    num_kv_heads: int,
    max_seq_len: int,
    *,
    native: bool,
    sm_count: int = 132,
    stages: Optional[int] = None,
    num_splits: Optional[int] = None,
    tile: Optional[int] = None,
    num_warps: Optional[int] = None,
    block_size: Optional[int] = None,
    head_dim: Optional[int] = None,
    group: Optional[int] = None,
    gpu: Optional[str] = None,
    resources: Union[KernelResources, ResourcesFor, None] = None,
    limits: SmLimits = SM90,
    table: Optional[LaunchTable] = None,
) -> LaunchPlan:
    """Pick tile, warps, stages and splits for one call.

    Tile, warps and stages: the arguments when given, else the launch table's entry for this ``gpu`` name
    and (``block_size``, ``head_dim``, ``group``) when on a GPU, else the defaults (tile 64, 4 warps, 3
    stages; tile 32 and 1 stage in the interpreter). Splits: ``num_splits`` when given; 1 in the
    interpreter; on a GPU, with the compiled kernel's ``resources`` known (registers, shared memory: given,
    returned by ``resources(tile, num_warps, num_stages)``, or recorded in the table entry), the most splits
    whose programs all fit in one wave of ``sm_count x programs_per_sm(resources, limits)`` programs; while
    they are unknown, about two programs per SM. Either way a split covers at least ``MIN_SPLIT_TOKENS``
    tokens and there are at most ``MAX_SPLITS``.
    """
    _positive_int("num_seqs", num_seqs), _positive_int("num_kv_heads", num_kv_heads)
    _positive_int("max_seq_len", max_seq_len), _positive_int("sm_count", sm_count)
    tuned = None
    if native and None not in (gpu, block_size, head_dim, group):
        tuned = (table or load_table()).find(gpu, block_size, head_dim, group)
    source = f"launch table ({tuned.gpu}, Triton {tuned.triton}, {tuned.date})" if tuned else "defaults"
    tile = tile or (tuned.tile if tuned else (DEFAULT_TILE if native else INTERPRETER_TILE))
    if tile < MIN_DOT or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= {MIN_DOT}, got {tile}")
    num_warps = _positive_int("num_warps", num_warps or (tuned.num_warps if tuned else DEFAULT_WARPS))
    stages = _positive_int("stages", stages or (tuned.num_stages if tuned else DEFAULT_STAGES)) if native else 1
    if num_splits is None:
        num_splits, rule = _splits(
            num_seqs * num_kv_heads,
            max_seq_len,
            native,
            sm_count,
            limits,
            _resources_of(resources, tuned, tile, num_warps, stages),
        )
        source += f"; {rule}"
    _positive_int("num_splits", num_splits)
    tokens_per_split = math.ceil(math.ceil(max_seq_len / num_splits) / tile) * tile
    num_splits = math.ceil(max_seq_len / tokens_per_split)  # no split left without tokens in the longest sequence
    return LaunchPlan(num_splits, tokens_per_split, tile, num_warps=num_warps, num_stages=stages, source=source)


def _resources_of(resources, tuned, tile: int, num_warps: int, stages: int) -> Optional[KernelResources]:
    if callable(resources):
        resources = resources(tile, num_warps, stages)
    if (
        resources is None
        and tuned is not None
        and (tuned.tile, tuned.num_warps, tuned.num_stages) == (tile, num_warps, stages)
    ):
        resources = tuned.resources
    return resources


def _splits(
    pairs: int, max_seq_len: int, native: bool, sm_count: int, limits: SmLimits, resources: Optional[KernelResources]
) -> Tuple[int, str]:
    """(splits, the rule that chose them) for ``pairs`` (sequence, KV head) programs."""
    if not native:
        return 1, "interpreter: one split"
    most = max(1, min(MAX_SPLITS, math.ceil(max_seq_len / MIN_SPLIT_TOKENS)))
    if resources is not None:
        per_sm = programs_per_sm(resources, limits)
        if per_sm < 1:
            raise ValueError(f"the kernel does not fit on one SM of {limits.name}: {resources}")
        return (
            one_wave_splits(pairs, sm_count * per_sm, most),
            f"one wave of {sm_count} x {per_sm} programs ({resources.registers} registers, {resources.shared_bytes} B shared)",
        )
    wanted = math.ceil(FALLBACK_PROGRAMS_PER_SM * sm_count / pairs)
    return max(1, min(wanted, most)), f"occupancy unknown: about {FALLBACK_PROGRAMS_PER_SM} programs per SM"


# Resources of each compiled variant, learned at its first launch on a GPU:
# (dtype, block size, head dim, group pad, tile, warps, stages) -> KernelResources.
_OBSERVED: Dict[tuple, KernelResources] = {}


def _variant(q, k_cache, tile: int, num_warps: int, stages: int) -> tuple:
    group = q.shape[1] // k_cache.shape[2]
    return (q.dtype, k_cache.shape[1], q.shape[2], max(MIN_DOT, _next_pow2(group)), tile, num_warps, stages)


def observed_resources(q, k_cache) -> ResourcesFor:
    """``resources(tile, num_warps, stages)`` for :func:`plan_launch`: what launches of this kernel variant
    on this process's GPU reported (``None`` before the first one)."""
    return lambda tile, num_warps, stages: _OBSERVED.get(_variant(q, k_cache, tile, num_warps, stages))


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
    compiled = kern.paged_decode_kernel[grid](
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        out,
        part_out,
        part_lse,
        scale * kern.LOG2E,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        *block_tables.stride(),
        *out.stride(),
        plan.tokens_per_split,
        plan.num_splits,
        GROUP=group,
        GROUP_PAD=max(MIN_DOT, _next_pow2(group)),
        HEAD_DIM=head_dim,
        DIM_PAD=max(MIN_DOT, _next_pow2(head_dim)),
        BLOCK_SIZE=block_size,
        TILE=plan.tile,
        SPLIT=split,
        FP32_DOT=q.dtype == torch.float32,
        num_warps=plan.num_warps,
        num_stages=plan.num_stages,
    )
    resources = KernelResources.of_compiled(compiled)
    if resources is not None:
        _OBSERVED[_variant(q, k_cache, plan.tile, plan.num_warps, plan.num_stages)] = resources
    if split:
        kern.merge_splits_kernel[(num_seqs, num_q_heads)](
            part_out,
            part_lse,
            out,
            plan.num_splits,
            *out.stride(),
            HEAD_DIM=head_dim,
            DIM_PAD=max(MIN_DOT, _next_pow2(head_dim)),
            SPLITS_PAD=max(2, _next_pow2(plan.num_splits)),
            num_warps=4,
        )
    return out


def device_context(q: torch.Tensor, k_cache: torch.Tensor, native: bool) -> dict:
    """The keyword arguments of :func:`plan_launch` that describe the GPU and the kernel variant (empty in the
    interpreter): SM count, GPU name, SM limits, shape key, and the resources its launches reported."""
    if not native:
        return {}
    props = torch.cuda.get_device_properties(q.device)
    return dict(
        sm_count=props.multi_processor_count,
        gpu=props.name,
        limits=limits_of_device(props, (props.major, props.minor)),
        block_size=k_cache.shape[1],
        head_dim=q.shape[2],
        group=q.shape[1] // k_cache.shape[2],
        resources=observed_resources(q, k_cache),
    )


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: Optional[float] = None,
    *,
    num_splits: Optional[int] = None,
    tile: Optional[int] = None,
) -> torch.Tensor:
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
    plan = plan_launch(
        num_seqs,
        num_kv_heads,
        int(seq_lens.max()),
        native=native,
        num_splits=num_splits,
        tile=tile,
        **device_context(q, k_cache, native),
    )
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return launch(q, k_cache, v_cache, block_tables, seq_lens, out, float(scale), plan)
