"""Paging is transparent: the engine's tokens equal a contiguous cache's and a full recompute's,
with batching, prefix hits and forced preemptions; prefix hits really skip compute; requests that
can never fit are refused up front; timings and bookkeeping are right."""

import functools
import itertools

import pytest
import torch

from paged_kv.engine import tokenizer
from paged_kv.kernels.attention import paged_decode_attention_ref
from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.generate import generate_contiguous, generate_no_cache
from paged_kv.engine.model import load_tiny_model
from paged_kv.engine.sampling import SamplingParams
from paged_kv.engine.scheduler import MaxReservationScheduler, Scheduler, SchedulerBase

HEADER_A = 'The "while" statement\n*********************\n\n'  # 45 bytes: 2 full blocks of 16, 11 of 4
HEADER_B = 'Function definitions\n********************\n\n'
PROMPTS = [
    HEADER_A + "The ",
    HEADER_A + "The while",
    HEADER_B + "A function",
    HEADER_A + "It ",
    HEADER_B + "def",
    "Python",
    HEADER_B + "A function",
    'The "for" statement\n',
]
MAX_TOKENS = 24


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The model is tiny: one thread is fastest, and avoids oversubscribing a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_tiny_model()


@pytest.fixture(scope="module")
def greedy_no_cache(model):
    return [generate_no_cache(model, tokenizer.encode(p), SamplingParams(max_tokens=MAX_TOKENS)) for p in PROMPTS]


def serve(model, num_blocks, block_size, prompts=PROMPTS, params=SamplingParams(max_tokens=MAX_TOKENS), **kwargs):
    engine = LLMEngine(model, num_blocks, block_size, **kwargs)
    outputs = engine.generate(prompts, params)
    return engine, [o.output_ids for o in outputs]


def test_oracles_agree_contiguous_cache_equals_full_recompute(model, greedy_no_cache):
    contiguous = [
        generate_contiguous(model, tokenizer.encode(p), SamplingParams(max_tokens=MAX_TOKENS)) for p in PROMPTS
    ]
    assert contiguous == greedy_no_cache


@pytest.mark.parametrize(
    "num_blocks, block_size, max_num_seqs",
    [
        (64, 16, 16),  # everything at once, prefix hits on the shared headers
        (64, 16, 3),  # at most 3 per step: continuous batching as requests finish
        (300, 1, 8),  # block size 1: every token its own block
        (40, 5, 8),  # an odd block size, moderate pressure
    ],
)
def test_paged_engine_matches_full_recompute_token_for_token(
    model, greedy_no_cache, num_blocks, block_size, max_num_seqs
):
    engine, outputs = serve(model, num_blocks, block_size, max_num_seqs=max_num_seqs)
    assert outputs == greedy_no_cache
    assert engine.block_manager.num_free_blocks == num_blocks  # every block came back


