"""``make bench-gpu``'s harness: paged decode attention on a GPU against every other way to do it.

Used by ``bench/bench_paged_attention.py`` (``make bench-gpu``), ``bench/tune_paged_attention.py``
(``make tune-gpu``) and, through them, ``bench/gpu_check.sh``. The workloads, the package's kernel, lab 04's
copy path and the check against the reference are the package's (``paged_kv.lab.gpu_section``, lab 06's GPU
cell); here are the libraries (FlexAttention, FlashAttention 2 and 3, FlashInfer), CUDA-graph timing over
rotated block tables, the attainable copy bandwidth, the rows, table and plots.

Effective bandwidth = bytes a decode step must read or write (K and V of every live token, q, the
output, the block-table entries and lengths it reads) / median time. Block tables are random
permutations of a pool larger than the L2 cache (no block read twice), ``triton.testing.do_bench``
flushes L2 between calls, and every competitor is checked against the reference before it is timed.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

from paged_kv.lab.gpu_section import (  # noqa: F401 - re-exported: the bench scripts and tests use them as db.*
    COPY,
    LLAMA_3_1_8B,
    OURS,
    Skip,
    Workload,
    check_output,
    do_bench_ms,
    gather_then_sdpa,
    make_workload,
    package_kernel,
    peak_bandwidth,
)


def flops(w: Workload) -> int:
    """Multiply-adds of QK^T and PV, counted as 2 FLOPs each."""
    return 4 * int(w.seq_lens.sum()) * w.q.shape[1] * w.q.shape[2]


# ----------------------------------------------------------------------------- competitors


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise Skip(reason)


def _require_module(name: str, label: Optional[str] = None):
    """The imported module, or :class:`Skip` saying it is not installed (or does not import)."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        missing = getattr(error, "name", None) in (name, name.split(".")[0])
        raise Skip(
            f"{label or name} not installed" if missing else f"{label or name} does not import: {error}"
        ) from None


def _require_gpu(w: Workload) -> None:
    _require(w.q.is_cuda, "needs a CUDA GPU")


def _require_half(w: Workload, who: str) -> None:
    _require(w.q.dtype in (torch.float16, torch.bfloat16), f"{who} takes fp16 or bf16 only, not {w.q.dtype}")


def _version(module) -> str:
    return str(getattr(module, "__version__", "?"))


_FLEX = {}


def _compiled_flex_attention():
    """One ``torch.compile(flex_attention, dynamic=False)`` for the process: each new shape compiles once,
    at the warm-up call that checks it against the reference, never inside a timed call. The recompile
    limit is raised so that the benchmark's shapes do not push it back to eager mode."""
    if "fn" not in _FLEX:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention

        torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"]


