"""Lab 09's pictures and measurements: the same arrivals served with and without chunking give the same
tokens; the chunked run never passes its budget and never stalls a running request; the figures draw."""

import pytest
import torch

from paged_kv.engine.chunked import ChunkedScheduler
from paged_kv.engine.model import load_tiny_model
from paged_kv.lab.chunked_lab import (
    STALL_ARRIVALS,
    format_latency,
    latency_rows,
    plot_decode_gaps,
    plot_token_budget,
    serve_arrivals,
    token_steps,
)


@pytest.fixture(scope="module")
def runs():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = load_tiny_model()
    try:
        return {
            "unchunked": serve_arrivals(model, STALL_ARRIVALS, max_num_batched_tokens=256),
            "chunked": serve_arrivals(model, STALL_ARRIVALS, scheduler=ChunkedScheduler, max_num_batched_tokens=32),
        }
    finally:
        torch.set_num_threads(threads)


def test_the_same_tokens_with_and_without_chunking(runs):
    outputs = [[s.output_ids for _, s in sorted(e.requests.items())] for e in runs.values()]
    assert outputs[0] == outputs[1]


def test_chunking_removes_the_decode_stall_and_delays_the_long_prompt(runs):
    unchunked, chunked = (latency_rows(e) for e in runs.values())
    assert unchunked[0]["max_gap_steps"] == 2 and chunked[0]["max_gap_steps"] == 1
    assert chunked[2]["ttft_steps"] > unchunked[2]["ttft_steps"] == 1  # the long prompt: 205 tokens / 32
    assert max(r.computed_tokens for r in runs["chunked"].step_log) <= 32
    assert token_steps(runs["chunked"], 0) == list(range(40))


def test_the_table_and_the_figures_draw(runs):
    text = format_latency(runs)
    assert "TTFT steps" in text and len(text.splitlines()) == 2 + len(STALL_ARRIVALS)
    budget = plot_token_budget(runs, max_steps=30, title="budget")
    assert [ax.get_ylabel() for ax in budget.axes] == ["tokens in the step"] * 2
    assert budget._repr_png_()[:4] == b"\x89PNG"
    gaps = plot_decode_gaps(runs)
    assert [ax.get_ylabel() for ax in gaps.axes] == ["steps since its previous token", "ms since its previous token"]
    assert gaps._repr_png_()[:4] == b"\x89PNG"