def test_paged_engine_matches_under_forced_preemptions(model, greedy_no_cache):
    longest = max(len(tokenizer.encode(p)) for p in PROMPTS) + MAX_TOKENS - 1
    engine, outputs = serve(model, num_blocks=-(-longest // 4) + 2, block_size=4, max_num_seqs=8)
    preemptions = sum(r.preempted for r in engine.step_log)
    assert preemptions >= 3, f"the tiny pool should force preemptions, saw {preemptions}"
    assert sum(state.num_preemptions for state in engine.requests.values()) == preemptions
    assert outputs == greedy_no_cache


def test_seeded_sampling_is_the_same_whatever_the_batch_and_the_cache(model):
    params = [SamplingParams(max_tokens=16, temperature=0.9, seed=i) for i in range(len(PROMPTS))]
    expected = [generate_no_cache(model, tokenizer.encode(p), sp) for p, sp in zip(PROMPTS, params)]
    for num_blocks, block_size in ((64, 16), (18, 4)):
        engine = LLMEngine(model, num_blocks, block_size, max_num_seqs=4)
        assert [o.output_ids for o in engine.generate(PROMPTS, params)] == expected
    assert expected[0] != generate_no_cache(
        model, tokenizer.encode(PROMPTS[0]), SamplingParams(max_tokens=16, temperature=0.9, seed=99)
    )


def test_prefix_hits_skip_the_computation_of_cached_tokens(model):
    engine = LLMEngine(model, num_blocks=32, block_size=16)
    first = tokenizer.encode(HEADER_A + "The ")  # 49 tokens: blocks 0-2 full
    engine.generate([first], SamplingParams(max_tokens=4))
    before = engine.runner.num_computed_tokens
    second = tokenizer.encode(HEADER_A + "Then")  # same first 3 blocks, new last token
    state = engine.generate([second], SamplingParams(max_tokens=4))[0]
    prefill = engine.step_log[-4]
    assert prefill.is_prefill and prefill.cached_tokens == 48 and prefill.computed_tokens == len(second) - 48
    assert state.prompt_tokens_from_cache == 48
    assert engine.runner.num_computed_tokens - before == (len(second) - 48) + 3  # + three decode tokens
    alone = generate_no_cache(model, second, SamplingParams(max_tokens=4))
    assert state.output_ids == alone


def test_a_fully_cached_prompt_still_computes_its_last_block(model):
    prompt = tokenizer.encode(HEADER_A[:32])  # exactly 2 blocks
    engine = LLMEngine(model, num_blocks=16, block_size=16)
    engine.generate([prompt], SamplingParams(max_tokens=2))
    engine.generate([prompt], SamplingParams(max_tokens=2))
    second_prefill = [r for r in engine.step_log if r.is_prefill][-1]
    assert (second_prefill.cached_tokens, second_prefill.computed_tokens) == (16, 16)


def test_identical_prompts_in_one_step_do_not_share_uncomputed_blocks(model):
    """Hashes are registered after the step: a twin admitted in the same step finds nothing to reuse."""
    prompt = tokenizer.encode(HEADER_B)
    engine = LLMEngine(model, num_blocks=32, block_size=16)
    engine.generate([prompt, prompt], SamplingParams(max_tokens=3))
    first_step = engine.step_log[0]
    assert first_step.num_seqs == 2 and first_step.cached_tokens == 0
    assert first_step.computed_tokens == 2 * len(prompt)


def test_preempted_request_goes_back_to_the_head_of_waiting(model):
    engine = LLMEngine(model, num_blocks=6, block_size=4, max_num_seqs=4)
    for text in ("abcdefg", "hijklmn"):
        engine.add_request(text, SamplingParams(max_tokens=12))
    while not any(r.preempted for r in engine.step_log):
        engine.step()
    victim = engine.requests[1].seq  # the newest one gives way
    assert engine.scheduler.waiting[0] is victim and not victim.block_table
    assert engine.requests[1].num_preemptions == 1 and engine.requests[0].num_preemptions == 0
    engine.run()
    assert engine.block_manager.num_free_blocks == 6


def test_decode_backend_is_pluggable_and_really_used(model, greedy_no_cache):
    calls = []

    def counting(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
        calls.append(q.shape[0])
        return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale)

    _, outputs = serve(model, 64, 16, prompts=PROMPTS[:2], decode_attention=counting)
    assert outputs == greedy_no_cache[:2]
    assert len(calls) == model.config.num_layers * (MAX_TOKENS - 1)

    def broken(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
        return torch.zeros_like(q)

    _, outputs = serve(model, 64, 16, prompts=PROMPTS[:2], decode_attention=broken)
    assert outputs != greedy_no_cache[:2]


def test_ttft_and_tpot_follow_the_clock(model):
    ticks = itertools.count()
    engine = LLMEngine(model, 16, 16, clock=lambda: float(next(ticks)))
    a = engine.add_request("x = 1", SamplingParams(max_tokens=3))  # arrives at t=0
    b = engine.add_request("y = 2", SamplingParams(max_tokens=1))  # arrives at t=1
    engine.run()
    first, second = engine.requests[a], engine.requests[b]
    assert (first.ttft, second.ttft) == (2.0, 1.0)  # both prefilled in step 1 (t=2)
    assert first.tpot == 1.0 and second.tpot is None  # steps end at t=2, 3, 4
    assert first.finished and first.text == tokenizer.decode(first.output_ids)


def test_max_reservation_baseline_serves_the_same_tokens_with_fewer_running(model, greedy_no_cache):
    factory = functools.partial(MaxReservationScheduler, max_model_len=model.config.max_model_len)
    engine, outputs = serve(model, 48, 16, scheduler=factory)
    assert outputs == greedy_no_cache
    assert max(r.num_running for r in engine.step_log) <= 48 // (model.config.max_model_len // 16)
    assert sum(r.preempted for r in engine.step_log) == 0 and sum(r.cached_tokens for r in engine.step_log) == 0
    per_request = model.config.max_model_len  # 16 blocks of 16 tokens reserved for every running request
    assert all(r.kv_slots_reserved == r.num_running * per_request >= r.kv_slots_filled for r in engine.step_log)


def test_filled_slots_count_shared_blocks_once(model):
    engine = LLMEngine(model, num_blocks=16, block_size=16)
    engine.add_request(HEADER_A + "The ", SamplingParams(max_tokens=3))
    engine.step()
    engine.add_request(HEADER_A + "Then", SamplingParams(max_tokens=3))
    engine.step()  # the second shares the first's 3 full blocks
    record = engine.step_log[-1]
    assert record.kv_slots_filled == 3 * 16 + 1 + 1  # 3 shared blocks + each one's token in block 3
    assert record.kv_slots_reserved == record.blocks_in_use * 16 == 5 * 16


# -- refusing what can never work, with a clear message and nothing queued -----------------------------
def test_a_request_that_can_never_fit_the_pool_is_refused_up_front(model):
    engine = LLMEngine(model, num_blocks=4, block_size=16)
    with pytest.raises(ValueError, match="could never finish"):
        engine.add_request("x" * 60, SamplingParams(max_tokens=10))
    assert engine.scheduler.is_finished() and not engine.requests


def test_generate_checks_every_prompt_before_queueing_any(model):
    engine = LLMEngine(model, num_blocks=4, block_size=16)
    with pytest.raises(ValueError, match="could never finish"):
        engine.generate(["short", "x" * 60], SamplingParams(max_tokens=10))
    assert engine.scheduler.is_finished() and not engine.requests


@pytest.mark.parametrize(
    "prompt, params, error, match",
    [
        ("x" * 250, SamplingParams(max_tokens=10), ValueError, "max_model_len"),
        ("", SamplingParams(), ValueError, "at least one token"),
        ([1, 2, 300], SamplingParams(), ValueError, "vocab_size"),
        ([1, -2], SamplingParams(), ValueError, "non-negative"),
        ("ok", {"max_tokens": 3}, TypeError, "SamplingParams"),
        (b"bytes", SamplingParams(), TypeError, "str or a list of ints"),
    ],
)
def test_bad_requests_are_rejected_with_clear_errors(model, prompt, params, error, match):
    engine = LLMEngine(model, num_blocks=32, block_size=16)
    with pytest.raises(error, match=match):
        engine.add_request(prompt, params)
    assert engine.scheduler.is_finished()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_blocks": 0}, ValueError, "num_blocks"),
        ({"block_size": 0}, ValueError, "block_size"),
        ({"max_num_seqs": 0}, ValueError, "max_num_seqs"),
        ({"max_num_batched_tokens": 100}, ValueError, "at least max_model_len"),
        ({"decode_attention": "triton"}, TypeError, "callable"),
        ({"scheduler": lambda bm, **kw: object()}, TypeError, "SchedulerBase"),
    ],
)
def test_bad_engine_settings_are_rejected(model, kwargs, error, match):
    settings = dict(num_blocks=32, block_size=16)
    settings.update(kwargs)
    with pytest.raises(error, match=match):
        LLMEngine(model, **settings)


def test_step_with_nothing_to_do_raises(model):
    with pytest.raises(RuntimeError, match="nothing to do"):
        LLMEngine(model, 8, 16).step()


def test_a_scheduler_that_schedules_nothing_fails_instead_of_hanging(model):
    class Idle(SchedulerBase):
        def schedule(self):
            return [], True

    engine = LLMEngine(model, 8, 16, scheduler=Idle)
    engine.add_request("hello", SamplingParams(max_tokens=2))
    with pytest.raises(RuntimeError, match="loop forever"):
        engine.run()


def test_a_scheduler_that_skips_may_append_is_caught_before_the_model_runs(model):
    """A decode batch whose tables are too short is refused before any K/V is written."""

    class Forgetful(Scheduler):
        def schedule(self):
            if self.waiting:
                return super().schedule()
            batch = list(self.running)
            for seq in batch:
                seq.num_scheduled_tokens = 1
            return batch, False

    engine = LLMEngine(model, 8, 4, scheduler=Forgetful)
    engine.add_request("abcd", SamplingParams(max_tokens=3))
    with pytest.raises(ValueError, match="was may_append/allocate called"):
        engine.run()


def test_the_triton_kernel_of_lab_06_serves_the_same_tokens(greedy_no_cache):
    """Runs once paged_kv.kernels.triton_attention exists: on CPU through Triton's interpreter, in a fresh process
    (TRITON_INTERPRET must be set before triton is imported)."""
    import importlib.util
    import os
    import subprocess
    import sys

    if (
        importlib.util.find_spec("paged_kv.kernels.triton_attention") is None
        or importlib.util.find_spec("triton") is None
    ):
        pytest.skip("paged_kv.kernels.triton_attention (lab 06's kernel) is not in this checkout yet")
    script = (
        "import torch\n"
        "from paged_kv.engine.llm_engine import LLMEngine\n"
        "from paged_kv.engine.model import load_tiny_model\n"
        "from paged_kv.engine.sampling import SamplingParams\n"
        "from paged_kv.kernels.triton_attention import paged_decode_attention\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        f"prompts = {PROMPTS[:3]!r}\n"
        "engine = LLMEngine(load_tiny_model(device=device), 40, 16, decode_attention=paged_decode_attention)\n"
        "print([s.output_ids for s in engine.generate(prompts, SamplingParams(max_tokens=6))])\n"
    )
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env.setdefault("TRITON_INTERPRET", "1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str([ids[:6] for ids in greedy_no_cache[:3]])
