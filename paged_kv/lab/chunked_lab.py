"""Lab 09's measurements and pictures: the same arrivals served with and without chunked prefill.

``serve_arrivals`` feeds requests to an ``LLMEngine`` at given steps; ``serve_repeatedly`` serves them several
times (the steps and tokens are the same every time; only the measured times differ, so they are read as
medians, with the spread between runs stated). ``latency_rows`` reads each request's time to first token and its
longest gap between two tokens, in engine steps (exact) and in milliseconds (measured). ``plot_token_budget``
draws each step's token budget (prompt tokens, decode tokens, unused) above the decode tokens on their own scale;
``plot_decode_gaps`` the gaps before one request's tokens, in steps and in the tokens the engine computed in
between (the work a gap's time follows), both exact.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from matplotlib.ticker import MaxNLocator

from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.sampling import SamplingParams
from paged_kv.lab.figure import CourseFigure, _color
from paged_kv.lab.i18n import _
from paged_kv.lab.message_layout import width


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


@dataclass(frozen=True)
class Served:
    """The same arrivals served ``len(engines)`` times. Every run makes the same steps and tokens (checked); the
    measured times differ from run to run (a shared machine), so times are read as medians over the runs."""

    engines: Tuple[LLMEngine, ...]

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError("Served needs at least one finished engine")
        first = self.engines[0]
        for engine in self.engines[1:]:
            if [token_steps(engine, i) for i in engine.requests] != [token_steps(first, i) for i in first.requests]:
                raise ValueError("the runs made different steps: the same arrivals must be served the same way")

    @property
    def engine(self) -> LLMEngine:
        return self.engines[0]


Run = Union[LLMEngine, Served]


def serve_repeatedly(model, arrivals: Sequence[Arrival], repeats: int = 5, **kwargs) -> Served:
    """``serve_arrivals`` ``repeats`` times (same keyword arguments): one ``Served``."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    return Served(tuple(serve_arrivals(model, arrivals, **kwargs) for _ in range(repeats)))


def _engines(run: Run) -> Tuple[LLMEngine, ...]:
    if isinstance(run, Served):
        return run.engines
    if isinstance(run, LLMEngine):
        return (run,)
    raise TypeError(f"expected an LLMEngine or a Served, got {type(run).__name__}")


def token_steps(engine: LLMEngine, request_id: int) -> List[int]:
    """The step index at which each output token of a request was made."""
    step_of = {r.end_time: r.index for r in engine.step_log}
    return [step_of[t] for t in engine.requests[request_id].token_times]


def work_gaps(engine: LLMEngine, request_id: int) -> List[int]:
    """Before each output token of a request after its first: the tokens the engine computed since the request's
    previous token (every sequence's, the step that made this token included). A step's time grows with them."""
    steps = token_steps(engine, request_id)
    computed = [r.computed_tokens for r in engine.step_log]
    return [sum(computed[a + 1 : b + 1]) for a, b in zip(steps, steps[1:])]


def latency_rows(run: Run) -> List[Dict[str, float]]:
    """Per request: prompt tokens, time to first token and longest gap between two of its tokens, in steps (counted
    from the step it arrived at) and in milliseconds (measured: the median over the runs of ``Served``)."""
    engines = _engines(run)
    engine = engines[0]
    rows = []
    arrival_steps = getattr(engine, "arrival_steps", {})
    for i, state in sorted(engine.requests.items()):
        steps = token_steps(engine, i)
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        itls = [e.requests[i].itl for e in engines]
        rows.append(
            {
                "request": i,
                "prompt_tokens": state.prompt_len,
                "ttft_steps": steps[0] - arrival_steps.get(i, 0) + 1,
                "ttft_ms": 1e3 * statistics.median(e.requests[i].ttft for e in engines),
                "max_gap_steps": max(gaps, default=0),
                "max_gap_ms": 1e3 * max((statistics.median(g) for g in zip(*itls)), default=0.0),
            }
        )
    return rows


def gap_spread_ms(run: Run) -> Tuple[float, float]:
    """How much one gap between two tokens moves from run to run: (median, largest) over every request's gaps of
    (slowest run - fastest run), in ms; (0, 0) for a single run."""
    engines = _engines(run)
    spreads = [
        max(g) - min(g) for i in engines[0].requests for g in zip(*(e.requests[i].itl for e in engines))
    ] if len(engines) > 1 else []  # fmt: skip
    return (1e3 * statistics.median(spreads), 1e3 * max(spreads)) if spreads else (0.0, 0.0)


def format_latency(runs: Mapping[str, Run]) -> str:
    """A plain-text table of ``latency_rows`` for each run, side by side per request, and under it how many runs
    each time is the median of and how much a gap moved between runs (in the notebook's language: a CJK character
    takes two columns)."""
    labels = [_(label) for label in runs]
    heads = _pad(_("TTFT steps"), 10) + " " + _pad("ms", 6) + " " + _pad(_("max gap steps"), 13) + " " + _pad("ms", 4)
    lines = [
        _pad(_("request"), 7)
        + " "
        + _pad(_("prompt"), 6)
        + " | "
        + " | ".join(_centre(_cut(l, 24), 36) for l in labels),
        " " * 7 + " " + _pad(_("tokens"), 6) + " | " + " | ".join(heads for _label in runs),
    ]
    tables = [latency_rows(run) for run in runs.values()]
    for k, row in enumerate(tables[0]):
        cells = [
            f"{t[k]['ttft_steps']:>10d} {t[k]['ttft_ms']:>6.1f} {t[k]['max_gap_steps']:>13d} {t[k]['max_gap_ms']:>4.1f}"
            for t in tables
        ]
        lines.append(f"{row['request']:>7} {row['prompt_tokens']:>6} | " + " | ".join(cells))
    for label, run in zip(labels, runs.values()):
        n = len(_engines(run))
        if n > 1:
            typical, worst = gap_spread_ms(run)
            lines.append(
                _(
                    f"{label}: ms are medians of {n} runs; between runs one gap moved by {typical:.1f} ms "
                    f"(median), {worst:.1f} ms at most"
                )
            )
        else:
            lines.append(_(f"{label}: ms measured once (steps are exact; ms move with the machine's load)"))
    return "\n".join(lines)


