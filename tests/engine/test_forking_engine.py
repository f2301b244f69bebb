"""Forked branches on shared blocks compute exactly what independent requests compute.

Parallel sampling's branches equal ``generate_contiguous`` with the branch's seed, token for token, and
beam search equals a beam search that recomputes every beam from scratch with no cache at all: so
the copy-on-write copies land before the writes and no branch ever reads a sibling's token.
"""
from __future__ import annotations

import pytest
import torch

from paged_kv.engine.forking import beam_search, parallel_sample
from paged_kv.engine.generate import generate_contiguous
from paged_kv.engine.kv_context import NoCache
from paged_kv.engine.model import load_tiny_model
from paged_kv.engine.sampling import SamplingParams

PROMPT = [5, 17, 3, 99, 42, 7, 61, 8, 23, 11]  # 10 tokens: the last block is partial at block sizes 4 and 16


@pytest.fixture(scope="module")
def model():
    return load_tiny_model()


@pytest.mark.parametrize("temperature, block_size", [(0.0, 4), (0.8, 1), (0.8, 16)])
def test_parallel_samples_equal_independent_requests(model, block_size, temperature):
    outputs, stats = parallel_sample(model, PROMPT, 3, 8, temperature=temperature, seed=7, block_size=block_size)
    for i, out in enumerate(outputs):
        assert out == generate_contiguous(model, PROMPT, SamplingParams(8, temperature, 7 + i)), f"branch {i}"
    assert all(s <= i for s, i in zip(stats.shared, stats.independent))
    full_prompt_blocks = len(PROMPT) // block_size  # shared for good; a partial one is copied on write
    assert (stats.saving > 0) == (full_prompt_blocks > 0)
    assert stats.copies == (2 if len(PROMPT) % block_size else 0)  # every branch but the last writer copies


@torch.inference_mode()
def _reference_beams(model, prompt, width, steps):
    """Beam search that runs every beam through the model from its first token (no KV cache)."""
    beams = [([], 0.0)]
    for _ in range(steps):
        candidates = []
        for b, (tokens, score) in enumerate(beams):
            ids = prompt + tokens
            hidden = model(torch.tensor(ids), torch.arange(len(ids)), NoCache([len(ids)]))
            logprobs = torch.log_softmax(model.logits(hidden[-1]).float(), dim=-1)
            top = torch.topk(logprobs, width)
            candidates += [(score + float(v), b, int(t)) for v, t in zip(top.values, top.indices)]
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        beams = [(beams[b][0] + [t], s) for s, b, t in candidates[:width]]
    return sorted(beams, key=lambda r: -r[1])


@pytest.mark.parametrize("block_size", [1, 4])
def test_beam_search_on_shared_blocks_equals_recomputing_every_beam(model, block_size):
    got, stats = beam_search(model, PROMPT, 3, 6, block_size=block_size)
    want = _reference_beams(model, PROMPT, 3, 6)
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-4)
    assert stats.saving > 0


def test_bad_requests_are_refused(model):
    with pytest.raises(ValueError, match="positive"):
        parallel_sample(model, PROMPT, 0, 4)
    with pytest.raises(ValueError, match="at least one token"):
        beam_search(model, [], 2, 4)
    with pytest.raises(ValueError, match="max_model_len"):
        beam_search(model, PROMPT, 2, 10**6)
