"""The tiny Llama: config checks, RoPE, input checks, and one model served three ways agreeing."""

import pytest
import torch

from paged_kv.engine.generate import generate_contiguous, generate_no_cache
from paged_kv.engine.kv_context import ContiguousKVCache, NoCache
from paged_kv.engine.model import ModelConfig, TinyLlama, apply_rope, init_weights, rope_cos_sin
from paged_kv.engine.sampling import SamplingParams, sample_next
from paged_kv.engine import tokenizer

SMALL = ModelConfig(
    hidden_size=32, num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=64, max_model_len=64
)


@pytest.fixture(scope="module")
def small_model():
    model = TinyLlama(SMALL)
    init_weights(model, seed=3)
    return model.eval()


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 0),
        ("num_layers", -1),
        ("head_dim", 7),
        ("num_kv_heads", 3),
        ("rope_theta", 0.0),
        ("max_model_len", True),
        ("vocab_size", 2.5),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError):
        ModelConfig(**{field: value})


def test_config_round_trips_and_rejects_unknown_fields():
    assert ModelConfig.from_dict(SMALL.to_dict()) == SMALL
    with pytest.raises(ValueError, match="unknown"):
        ModelConfig.from_dict(dict(SMALL.to_dict(), layers=3))


def test_rope_keeps_norms_and_depends_only_on_relative_position():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 16, generator=gen), torch.randn(1, 1, 16, generator=gen)

    def rotated(x, pos):
        cos, sin = rope_cos_sin(torch.tensor([pos]), 16, 10000.0)
        return apply_rope(x, cos, sin)

    torch.testing.assert_close(rotated(q, 37).norm(), q.norm())
    score = lambda i, j: float((rotated(q, i) * rotated(k, j)).sum())  # noqa: E731
    assert score(10, 3) == pytest.approx(score(50, 43), abs=1e-4)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-4)


@pytest.mark.parametrize(
    "ids, positions, error",
    [
        (torch.tensor([1, 2]), torch.tensor([0]), ValueError),
        (torch.tensor([1, 256]), torch.tensor([0, 1]), ValueError),
        (torch.tensor([1, 2]), torch.tensor([0, 64]), ValueError),
        (torch.tensor([1.0, 2.0]), torch.tensor([0, 1]), TypeError),
        (torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), ValueError),
    ],
)
def test_forward_rejects_bad_inputs(small_model, ids, positions, error):
    with pytest.raises(error):
        small_model(ids, positions, NoCache([max(1, len(ids))]))


def test_no_cache_over_ragged_sequences_equals_one_at_a_time(small_model):
    a, b = [5, 6, 7, 8, 9], [40, 41]
    ids = torch.tensor(a + b)
    positions = torch.tensor(list(range(len(a))) + list(range(len(b))))
    together = small_model(ids, positions, NoCache([len(a), len(b)]))
    alone_a = small_model(torch.tensor(a), torch.arange(len(a)), NoCache([len(a)]))
    alone_b = small_model(torch.tensor(b), torch.arange(len(b)), NoCache([len(b)]))
    torch.testing.assert_close(together, torch.cat([alone_a, alone_b]))


def test_contiguous_cache_step_matches_full_recompute(small_model):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    c = SMALL
    cache = ContiguousKVCache(c.num_layers, 16, c.num_kv_heads, c.head_dim)
    small_model(torch.tensor(prompt[:5]), torch.arange(5), cache)
    cache.advance(5)
    step = small_model(torch.tensor(prompt[5:]), torch.arange(5, 8), cache)
    full = small_model(torch.tensor(prompt), torch.arange(8), NoCache([8]))
    torch.testing.assert_close(step, full[5:], rtol=1e-5, atol=1e-5)


def test_contiguous_cache_refuses_to_overflow(small_model):
    cache = ContiguousKVCache(SMALL.num_layers, 4, SMALL.num_kv_heads, SMALL.head_dim)
    with pytest.raises(ValueError, match="holds 4 tokens"):
        small_model(torch.arange(5), torch.arange(5), cache)


def test_generation_oracles_agree_greedy_and_sampled(small_model):
    prompt = tokenizer.encode("def f(x):")
    for params in (SamplingParams(max_tokens=12), SamplingParams(max_tokens=12, temperature=0.8, seed=5)):
        assert generate_no_cache(small_model, prompt, params) == generate_contiguous(small_model, prompt, params)


def test_generation_rejects_requests_longer_than_the_model(small_model):
    with pytest.raises(ValueError, match="max_model_len"):
        generate_no_cache(small_model, [1] * 60, SamplingParams(max_tokens=6))


@pytest.mark.parametrize(
    "kwargs",
    [{"max_tokens": 0}, {"temperature": -1.0}, {"temperature": float("inf")}, {"seed": -3}, {"max_tokens": 2.0}],
)
def test_sampling_params_reject_bad_values(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_sampling_is_greedy_at_zero_and_seeded_otherwise():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.9])
    assert sample_next(logits, 0.0, None) == 1

    def draws(seed):
        return [
            sample_next(logits, 1.0, g)
            for g in [SamplingParams(temperature=1.0, seed=seed).generator()]
            for _ in range(20)
        ]

    assert draws(1) == draws(1)
    assert len(set(draws(1))) > 1


def test_byte_tokenizer_round_trips_and_checks_ids():
    text = 'The "if" statement — ü'
    assert tokenizer.decode(tokenizer.encode(text)) == text
    with pytest.raises(ValueError):
        tokenizer.decode([300])
    with pytest.raises(TypeError):
        tokenizer.encode(b"bytes")
