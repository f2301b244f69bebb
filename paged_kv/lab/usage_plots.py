"""Charts of KV memory and its use (matplotlib; no pyplot state): the KV cache a request needs against its
context (``plot_kv_memory``), waste against bookkeeping by block size (``plot_fragmentation``), where the KV memory
goes in the vLLM paper's systems (``plot_kv_usage``) and what prefix caching saves (``plot_prefix_workload``,
``plot_prefix_sweep``). The notebooks import them from ``paged_kv.lab.viz``.

Every function returns a ``CourseFigure``; every text a student reads in it is in the notebook's language.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence as SequenceType

from matplotlib.patches import Patch

from paged_kv.lab.figure import _HALO, CourseFigure, _color
from paged_kv.lab.i18n import _


def _same_shape_as(presets: List) -> Dict[str, str]:
    """``{name: earlier name}`` for presets whose KV shape repeats an earlier one (their lines coincide)."""
    seen: Dict[tuple, str] = {}
    twins: Dict[str, str] = {}
    for preset in presets:
        shape = (preset.num_layers, preset.num_kv_heads, preset.head_dim)
        if shape in seen:
            twins[preset.name] = seen[shape]
        else:
            seen[shape] = preset.name
    return twins


def _short_tokens(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"


def plot_kv_memory(
    ledger,
    presets: Iterable,
    *,
    dtype_bytes: int = 2,
    block_size: int = 16,
    context_len: Optional[int] = None,
    highlight: Optional[str] = None,
    gpu_budgets: Optional[Mapping[str, int]] = None,
) -> CourseFigure:
    """KV cache of one request (GiB) against its context length, one line per model preset.

    ``ledger`` is an ``estimate_kv_cache_bytes``-like function (the student's, in lab 01). Lengths are
    rounded up to whole blocks, as a paged allocator does. Each line is solid up to the model's
    ``max_context`` and ends there with a cross; past it a faint dotted line shows lengths the model
    cannot serve. Presets with the same KV shape draw the same line: the later one is dashed and its
    legend entry says so. The star marks ``context_len`` on the highlighted model (clipped to its
    context). ``gpu_budgets`` draws dashed horizontal lines.
    """
    presets = list(presets)
    twins = _same_shape_as(presets)
    lengths = [2**k for k in range(9, 18)]  # 512 .. 131072 tokens

    def gib(preset, n):
        blocks = -(-n // block_size)
        return (
            ledger(blocks, block_size, preset.num_layers, preset.num_kv_heads, preset.head_dim, dtype_bytes)[
                "total_cache_bytes"
            ]
            / 2**30
        )

    fig = CourseFigure(figsize=(8.6, 4.8))
    ax = fig.subplots()
    for i, preset in enumerate(presets):
        bold = highlight is None or preset.name == highlight
        inside = sorted({n for n in lengths if n < preset.max_context} | {preset.max_context})
        outside = [preset.max_context] + [n for n in lengths if n > preset.max_context]
        name, heads, context = preset.name, preset.num_kv_heads, _short_tokens(preset.max_context)
        label = _(f"{name} ({heads} KV heads, context {context})")
        if preset.name in twins:
            twin = twins[preset.name]
            label += _(f": same line as {twin}")
        style = dict(color=_color(i), linewidth=2.2 if bold else 1.0, alpha=1.0 if bold else 0.5, linestyle="-")
        if preset.name in twins:  # dashed, opaque and on top, so that it shows over the line it repeats
            style.update(linestyle=(0, (3, 3)), linewidth=max(style["linewidth"], 1.6), alpha=1.0, zorder=4)
        ax.plot(inside, [gib(preset, n) for n in inside], marker="o", markersize=3, label=label, **style)
        ax.plot(
            [preset.max_context],
            [gib(preset, preset.max_context)],
            marker="x",
            markersize=8,
            color=_color(i),
            alpha=style["alpha"],
            zorder=style.get("zorder", 2),
        )
        if len(outside) > 1:
            ax.plot(outside, [gib(preset, n) for n in outside], linestyle=":", linewidth=1.0, color="#aaaaaa", zorder=0)
        if context_len is not None and preset.name == (highlight or presets[0].name):
            n = min(context_len, preset.max_context)
            y = gib(preset, n)
            ax.plot([n], [y], marker="*", markersize=14, color=_color(i), zorder=5)
            ax.annotate(
                _(f"{y:.2f} GiB at {n:,} tokens"), (n, y), textcoords="offset points", xytext=(8, -12), fontsize=9
            )
    ax.plot([], [], linestyle=":", color="#aaaaaa", label=_("past the model's context (x): not servable"))
    for name, budget in (gpu_budgets or {}).items():
        ax.axhline(budget / 2**30, linestyle="--", color="#555555", linewidth=0.8)
        ax.text(lengths[0], budget / 2**30, f" {name}", va="bottom", fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_("context length of one request (tokens, log scale)"))
    ax.set_ylabel(_("KV cache of that request (GiB, log scale)"))
    ax.set_title(_(f"KV cache per request: {dtype_bytes}-byte elements, block size {block_size}"))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    return fig


def plot_fragmentation(result: Mapping[str, List[float]], title: Optional[str] = None) -> CourseFigure:
    """Waste against bookkeeping, from ``fragmentation_by_block_size``: tail waste (tokens) and
    utilisation (%) on the left, block-table entries and decode-time allocations on the right.
    """
    sizes = [str(s) for s in result["block_size"]]
    fig = CourseFigure(figsize=(12, 3.9))
    ax_waste, ax_util, ax_book = fig.subplots(1, 3)
    ax_waste.bar(sizes, result["tail_waste_tokens"], color=_color(1))
    ax_waste.set_xlabel(_("block size (tokens)"))
    ax_waste.set_ylabel(_("unused slots in last blocks (tokens)"))
    ax_waste.set_title(_("Waste: tail of each last block"))
    ax_util.plot(sizes, [100 * u for u in result["utilization"]], marker="o", color=_color(0))
    ax_util.set_ylim(0, 105)
    ax_util.set_xlabel(_("block size (tokens)"))
    ax_util.set_ylabel(_("utilisation (% of allocated slots used)"))
    ax_util.set_title(_("Utilisation of allocated KV memory"))
    ax_util.grid(True, alpha=0.3)
    ax_book.plot(sizes, result["table_entries"], marker="s", color=_color(2), label=_("block-table entries at the end"))
    ax_book.plot(sizes, result["allocations"], marker="^", color=_color(4), label=_("blocks taken during decode"))
    ax_book.set_yscale("log")
    ax_book.set_xlabel(_("block size (tokens)"))
    ax_book.set_ylabel(_("count (log scale)"))
    ax_book.set_title(_("Bookkeeping: table entries, allocations"))
    ax_book.grid(True, which="major", alpha=0.3)
    ax_book.legend(fontsize=8)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout()
    return fig


USAGE_COLORS = ("#55a868", "#ccb974", "#c44e52", "#8c8c8c")


def plot_kv_usage(
    runs: Mapping[str, Mapping], paper: Optional[Mapping[str, SequenceType[float]]] = None, title: Optional[str] = None
) -> CourseFigure:
    """KV memory by category in the style of the vLLM paper's Figure 2, next to the paper's own bars.

    ``runs`` maps a workload name to ``{system: KVUsage}`` (``paged_kv.lab.baselines.compare_systems``);
    ``paper`` maps a system to its published percentages (``baselines.PAPER_FIGURE2``). Left: one
    stacked bar per system and source, as % of the KV pool; right: requests running at once.
    """
    from paged_kv.lab.baselines import CATEGORIES

    workloads = list(runs)
    systems = list(next(iter(runs.values())))
    rows = []  # (label, shares in %, hatched)
    for system in systems:
        if paper and system in paper:
            rows.append((_(f"{system}: paper"), list(paper[system]), True))
        for workload in workloads:
            label = _(workload)
            rows.append((f"{system}: {label}", [100 * x for x in runs[workload][system].shares()], False))
    fig = CourseFigure(figsize=(12, 0.36 * len(rows) + 2.2))
    ax, ax_batch = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1.2]})
    for y, (label, shares, from_paper) in enumerate(rows):
        left = 0.0
        for k, share in enumerate(shares):
            ax.barh(
                -y,
                share,
                left=left,
                color=USAGE_COLORS[k],
                edgecolor="white",
                hatch="//" if from_paper else None,
                height=0.75,
            )
            if share >= 6:
                ax.text(
                    left + share / 2,
                    -y,
                    f"{share:.1f}",
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="#111111",
                    path_effects=_HALO,
                )
            left += share
        if from_paper and len(shares) == 1:
            ax.barh(-y, 100 - left, left=left, color="#ffffff", edgecolor="#bbbbbb", hatch="..", height=0.75)
    ax.set_yticks([-y for y in range(len(rows))], [r[0] for r in rows], fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel(_("share of the KV pool, averaged while requests wait (%)"))
    ax.set_title(_("Where the KV memory goes (hatched: the paper's Figure 2)"), fontsize=10)
    handles = [Patch(facecolor=c, label=_(n)) for c, n in zip(USAGE_COLORS, CATEGORIES)]
    handles.append(Patch(facecolor="#ffffff", edgecolor="#bbbbbb", hatch="..", label=_("not broken down in the paper")))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)
    width = 0.8 / max(len(workloads), 1)
    for w, workload in enumerate(workloads):
        values = [runs[workload][s].mean_running for s in systems]
        positions = [i + (w - (len(workloads) - 1) / 2) * width for i in range(len(systems))]
        ax_batch.bar(positions, values, width=width, color=_color(w), label=_(workload))
        for x, v in zip(positions, values):
            ax_batch.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7.5)
    ax_batch.set_xticks(range(len(systems)), [s.replace(" (", "\n(") for s in systems], fontsize=8)
    ax_batch.set_ylabel(_("requests running at once (mean)"))
    ax_batch.set_title(_("How many requests fit"), fontsize=10)
    ax_batch.legend(fontsize=8)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout()
    return fig


def plot_prefix_workload(
    cached_run: Mapping[str, List[int]], baseline_run: Mapping[str, List[int]], title: Optional[str] = None
) -> CourseFigure:
    """Three panels over arriving requests, from ``prefix_workload.replay`` with and without caching:
    cumulative hit rate, prefill tokens computed (cumulative), and blocks in use."""
    from itertools import accumulate

    n = list(range(1, len(cached_run["prompt_tokens"]) + 1))
    prompt = list(accumulate(cached_run["prompt_tokens"]))
    fig = CourseFigure(figsize=(12, 3.6))
    ax_hit, ax_tokens, ax_blocks = fig.subplots(1, 3)
    ax_hit.plot(n, [100 * c / p for c, p in zip(accumulate(cached_run["cached_tokens"]), prompt)], color=_color(0))
    ax_hit.set_ylim(0, 100)
    ax_hit.set_xlabel(_("requests arrived"))
    ax_hit.set_ylabel(_("prompt tokens served from cache (%)"))
    ax_hit.set_title(_("Hit rate so far"))
    for run, label, i in ((baseline_run, _("no prefix caching"), 3), (cached_run, _("prefix caching"), 0)):
        ax_tokens.plot(n, [t / 1000 for t in accumulate(run["computed_tokens"])], label=label, color=_color(i))
        ax_blocks.plot(n, run["blocks_in_use"], label=label, color=_color(i))
    ax_tokens.set_xlabel(_("requests arrived"))
    ax_tokens.set_ylabel(_("prefill tokens computed (thousands)"))
    ax_tokens.set_title(_("Prefill work, cumulative"))
    ax_blocks.set_xlabel(_("requests arrived"))
    ax_blocks.set_ylabel(_("blocks held by live requests"))
    ax_blocks.set_title(_("Memory in use"))
    for ax in (ax_hit, ax_tokens, ax_blocks):
        ax.grid(True, alpha=0.3)
    ax_tokens.legend(fontsize=8)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout()
    return fig


def plot_prefix_sweep(
    system_lens: List[int], fractions: Mapping[int, List[float]], title: Optional[str] = None
) -> CourseFigure:
    """Share of prompt tokens served from the cache against the shared prefix length, one line per block size."""
    fig = CourseFigure(figsize=(7, 4))
    ax = fig.subplots()
    for i, (block_size, values) in enumerate(sorted(fractions.items())):
        ax.plot(
            system_lens, [100 * v for v in values], marker="o", color=_color(i), label=_(f"block size {block_size}")
        )
    ax.set_xlabel(_("shared system prompt length (tokens)"))
    ax.set_ylabel(_("prompt tokens served from cache (%)"))
    ax.set_ylim(0, 100)
    ax.set_title(_(title) if title else _("What prefix caching can save"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
