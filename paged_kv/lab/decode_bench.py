"""Timing paged decode attention on a GPU: workloads, competitors, effective bandwidth, plots.

Used by ``bench/bench_paged_attention.py`` (``make bench-gpu``) and by lab 06's GPU section.
Effective bandwidth = bytes a decode step must read or write (K and V of every live token, q, the
output, the block-table entries and lengths it reads) / median time. Block tables are random
permutations of a pool larger than the L2 cache (no block read twice), ``triton.testing.do_bench``
flushes L2 between calls, and every competitor is checked against the reference before it is timed.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from paged_kv.kernels.attention import gather_kv, paged_decode_attention_ref

# Peak HBM/GDDR bandwidth in GB/s (1e9 bytes/s), from NVIDIA's datasheets: T4 320 GB/s, L4 300 GB/s,
# A100 40GB 1,555 GB/s and 80GB SXM 2,039 GB/s, H100 SXM 3.35 TB/s, H100 PCIe "greater than 2,000 GB/s"
# (product brief PB-11133-001), H200 4.8 TB/s. Matched on torch.cuda.get_device_name(), first match wins;
# None: a variant whose figure was not checked (H100 NVL), reported as unknown rather than guessed. GH200
# comes before H200 (its name contains "H200"): it ships with 96 GB HBM3 (4 TB/s) or HBM3e, and the
# device name does not say which, so it is reported as unknown.
HBM_PEAK_GBPS: List[Tuple[str, Optional[float]]] = [
    ("GH200", None), ("H200", 4800.0), ("H100 NVL", None), ("H100 PCIe", 2000.0), ("H100", 3350.0), ("A100-SXM4-80GB", 2039.0),
    ("A100-SXM4-40GB", 1555.0), ("A100-PCIE-40GB", 1555.0), ("L4", 300.0), ("T4", 320.0),
]
LLAMA_3_1_8B = (32, 8, 128)  # query heads, KV heads, head dim of one layer (HF config.json)


def peak_bandwidth(device_name: str) -> Tuple[Optional[float], str]:
    """``(GB/s, source)`` for a GPU name, or ``(None, reason)`` when the table does not know it."""
    for pattern, gbps in HBM_PEAK_GBPS:
        if pattern.lower() in device_name.lower():
            return gbps, (f"datasheet peak for {pattern}" if gbps else f"no checked datasheet peak for {pattern}")
    return None, f"no datasheet peak known for {device_name!r}"


@dataclass
class Workload:
    """One decode step's inputs: ``q [S, Hq, D]``, caches ``[num_blocks, block_size, Hkv, D]``, int32 tables."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    label: str
    max_seq_len: int = 0
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return self.q.shape[-1] ** -0.5

    def sliced(self, count: int) -> "Workload":
        """The first ``count`` sequences (same pool), for checking against the reference cheaply."""
        lens = self.seq_lens[:count]
        return Workload(self.q[:count], self.k_cache, self.v_cache, self.block_tables[:count], lens,
                        self.label, int(lens.max()))

    def bytes_moved(self) -> int:
        """Bytes one decode step reads or writes: live K/V, q, out, table entries read, lengths."""
        _, block_size, num_kv_heads, head_dim = self.k_cache.shape
        element = self.q.element_size()
        tokens = int(self.seq_lens.sum())
        blocks = int(((self.seq_lens + block_size - 1) // block_size).sum())
        return (2 * tokens * num_kv_heads * head_dim * element + 2 * self.q.numel() * element
                + blocks * self.block_tables.element_size() + self.seq_lens.numel() * self.seq_lens.element_size())

    def flops(self) -> int:
        """Multiply-adds of QK^T and PV, counted as 2 FLOPs each."""
        return 4 * int(self.seq_lens.sum()) * self.q.shape[1] * self.q.shape[2]


def make_workload(num_seqs: int, context: int, *, heads: Tuple[int, int, int] = LLAMA_3_1_8B, block_size: int = 16,
                  dtype: torch.dtype = torch.float16, device: str = "cuda", ragged: bool = False,
                  min_pool_bytes: int = 0, seed: int = 0) -> Workload:
    """Random q/K/V and random-permutation block tables; the pool holds at least ``min_pool_bytes`` of K+V.

    ``ragged``: lengths spread uniformly between 1 and ``context`` (seeded), else all equal ``context``.
    """
    num_q_heads, num_kv_heads, head_dim = heads
    gen = torch.Generator().manual_seed(seed)
    if ragged:
        lens = torch.randint(1, context + 1, (num_seqs,), generator=gen)
        lens[0] = context
    else:
        lens = torch.full((num_seqs,), context)
    per_seq = (lens + block_size - 1) // block_size
    block_bytes = 2 * block_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
    num_blocks = max(int(per_seq.sum()), math.ceil(min_pool_bytes / block_bytes))
    perm = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    tables = torch.zeros(num_seqs, int(per_seq.max()), dtype=torch.int32)
    start = 0
    for s, count in enumerate(per_seq.tolist()):
        tables[s, :count] = perm[start:start + count]
        start += count
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k = torch.empty(shape, dtype=dtype, device=device).normal_()
    v = torch.empty(shape, dtype=dtype, device=device).normal_()
    q = torch.randn(num_seqs, num_q_heads, head_dim, generator=gen).to(dtype=dtype, device=device)
    label = f"B={num_seqs} ctx={'ragged<=' if ragged else ''}{context} {num_q_heads}/{num_kv_heads}/{head_dim} " \
            f"bs={block_size} {str(dtype).replace('torch.', '')}"
    return Workload(q, k, v, tables.to(device), lens.to(torch.int32).to(device), label, int(lens.max()))


# ----------------------------------------------------------------------------- competitors

def package_kernel(w: Workload, *, tile: Optional[int] = None, num_stages: Optional[int] = None,
                   num_splits: Optional[int] = None) -> Callable[[], torch.Tensor]:
    """The package's Triton kernel with its launch plan fixed up front (no host sync per call)."""
    from paged_kv.kernels.triton_attention import launch, plan_launch
    from paged_kv.kernels.triton_mode import configure

    native = configure().native
    sms = torch.cuda.get_device_properties(w.q.device).multi_processor_count if native else 1
    plan = plan_launch(w.q.shape[0], w.k_cache.shape[2], w.max_seq_len, native=native, sm_count=sms,
                       num_splits=num_splits, tile=tile, **({"stages": num_stages} if num_stages else {}))
    out = torch.empty_like(w.q)
    return lambda: launch(w.q, w.k_cache, w.v_cache, w.block_tables, w.seq_lens, out, w.scale, plan)


def _as_case(w: Workload):
    class _Case:  # the fields the lab's argument lists read
        q, k_cache, v_cache, block_tables, seq_lens, scale = w.q, w.k_cache, w.v_cache, w.block_tables, w.seq_lens, \
            w.scale
        group = w.q.shape[1] // w.k_cache.shape[2]
        block_size, head_dim = w.k_cache.shape[1], w.q.shape[2]

    return _Case


def student_kernel(w: Workload, kernel, grid_fn: Callable) -> Callable[[], torch.Tensor]:
    """Lab 06's step-4 kernel launched with the lab's argument order and the student's grid."""
    from paged_kv.lab.kernel_lab import decode_args

    out = torch.empty_like(w.q)
    grid = tuple(grid_fn(w.q.shape[0], w.k_cache.shape[2]))
    args = decode_args(_as_case(w), out)

    def run():
        kernel[grid](*args)
        return out

    return run


def student_fast_kernel(w: Workload, kernel, tile: int = 64) -> Callable[[], torch.Tensor]:
    """Lab 06's step-5 kernel (``TILE`` tokens per iteration), grid ``(num_seqs, num_kv_heads)``."""
    from paged_kv.lab.kernel_lab import fast_decode_args

    out = torch.empty_like(w.q)
    grid = (w.q.shape[0], w.k_cache.shape[2])
    args = fast_decode_args(_as_case(w), out, tile)

    def run():
        kernel[grid](*args)
        return out

    return run


def gather_then_sdpa(w: Workload) -> Callable[[], torch.Tensor]:
    """Lab 04's way: copy each sequence's K and V into contiguous tensors, then PyTorch attention."""
    num_seqs, num_q_heads, head_dim = w.q.shape
    group = num_q_heads // w.k_cache.shape[2]
    positions = torch.arange(w.max_seq_len, device=w.q.device)
    mask = (positions[None, :] < w.seq_lens[:, None])[:, None, None, :]  # [S, 1, 1, L]

    def run():
        k = gather_kv(w.k_cache, w.block_tables, w.seq_lens).transpose(1, 2)   # [S, Hkv, L, D]
        v = gather_kv(w.v_cache, w.block_tables, w.seq_lens).transpose(1, 2)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(w.q[:, :, None, :], k, v, attn_mask=mask, scale=w.scale)
        return out[:, :, 0, :]

    return run


def flex_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """PyTorch FlexAttention reading the pool in place: the block mask lists each sequence's blocks."""
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
    full_indices[:, :w.block_tables.shape[1]] = w.block_tables

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

    mask = BlockMask.from_kv_blocks(partial_count[:, None, None], partial_indices[:, None, None, :],
                                    full[:, None, None], full_indices[:, None, None, :],
                                    BLOCK_SIZE=(1, block_size), mask_mod=mask_mod,
                                    seq_lengths=(1, num_blocks * block_size))
    compiled = torch.compile(flex_attention) if w.q.is_cuda else flex_attention
    q = w.q[:, :, None, :]

    def run():
        out = compiled(q, k.expand(num_seqs, -1, -1, -1), v.expand(num_seqs, -1, -1, -1), block_mask=mask,
                       scale=w.scale, enable_gqa=num_q_heads != num_kv_heads)
        return out[:, :, 0, :]

    return run


def flash_attn_paged(w: Workload) -> Callable[[], torch.Tensor]:
    """FlashAttention's ``flash_attn_with_kvcache`` with ``block_table`` (same cache layout as ours)."""
    from flash_attn import flash_attn_with_kvcache

    q = w.q[:, None]

    def run():
        return flash_attn_with_kvcache(q, w.k_cache, w.v_cache, cache_seqlens=w.seq_lens, block_table=w.block_tables,
                                       softmax_scale=w.scale)[:, 0]

    return run


COMPETITORS: Dict[str, Callable[[Workload], Callable[[], torch.Tensor]]] = {
    "triton (paged_kv)": package_kernel,
    "gather + SDPA (lab 04 copy)": gather_then_sdpa,
    "FlexAttention paged": flex_paged,
    "flash_attn_with_kvcache": flash_attn_paged,
}


# ----------------------------------------------------------------------------- measuring

def check_against_reference(w: Workload, make: Callable[[Workload], Callable[[], torch.Tensor]],
                            sample: int = 4) -> Optional[str]:
    """``None`` if the competitor matches the reference on the first ``sample`` sequences, else why not."""
    small = w.sliced(min(sample, w.q.shape[0]))
    try:
        got = make(small)()
    except Exception as error:  # noqa: BLE001 - a competitor that cannot run is reported, not fatal
        return f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
    expected = paged_decode_attention_ref(small.q, small.k_cache, small.v_cache, small.block_tables, small.seq_lens,
                                          small.scale)
    tol = 2e-2 if w.q.dtype in (torch.float16, torch.bfloat16) else 1e-4
    error = (got.float() - expected.float()).abs().max().item()
    return None if error <= tol else f"wrong result (max error {error:.3g})"


def median_ms(fn: Callable[[], object], *, native: bool, rep_ms: int = 100) -> float:
    """Median time of one call: ``triton.testing.do_bench`` (L2 flushed before each call) on a GPU;
    a plain timer on the CPU, where only the plumbing is exercised."""
    if native:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def copy_fits(w: Workload) -> bool:
    """Whether lab 04's copy path (K and V gathered, then repeated per query head) fits in free GPU memory."""
    if not w.q.is_cuda:
        return True
    group = w.q.shape[1] // w.k_cache.shape[2]
    kv_bytes = 2 * w.q.shape[0] * w.max_seq_len * w.k_cache.shape[2] * w.k_cache.shape[3] * w.q.element_size()
    return (1 + group) * kv_bytes < 0.5 * torch.cuda.mem_get_info()[0]


def measure(w: Workload, methods: Dict[str, Callable[[Workload], Callable[[], torch.Tensor]]], *, native: bool,
            peak_gbps: Optional[float], rep_ms: int = 100) -> List[Row]:
    """Check every method, then time the ones that are right; one row each."""
    rows = []
    for name, make in methods.items():
        if make is gather_then_sdpa and not copy_fits(w):
            rows.append(Row(w.label, name, None, None, None, None, "skipped: the copies do not fit in memory"))
            continue
        problem = check_against_reference(w, make)
        if problem:
            rows.append(Row(w.label, name, None, None, None, None, f"skipped: {problem}"))
            continue
        ms = median_ms(make(w), native=native, rep_ms=rep_ms)
        gbps = w.bytes_moved() / (ms * 1e-3) / 1e9
        rows.append(Row(w.label, name, ms, gbps, gbps / peak_gbps if peak_gbps else None,
                        w.flops() / (ms * 1e-3) / 1e12))
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """Fixed-width text table of rows."""
    lines = [f"{'workload':44s} {'method':30s} {'ms':>9s} {'GB/s':>8s} {'% peak':>7s}  note"]
    for r in rows:
        ms = f"{r.ms:9.3f}" if r.ms is not None else f"{'-':>9s}"
        gbps = f"{r.gbps:8.0f}" if r.gbps is not None else f"{'-':>8s}"
        frac = f"{100 * r.fraction_of_peak:6.1f}%" if r.fraction_of_peak is not None else f"{'-':>7s}"
        lines.append(f"{r.workload:44s} {r.method:30s} {ms} {gbps} {frac}  {r.note}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- pictures

def plot_bandwidth(rows: Sequence[Row], peak_gbps: Optional[float], title: str):
    """Effective bandwidth of every timed (workload, method), with the device's peak as a line."""
    from paged_kv.lab.viz import CourseFigure, _color

    timed = [r for r in rows if r.gbps is not None]
    workloads = list(dict.fromkeys(r.workload for r in timed))
    methods = list(dict.fromkeys(r.method for r in timed))
    fig = CourseFigure(figsize=(max(8.0, 0.9 * len(workloads) + 3), 4.8))
    ax = fig.subplots()
    width = 0.8 / max(1, len(methods))
    for m, method in enumerate(methods):
        xs, ys = [], []
        for i, workload in enumerate(workloads):
            match = [r.gbps for r in timed if r.workload == workload and r.method == method]
            if match:
                xs.append(i + (m - (len(methods) - 1) / 2) * width)
                ys.append(match[0])
        ax.bar(xs, ys, width=width, color=_color(m), label=method)
    if peak_gbps:
        ax.axhline(peak_gbps, color="#222222", linestyle="--", linewidth=1)
        ax.text(len(workloads) - 0.5, peak_gbps, f" peak {peak_gbps:.0f} GB/s", va="bottom", ha="right", fontsize=8)
    ax.set_xticks(range(len(workloads)), workloads, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_roofline(rows: Sequence[Row], workloads: Dict[str, Workload], peak_gbps: Optional[float],
                  peak_tflops: Optional[float], title: str):
    """Achieved TFLOP/s against arithmetic intensity (FLOP per byte moved), under the bandwidth roof."""
    from paged_kv.lab.viz import CourseFigure, _color

    fig = CourseFigure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    methods = list(dict.fromkeys(r.method for r in rows if r.tflops is not None))
    for m, method in enumerate(methods):
        pts = [(workloads[r.workload].flops() / workloads[r.workload].bytes_moved(), r.tflops)
               for r in rows if r.method == method and r.tflops is not None and r.workload in workloads]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=_color(m), label=method, zorder=3)
    intensities = [2 ** k for k in range(-2, 12)]
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


# ----------------------------------------------------------------------------- the notebook's GPU section

@dataclass
class NotebookSection:
    table: object
    figures: tuple
    rows: List[Row]


def notebook_section(kernel, grid_fn: Callable, *, fast_kernel=None, num_seqs: int = 32, context: int = 4096,
                     dtype: torch.dtype = torch.float16) -> NotebookSection:
    """Lab 06 on a GPU: the student's kernels (step 4 and, when given, step 5), the package's, lab 04's copy
    and the libraries on a Llama-3.1-8B layer; block size 16 and 256; the copy's traffic measured."""
    from IPython.display import HTML

    name = torch.cuda.get_device_name()
    peak, source = peak_bandwidth(name)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    methods = dict(COMPETITORS)
    mine = {"your kernel": lambda w: student_kernel(w, kernel, grid_fn)}
    if fast_kernel is not None:
        mine["your fast kernel"] = lambda w: student_fast_kernel(w, fast_kernel)
    methods = {**mine, **methods}
    rows, workloads = [], {}
    for block_size in (16, 256):
        w = make_workload(num_seqs, context, block_size=block_size, dtype=dtype, min_pool_bytes=8 * l2)
        workloads[w.label] = w
        chosen = methods if block_size == 16 else {k: methods[k] for k in (*mine, "triton (paged_kv)")}
        rows += measure(w, chosen, native=True, peak_gbps=peak)
    copy = [r for r in rows if r.method.startswith("gather") and r.ms]
    kern = [r for r in rows if r.method == "triton (paged_kv)" and r.ms and "bs=16" in r.workload]
    note = ""
    if copy and kern:
        note = (f"<p>Lab 04's copy path takes {copy[0].ms / kern[0].ms:.1f}x the time of the paged kernel on the "
                f"same step: it reads the cache, writes a copy, and reads the copy again.</p>")
    header = f"<p>{name}: peak {peak or '?'} GB/s ({source}).</p>"
    table = HTML(header + "<pre>" + format_table(rows) + "</pre>" + note)
    figures = (plot_bandwidth(rows, peak, f"Paged decode on {name}: effective bandwidth"),
               plot_roofline(rows, workloads, peak, None, f"Roofline on {name}: decode sits on the bandwidth slope"))
    return NotebookSection(table, figures, rows)
