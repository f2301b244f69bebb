"""Lab 06's optional GPU cell: your kernels against the package's and lab 04's copy, in GB/s.

:func:`gpu_section` times the student's step-4 kernel (and, when given, the step-5 kernel) beside the package's
Triton kernel and lab 04's copy path (``gather_kv`` then SDPA) on a Llama-3.1-8B layer at block sizes 16 and
256. Each method is checked against the torch reference before it is timed (a wrong one is reported, never
timed), then timed with ``triton.testing.do_bench`` (median; L2 flushed between calls). Effective bandwidth =
bytes a decode step must move (:meth:`Workload.bytes_moved`) / time. The libraries (FlexAttention,
FlashAttention, FlashInfer) are ``make bench-gpu``'s (``bench/paged_decode_bench.py``), which builds on the
workloads, launchers and checks here.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from paged_kv.kernels.attention import gather_kv, paged_decode_attention_ref
from paged_kv.lab.i18n import N_, _

# Peak HBM/GDDR bandwidth in GB/s (1e9 bytes/s), from NVIDIA's datasheets: T4 320 GB/s, L4 300 GB/s,
# A100 40GB 1,555 GB/s and 80GB SXM 2,039 GB/s, H100 SXM 3.35 TB/s, H100 PCIe "greater than 2,000 GB/s"
# (product brief PB-11133-001), H200 4.8 TB/s. Matched on torch.cuda.get_device_name(), first match wins;
# None: a variant whose figure was not checked (H100 NVL), reported as unknown rather than guessed. GH200
# comes before H200 (its name contains "H200"): it ships with 96 GB HBM3 (4 TB/s) or HBM3e, and the
# device name does not say which, so it is reported as unknown.
HBM_PEAK_GBPS: List[Tuple[str, Optional[float]]] = [
    ("GH200", None),
    ("H200", 4800.0),
    ("H100 NVL", None),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100-SXM4-40GB", 1555.0),
    ("A100-PCIE-40GB", 1555.0),
    ("L4", 300.0),
    ("T4", 320.0),
]
LLAMA_3_1_8B = (32, 8, 128)  # query heads, KV heads, head dim of one layer (HF config.json)
OURS, COPY = "triton (paged_kv)", N_("gather + SDPA (lab 04 copy)")  # a method's name is translated where shown
YOURS, YOURS_FAST = N_("your kernel"), N_("your fast kernel")
FAST_TARGET = 1.5  # the fast step's solution should be within 1.5x of the package kernel's time (issue #17)


def peak_bandwidth(device_name: str) -> Tuple[Optional[float], str]:
    """``(GB/s, source)`` for a GPU name, or ``(None, reason)`` when the table does not know it."""
    for pattern, gbps in HBM_PEAK_GBPS:
        if pattern.lower() in device_name.lower():
            return gbps, (f"datasheet peak for {pattern}" if gbps else f"no checked datasheet peak for {pattern}")
    return None, f"no datasheet peak known for {device_name!r}"


class Skip(Exception):
    """Raised by a method's factory when it cannot run on this workload; the message is the reason."""


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

    @property
    def scale(self) -> float:
        return self.q.shape[-1] ** -0.5

    def sliced(self, count: int) -> "Workload":
        """The first ``count`` sequences (same pool), for checking against the reference cheaply."""
        lens = self.seq_lens[:count]
        return Workload(
            self.q[:count], self.k_cache, self.v_cache, self.block_tables[:count], lens, self.label, int(lens.max())
        )

    def bytes_moved(self) -> int:
        """Bytes one decode step reads or writes: live K/V, q, out, table entries read, lengths."""
        _blocks, block_size, num_kv_heads, head_dim = self.k_cache.shape
        element = self.q.element_size()
        blocks = int(((self.seq_lens + block_size - 1) // block_size).sum())
        return (
            2 * int(self.seq_lens.sum()) * num_kv_heads * head_dim * element
            + 2 * self.q.numel() * element
            + blocks * self.block_tables.element_size()
            + self.seq_lens.numel() * self.seq_lens.element_size()
        )


def make_workload(
    num_seqs: int,
    context: int,
    *,
    heads: Tuple[int, int, int] = LLAMA_3_1_8B,
    block_size: int = 16,
    dtype: torch.dtype = torch.float16,
    device: str = "cuda",
    ragged: bool = False,
    min_pool_bytes: int = 0,
    seed: int = 0,
) -> Workload:
    """Random q/K/V and random-permutation block tables; the pool holds at least ``min_pool_bytes`` of K+V.

    ``ragged``: lengths spread uniformly between 1 and ``context`` (seeded), else all equal ``context``.
    """
    num_q_heads, num_kv_heads, head_dim = heads
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, context + 1, (num_seqs,), generator=gen) if ragged else torch.full((num_seqs,), context)
    lens[0] = context
    per_seq = (lens + block_size - 1) // block_size
    block_bytes = 2 * block_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
    num_blocks = max(int(per_seq.sum()), math.ceil(min_pool_bytes / block_bytes))
    perm = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    tables = torch.zeros(num_seqs, int(per_seq.max()), dtype=torch.int32)
    starts = torch.cumsum(per_seq, 0) - per_seq
    for s, (start, count) in enumerate(zip(starts.tolist(), per_seq.tolist())):
        tables[s, :count] = perm[start : start + count]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k = torch.empty(shape, dtype=dtype, device=device).normal_()
    v = torch.empty(shape, dtype=dtype, device=device).normal_()
    q = torch.randn(num_seqs, num_q_heads, head_dim, generator=gen).to(dtype=dtype, device=device)
    label = (
        f"B={num_seqs} ctx={'ragged<=' if ragged else ''}{context} {num_q_heads}/{num_kv_heads}/{head_dim} "
        f"bs={block_size} {str(dtype).replace('torch.', '')}"
    )
    return Workload(q, k, v, tables.to(device), lens.to(torch.int32).to(device), label, int(lens.max()))


def check_output(w: Workload, fn: Callable[[], torch.Tensor], sample: int = 4) -> Optional[str]:
    """Run ``fn`` once (its warm-up) and compare its first ``sample`` sequences with the reference; ``None`` if
    they match, else why not."""
    try:
        got = fn()
    except Exception as error:  # noqa: BLE001 - a method that cannot run is reported, not fatal
        said = _(str(error))
        return f"{type(error).__name__}: {said.splitlines()[0][:160] if said else ''}"
    small = w.sliced(min(sample, w.q.shape[0]))
    expected = paged_decode_attention_ref(
        small.q, small.k_cache, small.v_cache, small.block_tables, small.seq_lens, small.scale
    )
    tol = 2e-2 if w.q.dtype in (torch.float16, torch.bfloat16) else 1e-4
    if tuple(got.shape) != tuple(w.q.shape):
        return f"wrong shape {tuple(got.shape)}, expected {tuple(w.q.shape)}"
    error = (got[: small.q.shape[0]].float() - expected.float()).abs().max().item()
    return None if error <= tol else f"wrong result (max error {error:.3g})"


# ----------------------------------------------------------------------------- the methods


def package_kernel(w: Workload, *, tile=None, num_stages=None, num_warps=None, num_splits=None) -> Callable:
    """The package's Triton kernel with its launch plan fixed up front (no host sync per call). On a GPU one
    launch comes first, so that the plan knows the compiled kernel's registers and shared memory (the
    one-wave split rule); the plan is in the callable's ``details``."""
    from paged_kv.kernels.triton_attention import device_context, launch, plan_launch
    from paged_kv.kernels.triton_mode import configure

    native = configure().native
    context = device_context(w.q, w.k_cache, native)
    knobs = dict(num_splits=num_splits, tile=tile, stages=num_stages, num_warps=num_warps)
    out = torch.empty_like(w.q)

    def plan():
        return plan_launch(w.q.shape[0], w.k_cache.shape[2], w.max_seq_len, native=native, **knobs, **context)

    if native:  # learn this variant's resources (its first launch records them), then plan again
        launch(w.q, w.k_cache, w.v_cache, w.block_tables, w.seq_lens, out, w.scale, plan())
    chosen = plan()

    def run():
        return launch(w.q, w.k_cache, w.v_cache, w.block_tables, w.seq_lens, out, w.scale, chosen)

    run.details = dict(
        tile=chosen.tile,
        num_warps=chosen.num_warps,
        num_stages=chosen.num_stages,
        num_splits=chosen.num_splits,
        plan=chosen.source,
    )
    return run


def student_kernel(w: Workload, kernel, grid_fn: Optional[Callable] = None, *, tile: int = 0) -> Callable:
    """Lab 06's step-4 kernel (the lab's arguments, the student's grid) or, with ``tile``, its step-5 kernel
    (``TILE`` tokens per iteration, grid ``(num_seqs, num_kv_heads)``)."""
    from paged_kv.lab.kernel_lab import decode_args, fast_decode_args

    out = torch.empty_like(w.q)
    case = SimpleNamespace(
        q=w.q,
        k_cache=w.k_cache,
        v_cache=w.v_cache,
        block_tables=w.block_tables,
        seq_lens=w.seq_lens,
        scale=w.scale,
        group=w.q.shape[1] // w.k_cache.shape[2],
        block_size=w.k_cache.shape[1],
        head_dim=w.q.shape[2],
    )
    args = fast_decode_args(case, out, tile) if tile else decode_args(case, out)
    grid = tuple(grid_fn(w.q.shape[0], w.k_cache.shape[2])) if grid_fn else (w.q.shape[0], w.k_cache.shape[2])

    def run():
        kernel[grid](*args)
        return out

    return run


def copy_fits(w: Workload) -> bool:
    """Whether lab 04's copy path (K and V gathered, then repeated per query head) fits in free GPU memory."""
    if not w.q.is_cuda:
        return True
    group = w.q.shape[1] // w.k_cache.shape[2]
    kv_bytes = 2 * w.q.shape[0] * w.max_seq_len * w.k_cache.shape[2] * w.k_cache.shape[3] * w.q.element_size()
    return (1 + group) * kv_bytes < 0.5 * torch.cuda.mem_get_info()[0]


def gather_then_sdpa(w: Workload) -> Callable[[], torch.Tensor]:
    """Lab 04's way: copy each sequence's K and V into contiguous tensors, then PyTorch attention."""
    if not copy_fits(w):
        raise Skip(N_("the copies do not fit in memory"))
    group = w.q.shape[1] // w.k_cache.shape[2]
    positions = torch.arange(w.max_seq_len, device=w.q.device)
    mask = (positions[None, :] < w.seq_lens[:, None])[:, None, None, :]  # [S, 1, 1, L]

    def run():
        k = gather_kv(w.k_cache, w.block_tables, w.seq_lens).transpose(1, 2)  # [S, Hkv, L, D]
        v = gather_kv(w.v_cache, w.block_tables, w.seq_lens).transpose(1, 2)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(w.q[:, :, None, :], k, v, attn_mask=mask, scale=w.scale)[:, :, 0, :]

    return run


def do_bench_ms(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median milliseconds of one call, by ``triton.testing.do_bench`` (it flushes L2 before each call)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))


