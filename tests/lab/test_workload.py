"""Lab 07's workload, its summary numbers and its plot."""

import functools

import pytest
import torch

from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.model import load_tiny_model
from paged_kv.engine.scheduler import MaxReservationScheduler
from paged_kv.lab.serving_plots import plot_serving
from paged_kv.lab.viz import CourseFigure
from paged_kv.lab.workload import (
    SYSTEM_PROMPTS,
    format_summary_value,
    percentile,
    serving_summary,
    shared_prefix_workload,
    step_timeline,
)


def test_workload_is_seeded_and_shares_system_prompts():
    a, b = shared_prefix_workload(20, seed=3), shared_prefix_workload(20, seed=3)
    assert a == b and a != shared_prefix_workload(20, seed=4)
    assert all(r.prompt.startswith(SYSTEM_PROMPTS[r.system_prompt]) for r in a)
    assert all(16 <= r.params.max_tokens <= 64 for r in a)
    assert all(len(p.encode()) >= 5 * 16 for p in SYSTEM_PROMPTS), "each system prompt spans 5 full blocks of 16"


@pytest.mark.parametrize(
    "kwargs", [{"num_requests": 0}, {"min_tokens": 10, "max_tokens": 5}, {"system_prompts": []}, {"seed": "x"}]
)
def test_workload_rejects_bad_arguments(kwargs):
    with pytest.raises((ValueError, TypeError)):
        shared_prefix_workload(**kwargs)


def test_percentile_interpolates_between_ranks():
    assert percentile([3, 1, 2, 4], 50) == 2.5
    assert percentile([5], 90) == 5.0
    assert percentile(range(101), 90) == 90.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


@pytest.fixture(scope="module")
def runs():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = load_tiny_model()
    work = shared_prefix_workload(10, seed=1, min_tokens=4, max_tokens=12)
    out = {}
    for label, scheduler in (
        ("paged", None),
        ("reserved", functools.partial(MaxReservationScheduler, max_model_len=256)),
    ):
        engine = LLMEngine(model, 32, 16, **({"scheduler": scheduler} if scheduler else {}))
        for r in work:
            engine.add_request(r.prompt, r.params)
        engine.run()
        out[label] = engine
    torch.set_num_threads(threads)
    return out


def test_summary_counts_what_the_engine_did(runs):
    paged = serving_summary(runs["paged"], 2.0)
    assert paged["requests"] == 10 and paged["output tokens/s"] == paged["output tokens"] / 2.0
    assert 0 < paged["prefix hit rate"] < 1 and paged["max running"] > 32 // 16
    reserved = serving_summary(runs["reserved"], 2.0)
    assert reserved["prefix hit rate"] == 0 and reserved["max running"] == 2 and reserved["preemptions"] == 0
    assert reserved["output tokens"] == paged["output tokens"]
    assert reserved["engine steps"] > paged["engine steps"]
    assert 0 < reserved["KV slots holding tokens"] < paged["KV slots holding tokens"] <= 1


def test_summary_refuses_an_unfinished_run():
    engine = LLMEngine(load_tiny_model(), 8, 16)
    engine.add_request("x", shared_prefix_workload(1)[0].params)
    with pytest.raises(ValueError, match="every request"):
        serving_summary(engine, 1.0)


