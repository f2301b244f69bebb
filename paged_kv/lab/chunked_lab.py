"""Lab 09's measurements and pictures: the same arrivals served with and without chunked prefill.

``serve_arrivals`` feeds requests to an ``LLMEngine`` at given steps; ``latency_rows`` reads each request's time
to first token and its longest gap between two tokens, in engine steps and in measured milliseconds;
``plot_token_budget`` draws each step's token budget as stacked bars (decode tokens, prompt tokens, unused) and
``plot_decode_gaps`` the gaps between one running request's tokens while a long prompt arrives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Union

from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.sampling import SamplingParams
from paged_kv.lab.figure import CourseFigure, _color
from paged_kv.lab.i18n import _


@dataclass(frozen=True)
class Arrival:
    """A request arriving just before engine step ``step``: its prompt (text or ids) and how many tokens."""

    step: int
    prompt: Union[str, Sequence[int]]
    max_tokens: int


LONG_PROMPT = (
    'The "for" statement is used to iterate over the elements of a sequence (such as a string, tuple '
    'or list) or other iterable object:\n\n   for_stmt ::= "for" target_list "in" starred_expression_list '
    '":" suite\n'
)
#: Two requests decode; a long prompt arrives at step 6, a short one at step 10 (the decode stall, and a TTFT).
STALL_ARRIVALS = (
    Arrival(0, "Python", 40),
    Arrival(1, 'The "while" statement\n', 40),
    Arrival(6, LONG_PROMPT, 8),
    Arrival(10, "def ", 12),
)


def serve_arrivals(
    model,
    arrivals: Sequence[Arrival],
    *,
    scheduler=None,
    max_num_batched_tokens: Optional[int] = None,
    num_blocks: int = 64,
    block_size: int = 16,
    max_num_seqs: int = 16,
    clock=time.perf_counter,
) -> LLMEngine:
    """Serve ``arrivals`` (each added just before its step) to the end; return the finished engine.
    ``scheduler`` is the engine's (lab 07's ``Scheduler`` when None)."""
    kwargs = {} if scheduler is None else {"scheduler": scheduler}
    engine = LLMEngine(
        model,
        num_blocks,
        block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        clock=clock,
        **kwargs,
    )
    pending = sorted(arrivals, key=lambda a: a.step)
    engine.arrival_steps = {}  # request id -> index of the first engine step it could join
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0].step <= step:
            a = pending.pop(0)
            request_id = engine.add_request(
                a.prompt if isinstance(a.prompt, str) else list(a.prompt), SamplingParams(max_tokens=a.max_tokens)
            )
            engine.arrival_steps[request_id] = len(engine.step_log)
        if engine.has_unfinished():
            engine.step()
        step += 1
    return engine


def token_steps(engine: LLMEngine, request_id: int) -> List[int]:
    """The step index at which each output token of a request was made."""
    step_of = {r.end_time: r.index for r in engine.step_log}
    return [step_of[t] for t in engine.requests[request_id].token_times]


def latency_rows(engine: LLMEngine) -> List[Dict[str, float]]:
    """Per request: prompt tokens, time to first token and longest gap between two of its tokens, in steps (counted
    from the step it arrived at) and in milliseconds (measured)."""
    rows = []
    arrival_steps = getattr(engine, "arrival_steps", {})
    for i, state in sorted(engine.requests.items()):
        steps = token_steps(engine, i)
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        itl = state.itl
        rows.append(
            {
                "request": i,
                "prompt_tokens": state.prompt_len,
                "ttft_steps": steps[0] - arrival_steps.get(i, 0) + 1,
                "ttft_ms": 1e3 * state.ttft,
                "max_gap_steps": max(gaps, default=0),
                "max_gap_ms": 1e3 * max(itl, default=0.0),
            }
        )
    return rows


def format_latency(runs: Mapping[str, LLMEngine]) -> str:
    """A plain-text table of ``latency_rows`` for each run, side by side per request."""
    lines = [
        f"{'request':>7} {'prompt':>6} | " + " | ".join(f"{label[:24]:^36}" for label in runs),
        f"{'':>7} {'tokens':>6} | "
        + " | ".join(f"{'TTFT steps':>10} {'ms':>6} {'max gap steps':>13} {'ms':>4}" for _ in runs),
    ]
    tables = [latency_rows(e) for e in runs.values()]
    for k, row in enumerate(tables[0]):
        cells = [
            f"{t[k]['ttft_steps']:>10d} {t[k]['ttft_ms']:>6.1f} {t[k]['max_gap_steps']:>13d} {t[k]['max_gap_ms']:>4.1f}"
            for t in tables
        ]
        lines.append(f"{row['request']:>7} {row['prompt_tokens']:>6} | " + " | ".join(cells))
    return "\n".join(lines)


def plot_token_budget(
    runs: Mapping[str, LLMEngine], max_steps: Optional[int] = None, title: Optional[str] = None
) -> CourseFigure:
    """One panel per run: each step's token budget as stacked bars, decode tokens, prompt tokens (whole prompts or
    chunks) and what was left unused."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(12, 2.8 * len(runs)))
    axes = fig.subplots(len(runs), 1, squeeze=False)[:, 0]
    for ax, (label, engine) in zip(axes, runs.items()):
        label = _(label)
        log = engine.step_log[:max_steps] if max_steps else engine.step_log
        x = [r.index for r in log]
        decode = [r.decode_tokens for r in log]
        prompt = [r.computed_tokens - r.decode_tokens for r in log]
        unused = [max(r.token_budget - r.computed_tokens, 0) for r in log]
        ax.bar(x, decode, color=_color(0), label=_("decode tokens (one per running request)"))
        ax.bar(x, prompt, bottom=decode, color=_color(1), label=_("prompt tokens (whole prompts or chunks)"))
        ax.bar(
            x, unused, bottom=[d + p for d, p in zip(decode, prompt)], color="#dddddd", label=_("budget left unused")
        )
        budget = log[0].token_budget if log else 0
        ax.set(
            xlabel=_("engine step"), ylabel=_("tokens in the step"), title=_(f"{label}: token budget {budget} per step")
        )
        ax.set_ylim(0, max([budget] + [r.computed_tokens for r in log]) * 1.05)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=3, frameon=False)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout(rect=(0, 0.1 / len(runs), 1, 1))
    return fig


def plot_decode_gaps(runs: Mapping[str, LLMEngine], request_id: int = 0, title: Optional[str] = None) -> CourseFigure:
    """The gap before each of one request's tokens (after its first), in engine steps and in measured ms, per run."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(12, 3.6))
    ax_steps, ax_ms = fig.subplots(1, 2)
    for i, (label, engine) in enumerate(runs.items()):
        label = _(label)
        steps = token_steps(engine, request_id)
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        tokens = list(range(2, len(steps) + 1))
        ax_steps.step(tokens, gaps, where="mid", color=_color(i), label=label)
        ax_ms.plot(tokens, [1e3 * g for g in engine.requests[request_id].itl], marker=".", color=_color(i), label=label)
    ax_steps.set(
        xlabel=_(f"output token of request {request_id}"),
        ylabel=_("steps since its previous token"),
        title=_("gap between tokens, in engine steps"),
    )
    ax_ms.set(
        xlabel=_(f"output token of request {request_id}"),
        ylabel=_("ms since its previous token"),
        title=_("gap between tokens, measured (ms)"),
    )
    for ax in (ax_steps, ax_ms):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout()
    return fig
