"""Chunked prefill (lab 09's reference): the same tokens as lab 07's engine on random arrivals, whatever the
token budget; every step within the budget, running served before waiting, blocks only for the tokens
scheduled, preemption all or nothing, only fully computed blocks in the prefix cache; and the wrong prefix
hit that registering a chunk's blocks at allocation gives."""

import random

import pytest
import torch

from paged_kv.cache.prefix_cache import Sequence
from paged_kv.engine import tokenizer
from paged_kv.engine.chunked import ChunkedBlockManager, ChunkedScheduler, EagerRegistrationBlockManager, is_decode
from paged_kv.engine.generate import generate_no_cache
from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.model import load_tiny_model
from paged_kv.engine.runner import ModelRunner
from paged_kv.engine.sampling import SamplingParams
from paged_kv.engine.scheduler import Scheduler

HEADER = 'The "while" statement\n*********************\n\n'
TEXTS = [
    HEADER + "The while loop",
    HEADER + "It ",
    "Python",
    'Function definitions\n********************\n\nA f',
    HEADER + "The ",
    "def",
    'The "for" statement is used to iterate over the elements of a sequence',
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_tiny_model()


class Audited(ChunkedScheduler):
    """The reference, with every rule checked on each decision (before the model runs)."""

    def schedule(self):
        before_running = list(self.running)
        before_waiting = list(self.waiting)
        scheduled, is_prefill = super().schedule()
        manager, size = self.block_manager, self.block_size
        assert sum(s.num_scheduled_tokens for s in scheduled) <= self.max_num_batched_tokens
        assert len({id(s) for s in scheduled}) == len(scheduled) and len(self.running) <= self.max_num_seqs
        assert is_prefill == any(not is_decode(s) for s in scheduled)
        ids = {id(s) for s in scheduled}
        for seq in self.running:
            end = seq.num_computed_tokens + (seq.num_scheduled_tokens if id(seq) in ids else 0)
            assert end <= len(seq)
            assert len(seq.block_table) == -(-end // size), "blocks only for the tokens computed or scheduled"
            for i, block_id in enumerate(seq.block_table):
                if manager.hash_to_block_id.get(manager.blocks[block_id].hash) == block_id:
                    assert (i + 1) * size <= seq.num_computed_tokens, "a registered block must be fully computed"
        for seq in self.waiting:
            assert not seq.block_table and seq.num_computed_tokens == 0 and seq.num_scheduled_tokens == 0
        preempted = [s for s in before_running if not any(s is w for w in self.running)]
        admitted = [s for s in scheduled if not any(s is r for r in before_running)]
        if preempted:  # the newest went, back to the head of waiting in order, and nobody was admitted
            assert (
                before_running[-len(preempted) :] == preempted[::-1] or before_running[-len(preempted) :] == preempted
            )
            assert not admitted and list(self.waiting)[: len(preempted)] == preempted[::-1]
        if admitted:  # running first: every running sequence got its tokens before anyone was admitted
            assert all(any(r is s for s in scheduled) for r in before_running)
            assert admitted == before_waiting[: len(admitted)]
        if sum(s.num_scheduled_tokens for s in scheduled) < self.max_num_batched_tokens and not preempted:
            for seq in scheduled:  # budget left: nobody was cut short
                assert seq.num_computed_tokens + seq.num_scheduled_tokens == len(seq)
        return scheduled, is_prefill


def serve(model, scheduler, arrivals, num_blocks, block_size, budget, max_num_seqs=8):
    """Serve ``arrivals`` [(step, prompt, max_tokens)]; outputs in arrival order and the engine (whose clock
    counts steps: a token made in step k has time k)."""
    engine = LLMEngine(
        model,
        num_blocks,
        block_size,
        scheduler=scheduler,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        clock=lambda: len(engine.step_log),
    )
    pending, ids, step = sorted(arrivals, key=lambda a: a[0]), [], 0
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            _, prompt, tokens = pending.pop(0)
            ids.append(engine.add_request(prompt, SamplingParams(max_tokens=tokens)))
        if engine.has_unfinished():
            engine.step()
        step += 1
        assert step < 3000
    return [engine.requests[i].output_ids for i in ids], engine


def random_arrivals(seed, n=6):
    rng = random.Random(seed)
    return [(rng.randint(0, 12), rng.choice(TEXTS)[: rng.randint(3, 80)], rng.randint(1, 20)) for _ in range(n)]


@pytest.mark.parametrize(
    "seed, num_blocks, block_size, budget",
    [
        (0, 64, 16, 16),
        (1, 40, 4, 7),
        (2, 300, 1, 5),
        (3, 30, 5, 9),
        (4, 30, 4, 3),
        (5, 26, 4, 12),
        (6, 64, 8, 1),
    ],
)
def test_the_same_tokens_as_the_unchunked_engine_on_random_arrivals(model, seed, num_blocks, block_size, budget):
    arrivals = random_arrivals(seed)
    unchunked, _ = serve(model, Scheduler, arrivals, num_blocks, block_size, 1024)
    chunked, engine = serve(model, Audited, arrivals, num_blocks, block_size, budget)
    assert chunked == unchunked
    assert engine.block_manager.num_free_blocks == num_blocks
    assert max(r.computed_tokens for r in engine.step_log) <= budget
    assert all(r.token_budget == budget for r in engine.step_log)


def test_tight_pools_preempt_and_still_serve_the_same_tokens(model):
    arrivals = [(0, TEXTS[6], 20), (0, TEXTS[0], 20), (1, TEXTS[2], 20), (2, TEXTS[3], 12)]
    unchunked, _ = serve(model, Scheduler, arrivals, 24, 4, 1024)
    chunked, engine = serve(model, Audited, arrivals, 24, 4, 6)
    assert sum(r.preempted for r in engine.step_log) >= 1
    assert chunked == unchunked


def test_a_long_prompt_no_longer_stalls_a_running_decode(model):
    """A request decodes; a 70-token prompt arrives: unchunked, one step computes it all and the decode waits
    for it; chunked at 8 tokens a step, every step gives the running request its token."""
    arrivals = [(0, "Python", 30), (5, TEXTS[6], 4)]
    _, unchunked = serve(model, Scheduler, arrivals, 64, 16, 1024)
    _, chunked = serve(model, Audited, arrivals, 64, 16, 8)
    assert max(r.computed_tokens for r in unchunked.step_log) >= 70
    assert sorted(unchunked.requests[0].itl)[-1:] == [2], "unchunked: the prompt's step is a gap in the decode"
    assert chunked.requests[0].itl == [1] * 29, "a token every step, while the long prompt is chunked"
    assert all(r.decode_tokens >= 1 for r in chunked.step_log[1:30])
    assert sum(1 for r in chunked.step_log if r.is_prefill and r.decode_tokens) >= 8, "decodes and chunks share steps"
    assert all(r.computed_tokens <= 8 for r in chunked.step_log)


def test_a_prompt_longer_than_the_budget_is_served_in_chunks(model):
    prompt = TEXTS[6]
    outputs, engine = serve(model, Audited, [(0, prompt, 5)], 64, 16, 10)
    expected = generate_no_cache(model, tokenizer.encode(prompt), SamplingParams(max_tokens=5))
    assert outputs == [expected]
    chunks = [r.computed_tokens for r in engine.step_log]
    assert chunks[:-4] == [10] * (len(prompt) // 10) + ([len(prompt) % 10] if len(prompt) % 10 else [])
    steps = -(-len(prompt) // 10)
    assert [r.sampled for r in engine.step_log][:steps] == [0] * (steps - 1) + [1]  # the last chunk samples


def test_the_unchunked_engine_still_needs_a_budget_that_holds_a_prompt(model):
    with pytest.raises(ValueError, match="at least max_model_len"):
        LLMEngine(model, 32, 16, max_num_batched_tokens=100)
    LLMEngine(model, 32, 16, scheduler=ChunkedScheduler, max_num_batched_tokens=1)


# -- the block manager: blocks per chunk, all or nothing ------------------------------------------------------
def test_allocate_slots_gives_blocks_for_the_scheduled_tokens_only():
    manager = ChunkedBlockManager(10, 4)
    seq = Sequence(list(range(1, 23)), 4)  # 22 tokens: 6 blocks in all
    assert manager.allocate_slots(seq, 5) and len(seq.block_table) == 2
    seq.num_computed_tokens = 5
    assert manager.allocate_slots(seq, 3) and len(seq.block_table) == 2  # tokens 5..7 fit block 1
    seq.num_computed_tokens = 8
    assert manager.allocate_slots(seq, 1) and len(seq.block_table) == 3
    with pytest.raises(ValueError, match="exceed"):
        manager.allocate_slots(seq, 15)


def test_allocate_slots_changes_nothing_when_the_pool_is_short():
    manager = ChunkedBlockManager(4, 4)
    first, second = Sequence(list(range(1, 13)), 4), Sequence(list(range(50, 60)), 4)
    assert manager.allocate_slots(first, 12)
    before = (list(manager.free_block_ids), manager.ref_counts())
    assert manager.allocate_slots(second, 8) is False
    assert second.block_table == [] and second.num_computed_tokens == 0
    assert (list(manager.free_block_ids), manager.ref_counts()) == before
    assert manager.allocate_slots(second, 4) and len(second.block_table) == 1


def test_num_blocks_to_allocate_says_what_allocate_slots_takes_and_changes_nothing():
    manager = ChunkedBlockManager(6, 4)
    first = Sequence(list(range(1, 11)), 4)
    assert manager.num_blocks_to_allocate(first, 10) == 3 and manager.allocate_slots(first, 10)
    first.num_scheduled_tokens = 10
    manager.hash_blocks(first)  # blocks 0 and 1 are full: cached
    first.num_computed_tokens, first.num_scheduled_tokens = 10, 0
    manager.deallocate(first)  # free, still cached
    second = Sequence(list(range(1, 9)) + [99], 4)
    hits = manager.get_computed_blocks(second)
    before = (list(manager.free_block_ids), manager.ref_counts(), dict(manager.hash_to_block_id))
    assert hits == 2 and manager.num_blocks_to_allocate(second, 1, hits) == 3  # two revived hits + one fresh
    assert (list(manager.free_block_ids), manager.ref_counts(), dict(manager.hash_to_block_id)) == before
    assert manager.allocate_slots(second, 1, hits) and manager.num_free_blocks == 6 - 3
    with pytest.raises(ValueError, match="admission only"):
        manager.num_blocks_to_allocate(second, 1, 1)


def test_the_engine_names_the_flag_when_a_chunk_comes_as_a_decode_step(model):
    class ChunksAsDecodes(ChunkedScheduler):
        def schedule(self):
            scheduled, _ = super().schedule()
            return scheduled, False

    engine = LLMEngine(model, 16, 4, scheduler=ChunksAsDecodes, max_num_batched_tokens=3)
    engine.add_request("Python is", SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match=r"is_prefill=False.*a prompt chunk.*is_prefill must be True"):
        engine.step()


def test_prefix_hits_are_taken_at_admission_and_cost_no_budget():
    manager = ChunkedBlockManager(10, 4)
    first = Sequence(list(range(1, 11)), 4)
    assert manager.allocate_slots(first, 10)
    first.num_scheduled_tokens = 10
    manager.hash_blocks(first)
    first.num_computed_tokens, first.num_scheduled_tokens = 10, 0
    second = Sequence(list(range(1, 9)) + [90, 91, 92], 4)
    hits = manager.get_computed_blocks(second)
    assert hits == 2
    assert manager.allocate_slots(second, 3, hits)
    assert second.num_computed_tokens == 8 and second.block_table[:2] == first.block_table[:2]
    assert len(second.block_table) == 3


# -- registration: only fully computed blocks --------------------------------------------------------------
def run_chunk(runner, manager, seq, count):
    seq.num_scheduled_tokens = count
    logits = runner.run([seq], is_prefill=True)
    manager.hash_blocks(seq)
    seq.num_computed_tokens += count
    seq.num_scheduled_tokens = 0
    return logits[0]


@pytest.mark.parametrize(
    "manager_class, hits, right", [(ChunkedBlockManager, 1, True), (EagerRegistrationBlockManager, 2, False)]
)
def test_registering_a_chunks_blocks_at_allocation_gives_a_wrong_hit(model, manager_class, hits, right):
    """A's first chunk (6 tokens, blocks of 4) ends inside block 1. Registered at allocation, block 1 is in the
    prefix cache with only 2 of its 4 slots written: B, which shares A's first 8 tokens, hits it and attends to
    K/V nobody computed. Registered after the step, only block 0 is there, and B's logits are right."""
    prompt_a = tokenizer.encode(TEXTS[6])[:20]
    prompt_b = prompt_a[:8] + tokenizer.encode(" is")
    manager, runner = manager_class(16, 4), ModelRunner(model, 16, 4)
    a = Sequence(prompt_a, 4)
    assert manager.allocate_slots(a, 6)
    run_chunk(runner, manager, a, 6)
    b = Sequence(prompt_b, 4)
    found = manager.get_computed_blocks(b)
    assert found == hits
    assert manager.allocate_slots(b, len(b) - found * 4, found)
    logits = run_chunk(runner, manager, b, len(b) - found * 4)
    full = runner.model.logits(
        runner.model(torch.tensor(prompt_b), torch.arange(len(prompt_b)), _no_cache(len(prompt_b)))[-1:]
    )[0]
    assert torch.allclose(logits, full, atol=1e-4) is right


def _no_cache(n):
    from paged_kv.engine.kv_context import NoCache

    return NoCache([n])