# ----------------------------------------------------------------------------- the notebook's cell


@dataclass
class Timed:
    block_size: int
    method: str
    ms: Optional[float]
    gbps: Optional[float]
    note: str = ""


@dataclass
class GpuSection:
    table: object  # IPython HTML
    figure: object  # CourseFigure
    rows: List[Timed]


def gpu_section(
    kernel,
    grid_fn: Callable,
    *,
    fast_kernel=None,
    num_seqs: int = 32,
    context: int = 4096,
    dtype: torch.dtype = torch.float16,
    device: str = "cuda",
    timer: Callable[[Callable[[], object]], float] = do_bench_ms,
) -> GpuSection:
    """Lab 06 on a GPU: your kernels (step 4; step 5 when given), the package's and lab 04's copy on a
    Llama-3.1-8B layer at block sizes 16 and 256, each checked against the reference, then timed by ``timer``
    (a function of a callable, returning milliseconds). A table, a bar plot and the ratio sentences."""
    from IPython.display import HTML

    on_gpu = torch.device(device).type == "cuda"
    name = torch.cuda.get_device_name(device) if on_gpu else "CPU"
    peak, source = peak_bandwidth(name) if on_gpu else (None, "no GPU")
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if on_gpu else 0
    methods: Dict[str, Callable[[Workload], Callable]] = {YOURS: lambda w: student_kernel(w, kernel, grid_fn)}
    if fast_kernel is not None:
        methods[YOURS_FAST] = lambda w: student_kernel(w, fast_kernel, tile=64)
    methods.update({OURS: package_kernel, COPY: gather_then_sdpa})
    rows: List[Timed] = []
    for block_size in (16, 256):
        w = make_workload(num_seqs, context, block_size=block_size, dtype=dtype, device=device, min_pool_bytes=8 * l2)
        for method, make in methods.items():
            try:
                fn = make(w)
            except Exception as error:  # noqa: BLE001 - reported in the table (Skip: its reason)
                why = str(error) if isinstance(error, Skip) else f"{type(error).__name__}: {_(str(error))[:160]}"
                rows.append(Timed(block_size, method, None, None, N_(f"not run: {why}")))
                continue
            problem = check_output(w, fn)
            if problem:
                rows.append(
                    Timed(block_size, method, None, None, N_(f"not timed: does not match the reference: {problem}"))
                )
                continue
            ms = float(timer(fn))
            rows.append(Timed(block_size, method, ms, w.bytes_moved() / (ms * 1e-3) / 1e9))
        del w
    gpu, shown_peak, where, kind = html.escape(name), peak or "?", html.escape(source), str(dtype)[6:]
    header = "<p>" + _(
        f"{gpu}: datasheet peak {shown_peak} GB/s ({where}). One decode step of a Llama-3.1-8B layer ({num_seqs} "
        f"sequences x {context} tokens, {kind}); effective bandwidth = bytes the step must move / median time."
    )
    table = HTML(header + "</p>" + _html_table(rows, peak) + "".join(f"<p>{n}</p>" for n in section_notes(rows)))
    return GpuSection(table, plot_section(rows, peak, _(f"Paged decode on {name}: effective bandwidth")), rows)