def compile_count() -> int:
    """Graphs torch.compile has built so far in this process (a timed call must not add any)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without dynamo
        return 0
    return int(counters["stats"]["unique_graphs"])


def flex_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """PyTorch FlexAttention reading the pool in place: the block mask lists each sequence's blocks.

    Compiled (on a GPU) once per shape with static shapes, before timing; eager on the CPU.
    """
    _require_module("torch.nn.attention.flex_attention", "FlexAttention (torch >= 2.5)")
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    num_blocks, block_size, num_kv_heads, head_dim = w.k_cache.shape
    num_seqs, num_q_heads, _ = w.q.shape
    k = w.k_cache.reshape(num_blocks * block_size, num_kv_heads, head_dim).permute(1, 0, 2)[None]
    v = w.v_cache.reshape(num_blocks * block_size, num_kv_heads, head_dim).permute(1, 0, 2)[None]
    blocks = ((w.seq_lens + block_size - 1) // block_size).to(torch.int32)
    full = torch.where(w.seq_lens % block_size == 0, blocks, blocks - 1).to(torch.int32)
    last = w.block_tables.gather(1, (blocks - 1).long()[:, None])[:, 0]
    partial_count = (blocks - full).to(torch.int32)
    # FlexAttention sizes its dense view of the mask by the index tensors' last dim: make it the pool size.
    partial_indices = torch.zeros(num_seqs, num_blocks, dtype=torch.int32, device=w.q.device)
    partial_indices[:, 0] = last
    full_indices = torch.zeros(num_seqs, num_blocks, dtype=torch.int32, device=w.q.device)
    full_indices[:, : w.block_tables.shape[1]] = w.block_tables

    # The mask alone must be exact (eager FlexAttention applies it to every key): logical index of each
    # physical block in each sequence, -1 where the block is not the sequence's.
    logical = torch.full((num_seqs, num_blocks), -1, dtype=torch.int32, device=w.q.device)
    columns = torch.arange(w.block_tables.shape[1], device=w.q.device, dtype=torch.int32)
    live = columns[None, :] < blocks[:, None]
    rows = torch.arange(num_seqs, device=w.q.device)[:, None].expand_as(w.block_tables)
    logical[rows[live], w.block_tables[live].long()] = columns.expand_as(w.block_tables)[live]
    lens = w.seq_lens

    def mask_mod(b, h, q_idx, kv_idx):
        index = logical[b, kv_idx // block_size]
        return (index >= 0) & (index * block_size + kv_idx % block_size < lens[b])

    mask = BlockMask.from_kv_blocks(
        partial_count[:, None, None],
        partial_indices[:, None, None, :],
        full[:, None, None],
        full_indices[:, None, None, :],
        BLOCK_SIZE=(1, block_size),
        mask_mod=mask_mod,
        seq_lengths=(1, num_blocks * block_size),
    )
    attend = _compiled_flex_attention() if w.q.is_cuda else flex_attention
    q = w.q[:, :, None, :]
    k_all, v_all = k.expand(num_seqs, -1, -1, -1), v.expand(num_seqs, -1, -1, -1)

    def run():
        out = attend(q, k_all, v_all, block_mask=mask, scale=w.scale, enable_gqa=num_q_heads != num_kv_heads)
        return out[:, :, 0, :]

    run.details = {"compiled": w.q.is_cuda, "torch": torch.__version__}
    return run


# FlashAttention-2 (flash-attn 2.5.0 to 2.8.3, csrc/flash_attn/flash_api.cpp, mha_fwd_kvcache): with a
# block_table the cache is [num_blocks, page_block_size, nheads_k, headdim] (our layout), q is
# [batch, seqlen_q, nheads, headdim], cache_seqlens and block_table are int32, and
# TORCH_CHECK(page_block_size % 256 == 0, "Paged KV cache block size must be divisible by 256").
FA2_PAGE_MULTIPLE = 256


def flash_attn_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """FlashAttention-2's ``flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=, block_table=)``."""
    module = _require_module("flash_attn")
    _require(
        w.k_cache.shape[1] % FA2_PAGE_MULTIPLE == 0,
        f"needs block size divisible by {FA2_PAGE_MULTIPLE} (flash-attn 2.x paged KV), got {w.k_cache.shape[1]}",
    )
    _require_gpu(w)
    _require_half(w, "flash-attn")
    q = w.q[:, None]

    def run():
        return module.flash_attn_with_kvcache(
            q, w.k_cache, w.v_cache, cache_seqlens=w.seq_lens, block_table=w.block_tables, softmax_scale=w.scale
        )[:, 0]

    run.details = {"version": _version(module)}
    return run


def flash_attn3_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """FlashAttention-3 (the ``hopper/`` build, module ``flash_attn_interface``): ``flash_attn_with_kvcache``
    with ``page_table`` (any page size, same cache layout); Hopper GPUs only."""
    module = _require_module("flash_attn_interface", "flash_attn_interface (FlashAttention-3)")
    _require_gpu(w)
    _require(torch.cuda.get_device_capability(w.q.device)[0] == 9, "FlashAttention-3 needs a Hopper GPU (sm_90)")
    _require_half(w, "FlashAttention-3")
    q = w.q[:, None]

    def run():
        out = module.flash_attn_with_kvcache(
            q, w.k_cache, w.v_cache, cache_seqlens=w.seq_lens, page_table=w.block_tables, softmax_scale=w.scale
        )
        return (out[0] if isinstance(out, tuple) else out)[:, 0]

    run.details = {
        "version": _version(importlib.import_module("flash_attn_3"))
        if importlib.util.find_spec("flash_attn_3")
        else "?"
    }
    return run


FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # the size FlashInfer's own decode example allocates