def test_plot_has_three_labelled_panels(runs):
    fig = plot_serving(runs, num_blocks=32, title="t")
    assert isinstance(fig, CourseFigure) and len(fig.axes) == 3
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert fig._repr_png_()[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        plot_serving({}, 32)


def test_plot_legends_sit_below_the_axes_and_name_every_run(runs):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plot_serving(runs, num_blocks=32)
    renderer = FigureCanvasAgg(fig).get_renderer()
    (runs_legend,) = fig.legends
    assert [t.get_text() for t in runs_legend.get_texts()] == list(runs)
    blocks = fig.axes[0]
    assert blocks.get_legend() is not None and all(ax.get_legend() is None for ax in fig.axes[1:])
    for legend in (runs_legend, blocks.get_legend()):
        box = legend.get_window_extent(renderer)
        assert all(box.y1 <= ax.get_window_extent(renderer).y0 for ax in fig.axes), "a legend overlaps a panel"


def test_summary_values_read_without_scientific_notation_and_shares_in_percent(runs):
    summary = serving_summary(runs["paged"], 2.0)
    shown = {name: format_summary_value(name, value) for name, value in summary.items()}
    assert not any("e+" in text or "e-" in text for text in shown.values()), shown
    assert shown["KV slots holding tokens"] == f"{100 * summary['KV slots holding tokens']:.1f}%"
    assert shown["prefix hit rate"].endswith("%") and shown["requests"] == "10"
    assert format_summary_value("TTFT p90 (ms)", 1640.2) == "1,640"
    assert format_summary_value("tokens computed", 4443) == "4,443"
    assert format_summary_value("TPOT p50 (ms)", 5.694) == "5.69"
    assert format_summary_value("TPOT p50 (ms)", float("nan")) == "n/a"
    with pytest.raises(TypeError):
        format_summary_value("requests", "10")


def test_step_timeline_wraps_into_short_numbered_lines_and_counts_the_kinds(runs):
    log = runs["paged"].step_log
    text = step_timeline(log, per_line=20)
    header, *rows = text.splitlines()
    kinds = "".join("P" if r.is_prefill else "d" for r in log)
    assert header.startswith(f"{len(log)} engine steps: {kinds.count('P')} prefill (P), {kinds.count('d')} decode (d)")
    assert len(rows) == -(-len(log) // 20) and all(len(row) <= 40 for row in rows)
    assert "".join("".join(row.split()[2:]) for row in rows) == kinds
    assert [int(row.split()[1]) for row in rows] == list(range(0, len(log), 20))
    assert max(len(line) for line in step_timeline(log).splitlines()) <= 80  # fits a notebook's output width
    with pytest.raises(ValueError):
        step_timeline(log, per_line=0)


def test_step_timeline_names_the_steps_that_preempted():
    from types import SimpleNamespace

    log = [SimpleNamespace(index=i, is_prefill=i in (0, 7), preempted=int(i in (5, 6))) for i in range(9)]
    assert step_timeline(log).splitlines() == [
        "9 engine steps: 2 prefill (P), 7 decode (d); preemptions in steps 5, 6",
        "  step 0  PddddddPd",
    ]
    assert step_timeline([]).splitlines() == ["0 engine steps: 0 prefill (P), 0 decode (d); no preemption"]


def test_inter_token_latency_shows_the_stall_that_tpot_averages_away():
    """Engine steps on a step clock (one tick per step): a preempted request's outputs have one long gap
    (its wait and recompute), which ITL max shows and its TPOT spreads over every token."""
    ticks = iter(range(10_000))
    engine = LLMEngine(
        load_tiny_model(), num_blocks=14, block_size=16, max_num_seqs=4, clock=lambda: float(next(ticks))
    )
    for request in shared_prefix_workload(6, seed=1, min_tokens=40, max_tokens=60):
        engine.add_request(request.prompt, request.params)
    engine.run()
    states = list(engine.requests.values())
    for state in states:
        assert len(state.itl) == len(state.output_ids) - 1
        assert sum(state.itl) == pytest.approx(state.finish_time - state.first_token_time)
    preempted = [s for s in states if s.num_preemptions]
    assert preempted, "the pool of 14 blocks should force a preemption"
    for state in preempted:
        assert max(state.itl) > 2 * state.tpot
    summary = serving_summary(engine, 1.0)
    assert summary["ITL max (ms)"] >= summary["ITL p99 (ms)"] >= summary["ITL p50 (ms)"] > 0
    assert summary["ITL max (ms)"] > summary["TPOT p90 (ms)"]
