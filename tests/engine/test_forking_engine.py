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


# -- advance_beams and the replaceable pieces ----------------------------------------------------------
from paged_kv.cache.forking import ForkingBlockManager  # noqa: E402
from paged_kv.cache.invariants import check_block_manager  # noqa: E402
from paged_kv.cache.prefix_cache import Sequence  # noqa: E402
from paged_kv.cache.steps import prefill  # noqa: E402
from paged_kv.engine.forking import advance_beams  # noqa: E402
from paged_kv.lab.fork_lab import pool_shape  # noqa: E402


def _two_beams():
    manager = ForkingBlockManager(8, 2)
    root = Sequence([1, 2, 3], 2)
    prefill(manager, root)
    return manager, [root, manager.fork(root)]


@pytest.mark.parametrize(
    "choices, error",
    [([], ValueError), ([(2, 5)], ValueError), ([(0, -1)], ValueError), ([(0,)], ValueError), ([(0.5, 3)], TypeError)],
)
def test_advance_beams_refuses_bad_choices_and_changes_nothing(choices, error):
    manager, beams = _two_beams()
    before = pool_shape(manager, beams), [list(b.token_ids) for b in beams]
    with pytest.raises(error):
        advance_beams(manager, beams, choices)
    assert (pool_shape(manager, beams), [list(b.token_ids) for b in beams]) == before


def test_advance_beams_refuses_a_manager_without_fork_and_a_beam_listed_twice():
    manager, beams = _two_beams()
    with pytest.raises(TypeError, match="ForkingBlockManager"):
        advance_beams(object(), beams, [(0, 1)])
    with pytest.raises(ValueError, match="twice"):
        advance_beams(manager, [beams[0], beams[0]], [(0, 1)])


def test_advance_beams_forks_frees_and_appends_without_leaking():
    manager, beams = _two_beams()
    beams = advance_beams(manager, beams, [(1, 7), (1, 8), (1, 9)])  # beam 0 pruned, beam 1 chosen three times
    assert [b.token_ids[-1] for b in beams] == [7, 8, 9]
    check_block_manager(manager, beams)
    # two copies of one source (b1) into fresh blocks b2 and b3; the last writer, holding b1 alone, writes in place
    assert pool_shape(manager, beams)["copies"] == [("b1", "b2"), ("b1", "b3")]
    for beam in beams:
        manager.deallocate(beam)
    assert manager.num_free_blocks == 8


def test_the_copy_function_given_is_the_one_the_runner_calls(model):
    calls = []

    def recording_copy(k_caches, v_caches, copies):
        calls.append(list(copies))
        from paged_kv.engine.cache_ops import copy_blocks

        copy_blocks(k_caches, v_caches, copies)

    outputs, stats = parallel_sample(model, PROMPT, 3, 4, temperature=0.0, block_size=4, copy_blocks=recording_copy)
    assert sum(len(c) for c in calls) == stats.copies == 2
    skipped, _ = parallel_sample(
        model, PROMPT, 3, 6, temperature=0.0, block_size=4, copy_blocks=lambda k, v, copies: None
    )
    alone = generate_contiguous(model, PROMPT, SamplingParams(6, 0.0, 0))
    assert any(out != alone for out in skipped), "without the copies a branch should read a stale block"


def test_beam_search_reports_every_step_to_on_step_and_records_the_tree(model):
    seen = []
    _, stats = beam_search(
        model,
        PROMPT,
        3,
        5,
        block_size=4,
        on_step=lambda step, m, beams: seen.append((step, len(beams), m.num_free_blocks)),
    )
    assert [s for s, _, _ in seen] == list(range(5)) and all(n == 3 for _, n, _ in seen[1:])
    assert len(stats.choices) == 5 and all(len(step) == 3 for step in stats.choices[1:])
    with pytest.raises(TypeError):
        beam_search(model, PROMPT, 2, 2, manager_class=dict)
