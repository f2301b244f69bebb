"""Plots of engine runs for lab 07: KV blocks in use, requests running, and TTFT, over time."""

from __future__ import annotations

from typing import Mapping, Optional

from paged_kv.lab.figure import CourseFigure, _color
from paged_kv.lab.i18n import _


def plot_serving(runs: Mapping[str, object], num_blocks: int, title: Optional[str] = None) -> CourseFigure:
    """One line per run (``{label: finished LLMEngine}``): blocks in use (and reserved, when a scheduler
    reserves more than it uses) and running requests against seconds since the run started, and the
    distribution of time to first token."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(13, 4.4))
    ax_blocks, ax_running, ax_ttft = fig.subplots(1, 3)
    for i, (label, engine) in enumerate(runs.items()):
        label = _(label)
        log = engine.step_log
        if not log:
            raise ValueError(f"run {label!r} has no steps")
        start = min(s.arrival_time for s in engine.requests.values())
        t = [r.end_time - start for r in log]
        ax_blocks.step(t, [r.blocks_in_use for r in log], where="post", color=_color(i), label=_(f"{label}: in use"))
        block_size = engine.block_size
        reserved = [r.kv_slots_reserved // block_size for r in log]
        if reserved != [r.blocks_in_use for r in log]:
            ax_blocks.step(t, reserved, where="post", color=_color(i), linestyle="--", label=_(f"{label}: reserved"))
        ax_running.step(t, [r.num_running for r in log], where="post", color=_color(i), label=label)
        ttft = sorted(1e3 * s.ttft for s in engine.requests.values())
        ax_ttft.step(ttft, [(k + 1) / len(ttft) for k in range(len(ttft))], where="post", color=_color(i), label=label)
    ax_blocks.axhline(num_blocks, color="black", linestyle=":", linewidth=1, label=_(f"pool ({num_blocks} blocks)"))
    ax_blocks.set(
        xlabel=_("time since arrival (s)"), ylabel=_("KV blocks"), title=_("KV cache blocks in use and reserved")
    )
    ax_running.set(xlabel=_("time since arrival (s)"), ylabel=_("requests"), title=_("requests running at once"))
    ax_ttft.set(
        xlabel=_("time to first token (ms)"), ylabel=_("fraction of requests"), title=_("TTFT distribution (CDF)")
    )
    for ax in (ax_blocks, ax_running, ax_ttft):
        ax.grid(alpha=0.3)
    # Legends sit below the axes, so they never cover a line: the runs' colours once for the figure, the
    # line styles of the blocks panel under it.
    from matplotlib.lines import Line2D

    styles = [Line2D([], [], color="grey", label=_("in use"))]
    if any(h.get_linestyle() == "--" for h in ax_blocks.get_lines()):
        styles.append(Line2D([], [], color="grey", linestyle="--", label=_("reserved")))
    styles.append(Line2D([], [], color="black", linestyle=":", linewidth=1, label=_(f"pool ({num_blocks} blocks)")))
    ax_blocks.legend(handles=styles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False)
    runs_legend = [Line2D([], [], color=_color(i), label=_(label)) for i, label in enumerate(runs)]
    fig.legend(handles=runs_legend, fontsize=9, loc="lower center", ncol=len(runs_legend), frameon=False)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