def flashinfer_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` (API of flashinfer 0.2.0 to 0.6.18, unchanged for these
    arguments in 0.7.4's source, which has not been run here): ``plan`` once
    with the CSR page lists (``indptr``, ``indices``, ``last_page_len``) before timing, then ``run(q, (k, v))``
    on the ``NHD`` layout ``[num_pages, page_size, num_kv_heads, head_dim]``, which is ours."""
    module = _require_module("flashinfer")
    _require_gpu(w)
    _require_half(w, "FlashInfer")
    num_seqs, num_q_heads, head_dim = w.q.shape
    block_size, num_kv_heads = w.k_cache.shape[1], w.k_cache.shape[2]
    blocks = (w.seq_lens + block_size - 1) // block_size
    indptr = torch.zeros(num_seqs + 1, dtype=torch.int32, device=w.q.device)
    indptr[1:] = torch.cumsum(blocks, 0)
    live = torch.arange(w.block_tables.shape[1], device=w.q.device)[None, :] < blocks[:, None]
    indices = w.block_tables[live].to(torch.int32)  # row-major: each sequence's pages in order
    last_page_len = (w.seq_lens - (blocks - 1) * block_size).to(torch.int32)
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=w.q.device)
    wrapper = module.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(
        indptr,
        indices,
        last_page_len,
        num_q_heads,
        num_kv_heads,
        head_dim,
        block_size,
        q_data_type=w.q.dtype,
        kv_data_type=w.k_cache.dtype,
        sm_scale=w.scale,
    )

    def run():
        return wrapper.run(w.q, (w.k_cache, w.v_cache))

    run.details = {"version": _version(module)}
    return run


COMPETITORS: Dict[str, Callable[[Workload], Callable[[], torch.Tensor]]] = {
    OURS: package_kernel,
    COPY: gather_then_sdpa,
    "FlexAttention paged": flex_paged,
    "flash_attn_with_kvcache (FA2)": flash_attn_paged,
    "flash_attn_interface (FA3)": flash_attn3_paged,
    "FlashInfer BatchDecode": flashinfer_paged,
}
PEERS = tuple(name for name in COMPETITORS if name != OURS)  # every other way, lab 04's copy included


# ----------------------------------------------------------------------------- measuring


def check_against_reference(
    w: Workload, make: Callable[[Workload], Callable[[], torch.Tensor]], sample: int = 4
) -> Optional[str]:
    """``None`` if the competitor built for ``w`` matches the reference on its first ``sample`` sequences."""
    try:
        fn = make(w)
    except Skip as why:
        return str(why)
    return check_output(w, fn, sample)


# Small shapes: below this many bytes a decode step lasts a few tens of microseconds even at 2-5 TB/s,
# and a kernel launch (several microseconds from Python) is a large part of it. Such shapes are timed
# as CUDA graphs (launch cost replayed away) over rotated block tables (so that the L2 cache, which
# do_bench_cudagraph does not flush, does not hold the data between calls), or marked launch-bound.
SMALL_BYTES = 64 * 2**20
MAX_ROTATIONS = 32
GRAPH, DO_BENCH, CPU_TIMER = "cuda graph", "do_bench", "cpu timer"


@dataclass(frozen=True)
class Timing:
    """How one workload is timed: ``mode`` (GRAPH, DO_BENCH or CPU_TIMER), whether the shape is small enough
    that launch overhead matters (``small``), and how many rotated copies of its tables to cycle through."""

    mode: str
    small: bool
    rotations: int = 1

    @property
    def launch_bound(self) -> bool:
        """Small and timed without a CUDA graph: its time includes launch overhead."""
        return self.small and self.mode != GRAPH

    @property
    def label(self) -> str:
        return "launch-bound" if self.launch_bound else self.mode


def choose_timing(
    bytes_moved: int,
    *,
    native: bool,
    graphs: bool = True,
    pool_blocks: int = 1,
    used_blocks: int = 1,
    l2_bytes: int = 0,
) -> Timing:
    """The timing of a workload moving ``bytes_moved`` bytes.

    Large (``>= SMALL_BYTES``): ``do_bench`` on a GPU (L2 flushed before each call). Small: a CUDA graph
    on a GPU (``graphs``) over enough rotations of the block tables that they touch at least twice the L2
    cache (at most ``MAX_ROTATIONS`` and the pool's ``pool_blocks // used_blocks``), else marked
    launch-bound. On the CPU a plain timer; small shapes are launch-bound there too.
    """
    if isinstance(bytes_moved, bool) or not isinstance(bytes_moved, int) or bytes_moved < 1:
        raise ValueError(f"bytes_moved must be a positive int, got {bytes_moved!r}")
    small = bytes_moved < SMALL_BYTES
    rotations = 1
    if small:
        wanted = math.ceil(2 * l2_bytes / bytes_moved) if l2_bytes else 2
        rotations = max(1, min(MAX_ROTATIONS, wanted, pool_blocks // max(1, used_blocks)))
    if not native:
        return Timing(CPU_TIMER, small, rotations)
    return Timing(GRAPH if small and graphs else DO_BENCH, small, rotations if small else 1)


def timing_for(w: Workload, *, native: bool, l2_bytes: int, graphs: bool = True) -> Timing:
    """:func:`choose_timing` for a workload (its pool and the blocks its tables use)."""
    block_size = w.k_cache.shape[1]
    used = int(((w.seq_lens + block_size - 1) // block_size).sum())
    return choose_timing(
        w.bytes_moved(),
        native=native,
        graphs=graphs,
        pool_blocks=w.k_cache.shape[0],
        used_blocks=used,
        l2_bytes=l2_bytes,
    )


def rotated(w: Workload, count: int) -> List[Workload]:
    """``w`` and ``count - 1`` copies whose tables point at other blocks of the same pool: copy ``i`` maps the
    blocks ``w`` reads one to one onto the ``i``-th group of blocks it does not read. Same shapes and
    lengths; no block is read by two copies."""
    block_size, pool = w.k_cache.shape[1], w.k_cache.shape[0]
    blocks = (w.seq_lens + block_size - 1) // block_size
    live = torch.arange(w.block_tables.shape[1], device=w.block_tables.device)[None, :] < blocks[:, None]
    used = w.block_tables[live].long()
    if count < 1 or count * used.numel() > pool:
        raise ValueError(f"{count} rotations of {used.numel()} blocks do not fit in a pool of {pool}")
    free = torch.ones(pool, dtype=torch.bool, device=used.device)
    free[used] = False
    others = free.nonzero()[:, 0]
    copies = [w]
    for i in range(1, count):
        mapping = torch.arange(pool, device=used.device)
        mapping[used] = others[(i - 1) * used.numel() : i * used.numel()]
        tables = mapping[w.block_tables.long()].to(w.block_tables.dtype)
        copies.append(Workload(w.q, w.k_cache, w.v_cache, tables, w.seq_lens, w.label, w.max_seq_len))
    return copies


def median_ms(fns: Sequence[Callable[[], object]], timing: Timing, *, rep_ms: int = 100) -> float:
    """Median time of one call, cycling through ``fns`` (one per rotation): a CUDA graph of the cycle
    (``triton.testing.do_bench_cudagraph``), ``do_bench`` of the first, or a plain timer on the CPU."""
    if callable(fns):
        fns = [fns]
    if timing.mode == GRAPH:
        from triton.testing import do_bench_cudagraph

        def cycle():
            for fn in fns:
                fn()

        return float(do_bench_cudagraph(cycle, rep=rep_ms, return_mode="median")) / len(fns)
    if timing.mode == DO_BENCH:
        return do_bench_ms(fns[0], rep_ms)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for fn in fns:
            fn()
        times.append((time.perf_counter() - start) * 1e3 / len(fns))
    return statistics.median(times)


@dataclass
class Row:
    workload: str
    method: str
    ms: Optional[float]
    gbps: Optional[float]
    fraction_of_peak: Optional[float]
    tflops: Optional[float]
    note: str = ""
    timing: str = ""
    fraction_of_attainable: Optional[float] = None
    details: Dict[str, object] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.ms is not None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def skipped(w: Workload, name: str, reason: str) -> Row:
    """The row of a competitor that did not run: no time, the reason in ``note`` (``skipped: ...``)."""
    return Row(w.label, name, None, None, None, None, f"skipped: {reason}")


def measure(
    w: Workload,
    methods: Dict[str, Callable[[Workload], Callable[[], torch.Tensor]]],
    *,
    native: bool,
    peak_gbps: Optional[float],
    rep_ms: int = 100,
    timing: Optional[Timing] = None,
    skip: Optional[Dict[str, str]] = None,
) -> List[Row]:
    """One row per method: built (or skipped with its reason), checked against the reference (a wrong one
    is skipped, never timed), then timed as ``timing`` says (default: :func:`timing_for` with no L2).
    ``skip`` maps method names to a reason not to run them here."""
    timing = timing or timing_for(w, native=native, l2_bytes=0)
    variants = rotated(w, timing.rotations)
    rows = []
    for name, make in methods.items():
        if skip and name in skip:
            rows.append(skipped(w, name, skip[name]))
            continue
        try:
            fns = [make(v) for v in variants]
        except Skip as why:
            rows.append(skipped(w, name, str(why)))
            continue
        except Exception as error:  # noqa: BLE001 - reported in the table, the benchmark goes on
            rows.append(skipped(w, name, f"could not be set up: {type(error).__name__}: {str(error)[:160]}"))
            continue
        problem = check_output(w, fns[0])
        if problem:
            rows.append(skipped(w, name, problem))
            continue
        rows.append(timed_row(w, name, fns, timing, peak_gbps, rep_ms))
    return rows


def timed_row(
    w: Workload, name: str, fns: Sequence[Callable], timing: Timing, peak_gbps: Optional[float], rep_ms: int
) -> Row:
    """Time ``fns`` as ``timing`` says; a CUDA graph that cannot be captured falls back to ``do_bench`` and the
    row says it is launch-bound. A compile inside the timed calls is noted."""
    compiles = compile_count()
    note = ""
    try:
        ms = median_ms(fns, timing, rep_ms=rep_ms)
    except Exception as error:  # noqa: BLE001 - e.g. a library that cannot be captured in a CUDA graph
        if timing.mode != GRAPH:
            raise
        timing = Timing(DO_BENCH, timing.small)
        note = f"no CUDA graph ({type(error).__name__}), timed with launches"
        ms = median_ms(fns[:1], timing, rep_ms=rep_ms)
    if compile_count() != compiles:
        note = (note + "; " if note else "") + "recompiled while timed"
    gbps = w.bytes_moved() / (ms * 1e-3) / 1e9
    return Row(
        w.label,
        name,
        ms,
        gbps,
        gbps / peak_gbps if peak_gbps else None,
        flops(w) / (ms * 1e-3) / 1e12,
        note,
        timing.label,
        details=dict(getattr(fns[0], "details", {}) or {}),
    )


ATTAINABLE = "device copy (attainable)"


def copy_rotations(nbytes: int, count: int, device: str) -> List[Callable[[], torch.Tensor]]:
    """``count`` device-to-device copies, each reading and writing ``nbytes // 2`` bytes (``nbytes`` moved),
    on buffers of their own."""
    half = max(1, nbytes // 2)
    pairs = [
        (
            torch.empty(half, dtype=torch.uint8, device=device).fill_(1),
            torch.empty(half, dtype=torch.uint8, device=device),
        )
        for _ in range(count)
    ]
    return [lambda src=src, dst=dst: dst.copy_(src) for src, dst in pairs]


def measure_attainable(
    w: Workload, timing: Timing, peak_gbps: Optional[float], *, device: str, rep_ms: int = 100
) -> Row:
    """The bandwidth a plain device copy reaches when it moves as many bytes as one decode step of ``w`` reads
    and writes, timed the same way (same graph or do_bench, same number of rotations)."""
    nbytes = w.bytes_moved()
    fns = copy_rotations(nbytes, timing.rotations, device)
    ms = median_ms(fns, timing, rep_ms=rep_ms)
    gbps = (2 * (nbytes // 2)) / (ms * 1e-3) / 1e9
    return Row(
        w.label,
        ATTAINABLE,
        ms,
        gbps,
        gbps / peak_gbps if peak_gbps else None,
        None,
        f"copy of {nbytes // 2:,} bytes (read + write = the step's bytes)",
        timing.label,
        fraction_of_attainable=1.0,
    )


def attach_attainable(rows: Sequence[Row], attainable: Row) -> None:
    """Set each timed row's ``fraction_of_attainable`` against the copy row of its workload."""
    for row in rows:
        if row.workload == attainable.workload and row.gbps is not None and row is not attainable:
            row.fraction_of_attainable = row.gbps / attainable.gbps if attainable.gbps else None


def _percent(value: Optional[float], width: int) -> str:
    return f"{100 * value:{width - 1}.1f}%" if value is not None else f"{'-':>{width}s}"


def format_table(rows: Sequence[Row]) -> str:
    """Fixed-width text table of rows: skipped ones keep their line, with the reason."""
    lines = [
        f"{'workload':44s} {'method':30s} {'ms':>9s} {'GB/s':>8s} {'% peak':>7s} {'% attain':>8s} {'timing':>12s}  note"
    ]
    for r in rows:
        ms = f"{r.ms:9.3f}" if r.ms is not None else f"{'-':>9s}"
        gbps = f"{r.gbps:8.0f}" if r.gbps is not None else f"{'-':>8s}"
        lines.append(
            f"{r.workload:44s} {r.method:30s} {ms} {gbps} {_percent(r.fraction_of_peak, 7)} "
            f"{_percent(r.fraction_of_attainable, 8)} {r.timing or '-':>12s}  {r.note}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- pictures


def plot_bandwidth(rows: Sequence[Row], peak_gbps: Optional[float], title: str):
    """Effective bandwidth of every timed (workload, method): the datasheet peak as a dashed line, each
    workload's attainable copy bandwidth as a black tick over its bars, launch-bound bars hatched, and the
    competitors that did not run listed under the axes with their reasons."""
    from paged_kv.lab.viz import CourseFigure, _color

    timed = [r for r in rows if r.gbps is not None and r.method != ATTAINABLE]
    workloads = list(dict.fromkeys(r.workload for r in rows))
    methods = list(dict.fromkeys(r.method for r in timed))
    fig = CourseFigure(figsize=(max(8.0, 0.9 * len(workloads) + 3), 5.4))
    ax = fig.subplots()
    width = 0.8 / max(1, len(methods))
    for m, method in enumerate(methods):
        label = method
        for i, workload in enumerate(workloads):
            match = [r for r in timed if r.workload == workload and r.method == method]
            if match:
                x = i + (m - (len(methods) - 1) / 2) * width
                ax.bar(
                    [x],
                    [match[0].gbps],
                    width=width,
                    color=_color(m),
                    label=label,
                    edgecolor="white",
                    hatch="//" if match[0].timing == "launch-bound" else None,
                )
                label = None
    copies = [(workloads.index(r.workload), r.gbps) for r in rows if r.method == ATTAINABLE and r.gbps]
    for n, (i, gbps) in enumerate(copies):
        ax.hlines(
            gbps,
            i - 0.45,
            i + 0.45,
            color="#111111",
            linewidth=2,
            label="attainable: device copy of the same bytes" if n == 0 else None,
        )
    if peak_gbps:
        ax.axhline(
            peak_gbps, color="#222222", linestyle="--", linewidth=1, label=f"datasheet peak {peak_gbps:.0f} GB/s"
        )
    if any(r.timing == "launch-bound" for r in timed):
        ax.bar([0], [0], color="#bbbbbb", hatch="//", edgecolor="white", label="launch-bound (no CUDA graph)")
    ax.set_xticks(range(len(workloads)), workloads, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    missing = not_run(rows)
    if missing:
        fig.text(
            0.01,
            0.005,
            "did not run: " + "; ".join(f"{m} ({why})" for m, why in missing.items()),
            fontsize=6,
            va="bottom",
            wrap=True,
        )
    fig.tight_layout(rect=(0, 0.04 if missing else 0, 1, 1))
    return fig


def not_run(rows: Sequence[Row]) -> Dict[str, str]:
    """Each method that ran on no workload, with its reasons (distinct, in order)."""
    ran = {r.method for r in rows if r.ran}
    reasons: Dict[str, List[str]] = {}
    for r in rows:
        if r.method not in ran:
            why = r.note.replace("skipped: ", "", 1)
            reasons.setdefault(r.method, [])
            if why not in reasons[r.method]:
                reasons[r.method].append(why)
    return {m: " / ".join(whys) for m, whys in reasons.items()}


def plot_roofline(
    rows: Sequence[Row],
    workloads: Dict[str, Workload],
    peak_gbps: Optional[float],
    peak_tflops: Optional[float],
    title: str,
):
    """Achieved TFLOP/s against arithmetic intensity (FLOP per byte moved), under the bandwidth roof."""
    from paged_kv.lab.viz import CourseFigure, _color

    fig = CourseFigure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    methods = list(dict.fromkeys(r.method for r in rows if r.tflops is not None))
    for m, method in enumerate(methods):
        pts = [
            (flops(workloads[r.workload]) / workloads[r.workload].bytes_moved(), r.tflops)
            for r in rows
            if r.method == method and r.tflops is not None and r.workload in workloads
        ]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=_color(m), label=method, zorder=3)
    intensities = [2**k for k in range(-2, 12)]
    if peak_gbps:
        roof = [peak_gbps * x / 1e3 for x in intensities]
        if peak_tflops:
            roof = [min(r, peak_tflops) for r in roof]
        ax.plot(intensities, roof, color="#222222", linewidth=1.2, label="roof: peak bandwidth x intensity")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte read or written)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