def _html_table(rows: List[Timed], peak: Optional[float]) -> str:
    names = (N_("block size"), N_("method"), "ms", "GB/s", N_("% of peak"), N_("note"))
    head = "".join(f"<th>{_(h)}</th>" for h in names)
    body = "".join(
        f"<tr><td>{r.block_size}</td><td>{html.escape(_(r.method))}</td>"
        f"<td>{'-' if r.ms is None else f'{r.ms:.3f}'}</td><td>{'-' if r.gbps is None else f'{r.gbps:.0f}'}</td>"
        f"<td>{f'{100 * r.gbps / peak:.0f}%' if r.gbps is not None and peak else '-'}</td>"
        f"<td>{html.escape(_(r.note))}</td></tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def section_notes(rows: List[Timed]) -> List[str]:
    """The copy path against the package kernel, and the fast kernel against it (``FAST_TARGET``), per block size."""
    ms = {(r.method, r.block_size): r.ms for r in rows if r.ms}
    notes = []
    for block in (16, 256):
        kern, copy, fast = ms.get((OURS, block)), ms.get((COPY, block)), ms.get((YOURS_FAST, block))
        if kern and copy:
            ratio = copy / kern
            notes.append(
                _(
                    f"Block size {block}: lab 04's copy path takes {ratio:.1f}x the time of the package "
                    "kernel: it reads the cache, writes a copy, and reads the copy again."
                )
            )
        if kern and fast:
            ratio = fast / kern
            if ratio <= FAST_TARGET:
                note = _(
                    f"Block size {block}: your fast kernel takes {ratio:.2f}x the package kernel's time (within the {FAST_TARGET}x target)."
                )
            else:
                note = _(
                    f"Block size {block}: your fast kernel takes {ratio:.2f}x the package kernel's time (not within the {FAST_TARGET}x target)."
                )
            notes.append(note)
    return notes


def plot_section(rows: List[Timed], peak: Optional[float], title: str):
    """Effective bandwidth of each timed method, grouped by block size; the datasheet peak dashed."""
    from paged_kv.lab.figure import CourseFigure, _color

    fig = CourseFigure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    blocks = sorted({r.block_size for r in rows})
    methods = list(dict.fromkeys(r.method for r in rows if r.gbps is not None))
    width = 0.8 / max(1, len(methods))
    for m, method in enumerate(methods):
        points = [(blocks.index(r.block_size), r.gbps) for r in rows if r.method == method and r.gbps is not None]
        xs = [i + (m - (len(methods) - 1) / 2) * width for i, _g in points]
        ax.bar(xs, [g for _i, g in points], width=width, color=_color(m), label=_(method), edgecolor="white")
    if peak:
        ax.axhline(peak, color="#222222", linestyle="--", linewidth=1, label=_(f"datasheet peak {peak:.0f} GB/s"))
    ax.set_xticks(range(len(blocks)), [_(f"block size {b}") for b in blocks])
    ax.set_xlabel(_("workload: one decode step, Llama-3.1-8B layer"))
    ax.set_ylabel(_("effective bandwidth (GB/s)"))
    ax.set_title(_(title))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
