"""Plots of engine runs for lab 07: KV blocks in use, requests running, and TTFT, over time."""
from __future__ import annotations

from typing import Mapping, Optional

from .viz import CourseFigure, _color


def plot_serving(runs: Mapping[str, object], num_blocks: int, title: Optional[str] = None) -> CourseFigure:
    """One line per run (``{label: finished LLMEngine}``): blocks in use and running requests against
    seconds since the run started, and the distribution of time to first token."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(13, 3.6))
    ax_blocks, ax_running, ax_ttft = fig.subplots(1, 3)
    for i, (label, engine) in enumerate(runs.items()):
        log = engine.step_log
        if not log:
            raise ValueError(f"run {label!r} has no steps")
        start = min(s.arrival_time for s in engine.requests.values())
        t = [r.end_time - start for r in log]
        ax_blocks.step(t, [r.blocks_in_use for r in log], where="post", color=_color(i), label=label)
        ax_running.step(t, [r.num_running for r in log], where="post", color=_color(i), label=label)
        ttft = sorted(1e3 * s.ttft for s in engine.requests.values())
        ax_ttft.step(ttft, [(k + 1) / len(ttft) for k in range(len(ttft))], where="post", color=_color(i), label=label)
    ax_blocks.axhline(num_blocks, color="black", linestyle=":", linewidth=1, label=f"pool ({num_blocks} blocks)")
    ax_blocks.set(xlabel="time since arrival (s)", ylabel="KV blocks in use", title="KV cache blocks in use")
    ax_running.set(xlabel="time since arrival (s)", ylabel="requests", title="requests running at once")
    ax_ttft.set(xlabel="time to first token (ms)", ylabel="fraction of requests", title="TTFT distribution (CDF)")
    for ax in (ax_blocks, ax_running, ax_ttft):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