def _pad(text: str, columns: int) -> str:
    """``text`` right-aligned in ``columns`` columns of monospaced output (a CJK character takes two)."""
    return " " * max(columns - width(text), 0) + text


def _centre(text: str, columns: int) -> str:
    room = max(columns - width(text), 0)
    return " " * (room // 2) + text + " " * (room - room // 2)


def _cut(text: str, columns: int) -> str:
    """The start of ``text`` that fits ``columns`` columns."""
    while width(text) > columns:
        text = text[:-1]
    return text


def stalled_steps(engine: LLMEngine) -> List[int]:
    """The steps in which a request that already had a token got none (it waited a whole step: a stall)."""
    stalled = set()
    for i in engine.requests:
        steps = token_steps(engine, i)
        for a, b in zip(steps, steps[1:]):
            stalled.update(range(a + 1, b))
    return sorted(stalled)


def plot_token_budget(
    runs: Mapping[str, Run], max_steps: Optional[int] = None, title: Optional[str] = None
) -> CourseFigure:
    """Per run, two panels over the engine steps: the token budget as stacked bars (prompt tokens, decode tokens,
    budget left unused), and under it the decode tokens alone on their own scale, with each step in which a
    request that already had a token got none marked "stall"."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(12, 3.9 * len(runs) + 0.6))
    outer = fig.add_gridspec(len(runs), 1, hspace=0.45, bottom=0.6 / (3.9 * len(runs) + 0.6) + 0.06)
    for k, (label, run) in enumerate(runs.items()):
        engine, label = _engines(run)[0], _(label)
        log = engine.step_log[:max_steps] if max_steps else engine.step_log
        x = [r.index for r in log]
        decode = [r.decode_tokens for r in log]
        prompt = [r.computed_tokens - r.decode_tokens for r in log]
        unused = [max(r.token_budget - r.computed_tokens, 0) for r in log]
        budget = log[0].token_budget if log else 0
        top_grid, low_grid = outer[k].subgridspec(2, 1, height_ratios=[3, 1.2], hspace=0.08)
        ax = fig.add_subplot(top_grid)
        ax.bar(x, prompt, color=_color(1), label=_("prompt tokens (whole prompts or chunks)"))
        ax.bar(x, decode, bottom=prompt, color=_color(0), label=_("decode tokens (one per running request)"))
        ax.bar(
            x, unused, bottom=[d + p for d, p in zip(decode, prompt)], color="#dddddd", label=_("budget left unused")
        )
        ax.set(ylabel=_("tokens in the step"), title=_(f"{label}: each step's budget of {budget} tokens"))
        ax.set_ylim(0, max([budget] + [r.computed_tokens for r in log]) * 1.05)
        ax.tick_params(labelbottom=False)
        ax.grid(axis="y", alpha=0.3)
        low = fig.add_subplot(low_grid, sharex=ax)
        low.bar(x, decode, color=_color(0))
        for step in stalled_steps(engine):
            if step in x:
                low.annotate(_("stall"), (step, 0.15), ha="center", va="bottom", fontsize=8, color="#b00020")
        low.set(xlabel=_("engine step"), ylabel=_("decode\ntokens"))
        low.set_ylim(0, max(decode + [1]) + 1.5)
        low.yaxis.set_major_locator(MaxNLocator(integer=True))
        low.grid(axis="y", alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=3, frameon=False)
    if title:
        fig.suptitle(_(title))
    return fig


def plot_decode_gaps(runs: Mapping[str, Run], request_id: int = 0, title: Optional[str] = None) -> CourseFigure:
    """The gap before each of one request's tokens (after its first), per run: in engine steps, and in the tokens
    the engine computed since that request's previous token (the work the gap's time grows with). Both are exact:
    a run made again makes the same steps; its milliseconds, in ``format_latency``, move with the machine."""
    if not runs:
        raise ValueError("runs must hold at least one finished engine")
    fig = CourseFigure(figsize=(12, 3.6))
    ax_steps, ax_work = fig.subplots(1, 2)
    for i, (label, run) in enumerate(runs.items()):
        engine, label = _engines(run)[0], _(label)
        steps = token_steps(engine, request_id)
        tokens = list(range(2, len(steps) + 1))
        ax_steps.step(tokens, [b - a for a, b in zip(steps, steps[1:])], where="mid", color=_color(i), label=label)
        ax_work.plot(tokens, work_gaps(engine, request_id), marker=".", color=_color(i), label=label)
    ax_steps.set(
        xlabel=_(f"output token of request r{request_id}"),
        ylabel=_("steps since its previous token"),
        title=_("gap between tokens, in engine steps"),
    )
    ax_work.set(
        xlabel=_(f"output token of request r{request_id}"),
        ylabel=_("tokens computed since its previous token"),
        title=_("work in that gap: tokens the engine computed"),
    )
    ax_steps.set_ylim(0, None)
    ax_steps.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_work.set_ylim(0, None)
    for ax in (ax_steps, ax_work):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(_(title))
    fig.tight_layout()
    return fig
