"""Lab 09's pictures and measurements: the same arrivals served with and without chunking give the same
tokens; the chunked run never passes its budget and never stalls a running request; repeated runs make the same
steps and their times are medians with the spread stated; the figures draw with labelled axes."""

import pytest
import torch

from paged_kv.engine.chunked import ChunkedScheduler
from paged_kv.engine.model import load_tiny_model
from paged_kv.lab.chunked_lab import (
    STALL_ARRIVALS,
    Served,
    format_latency,
    latency_rows,
    plot_decode_gaps,
    plot_token_budget,
    serve_arrivals,
    serve_repeatedly,
    stalled_steps,
    token_steps,
    work_gaps,
)


@pytest.fixture(scope="module")
def runs():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = load_tiny_model()
    try:
        return {
            "unchunked": serve_repeatedly(model, STALL_ARRIVALS, repeats=2, max_num_batched_tokens=256),
            "chunked": serve_arrivals(model, STALL_ARRIVALS, scheduler=ChunkedScheduler, max_num_batched_tokens=32),
        }
    finally:
        torch.set_num_threads(threads)


def test_the_same_tokens_with_and_without_chunking(runs):
    engines = [runs["unchunked"].engine, runs["chunked"]]
    outputs = [[s.output_ids for _, s in sorted(e.requests.items())] for e in engines]
    assert outputs[0] == outputs[1]


def test_chunking_removes_the_decode_stall_and_delays_the_long_prompt(runs):
    unchunked, chunked = (latency_rows(e) for e in runs.values())
    assert unchunked[0]["max_gap_steps"] == 2 and chunked[0]["max_gap_steps"] == 1
    assert chunked[2]["ttft_steps"] > unchunked[2]["ttft_steps"] == 1  # the long prompt: 205 tokens / 32
    assert max(r.computed_tokens for r in runs["chunked"].step_log) <= 32
    assert token_steps(runs["chunked"], 0) == list(range(40))
    # the stalls: r1's and r2's and r3's prompts each take a whole step of lab 07's engine; chunked, none
    assert stalled_steps(runs["unchunked"].engine) == [1, 6, 10] and stalled_steps(runs["chunked"]) == []
    work = work_gaps(runs["unchunked"].engine, 0)
    assert max(work) == work[4] >= 205 and max(work_gaps(runs["chunked"], 0)) <= 32 + 32


def test_repeated_runs_are_the_same_steps_and_their_times_are_medians(runs):
    served = runs["unchunked"]
    assert len(served.engines) == 2
    rows = latency_rows(served)
    ttft = sorted(1e3 * e.requests[0].ttft for e in served.engines)
    assert rows[0]["ttft_ms"] == pytest.approx(sum(ttft) / 2)  # the median of two runs
    with pytest.raises(ValueError, match="different steps"):
        Served((served.engine, runs["chunked"]))
    with pytest.raises(ValueError, match="repeats"):
        serve_repeatedly(None, STALL_ARRIVALS, repeats=0)


def test_the_table_and_the_figures_draw(runs):
    text = format_latency(runs)
    lines = text.splitlines()
    assert "TTFT steps" in text and len(lines) == 2 + len(STALL_ARRIVALS) + 2
    assert "medians of 2 runs" in lines[-2] and "measured once" in lines[-1]
    budget = plot_token_budget(runs, max_steps=30, title="budget")
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in budget.axes]
    assert labels == [("", "tokens in the step"), ("engine step", "decode\ntokens")] * 2
    assert all(ax.get_title() for ax in budget.axes[::2])
    assert budget._repr_png_()[:4] == b"\x89PNG"
    gaps = plot_decode_gaps(runs)
    assert [ax.get_ylabel() for ax in gaps.axes] == [
        "steps since its previous token",
        "tokens computed since its previous token",
    ]
    assert gaps._repr_png_()[:4] == b"\x89PNG"
