"""Lab 07's workload, its summary numbers and its plot."""
import functools

import pytest
import torch

from paged_kv.engine import LLMEngine
from paged_kv.model import load_tiny_model
from paged_kv.scheduler import MaxReservationScheduler
from paged_kv.serving_plots import plot_serving
from paged_kv.viz import CourseFigure
from paged_kv.workload import SYSTEM_PROMPTS, percentile, serving_summary, shared_prefix_workload


def test_workload_is_seeded_and_shares_system_prompts():
    a, b = shared_prefix_workload(20, seed=3), shared_prefix_workload(20, seed=3)
    assert a == b and a != shared_prefix_workload(20, seed=4)
    assert all(r.prompt.startswith(SYSTEM_PROMPTS[r.system_prompt]) for r in a)
    assert all(16 <= r.params.max_tokens <= 64 for r in a)
    assert all(len(p.encode()) >= 5 * 16 for p in SYSTEM_PROMPTS), "each system prompt spans 5 full blocks of 16"


@pytest.mark.parametrize("kwargs", [{"num_requests": 0}, {"min_tokens": 10, "max_tokens": 5}, {"system_prompts": []},
                                    {"seed": "x"}])
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
    for label, scheduler in (("paged", None), ("reserved", functools.partial(MaxReservationScheduler,
                                                                               max_model_len=256))):
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
