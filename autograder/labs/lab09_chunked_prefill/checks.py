"""Lab 09 grader: a chunked-prefill ``schedule()``, replayed on traces and judged by the rules.

Each check replays scripted or seeded workloads (``paged_kv.lab.chunked_trace``) through the student's class
where it lives; only plain snapshots come back, and this process checks every step against the rules (token
budget, blocks for the scheduled tokens only, running first, first come first served, newest-first
preemption, no unused budget while more could run, only fully computed blocks registered) and a simulated KV
cache (every sequence reads exactly its own prefix's keys). The reference passes the same traces (its own
tests prove it); a correct scheduler that orders its choices differently passes too.
"""

from __future__ import annotations

from paged_kv.engine.chunked import ChunkedScheduler as Reference
from paged_kv.lab.chunked_trace import ChunkTraceSpec, make_chunk_trace
from paged_kv.lab.chunked_rules import check_rules as _check_rules
from paged_kv.lab.scheduler_trace import TraceRequest

from autograder.labs.checking import _, grades, student_side

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 4, which
# asks for "schedule() by the rules of section 3"): a fragment of the hint, as the rule check
# (``paged_kv.lab.chunked_rules.HINTS``, one hint per rule) gives it to the visible test and these checks, and its
# section. The first match wins. Registering a block only once it is computed, and the keys a wrong hit reads,
# are § 2's; every other rule is § 3's.
TEACHES = {
    "a block enters the prefix cache only once all its tokens are computed": "§ 2",
    "a sequence read keys its prefix never wrote": "§ 2",
    "a chunk that overruns the budget": "§ 3",
    "a chunk is cut only by the budget left": "§ 3",
    "blocks for this step's tokens only": "§ 3",
    "running sequences come first": "§ 3",
    "after a preemption, try allocate_slots(seq, n) again": "§ 3",
    "admit from the head of waiting, in order": "§ 3",
    "admit only while fewer than max_num_seqs sequences run": "§ 3",
    "the head of waiting fits, so it must be admitted": "§ 3",
    "admit with the prefix cache": "§ 3",
    "when allocate_slots fails, preempt the newest running sequence": "§ 3",
    "a preempted sequence leaves running and gives its blocks back": "§ 3",
    "admit nobody in a step that preempted": "§ 3",
    "is_prefill must be true when any scheduled sequence computes more than its one last token": "§ 3",
    "schedule() returns (list of the scheduled sequences": "§ 3",
}


def replay_rules(cls, spec: ChunkTraceSpec, case: str) -> int:
    """``paged_kv.lab.chunked_rules.check_rules`` with the student's side replayed where it lives; the rules are
    checked here, on the snapshots that come back."""
    return _check_rules(cls, spec, case, run_cls=student_side(cls, "paged_kv.lab.chunked_trace.ChunkedTraceRun"))


TRUSTED_NAMES = {"check_rules": replay_rules}  # the visible cell's check_rules, run the trusted way


def _spec(requests, num_blocks, block_size, budget, max_num_seqs=8) -> ChunkTraceSpec:
    reqs = tuple(TraceRequest(tuple(prompt), tokens, arrival) for prompt, tokens, arrival in requests)
    return ChunkTraceSpec(reqs, num_blocks, block_size, max_num_seqs, budget)


def _ids(start: int, count: int):
    return list(range(start, start + count))


_TIGHT = ((10, 2, 3), (6, 4, 5), (8, 4, 3), (10, 4, 5), (8, 2, 5), (6, 4, 8))  # (blocks, block size, budget)


def tight_trace(seed: int) -> ChunkTraceSpec:
    """A pool a few blocks too small, prompts sharing one prefix: preemptions, victims that would fit again at
    once, hits on blocks other sequences hold, and max_num_seqs from 2 to 5."""
    num_blocks, block_size, budget = _TIGHT[seed % len(_TIGHT)]
    return make_chunk_trace(
        seed, 8, num_blocks=num_blocks, block_size=block_size, budget=budget, max_num_seqs=2 + seed % 4,
        shared_prefixes=1, arrival_spread=3,
    )  # fmt: skip


def small_budget_trace(seed: int) -> ChunkTraceSpec:
    """A budget of 2 to 4 tokens with one more sequence allowed than that: decodes take most of each step, so
    prompts are chunked a token or two at a time (one-token chunks short of the end beside decodes)."""
    budget = (2, 3, 4)[seed % 3]
    return make_chunk_trace(
        seed, 6, num_blocks=12 + seed % 5, block_size=(2, 4)[seed % 2], budget=budget, max_num_seqs=budget + 1,
        arrival_spread=10,
    )  # fmt: skip


@grades(Reference.schedule)
def check_token_budget(cls) -> None:
    """Chunks never overrun the budget, are cut only by it, and a budget of one token still serves everyone;
    a chunk of one token short of its end is a prefill step."""
    replay_rules(cls, _spec([(_ids(1, 30), 3, 0)], 20, 4, 7), _("a 30-token prompt, budget 7"))
    replay_rules(
        cls,
        _spec([(_ids(1, 3), 12, 0), (_ids(10, 25), 3, 2), (_ids(40, 5), 4, 3)], 30, 4, 6),
        _("decodes beside a long prompt, budget 6"),
    )
    replay_rules(cls, _spec([(_ids(1, 5), 4, 0), (_ids(10, 6), 4, 0)], 20, 2, 1), _("a budget of one token"))
    replay_rules(
        cls,
        _spec([(_ids(1, 2), 10, 0), (_ids(5, 2), 10, 0), (_ids(20, 9), 2, 2)], 20, 4, 3),
        _("a prompt chunked one token at a time beside two decodes"),
    )
    replay_rules(
        cls,
        _spec([(_ids(1, 8), 3, 0), (_ids(20, 8), 3, 0), (_ids(30, 8), 3, 0)], 30, 4, 16),
        _("prompts that exactly fill the budget"),
    )
    replay_rules(
        cls, _spec([([i + 1, i + 2], 4, 0) for i in range(6)], 20, 4, 32, max_num_seqs=3), _("max_num_seqs = 3")
    )
    for seed in range(2):
        replay_rules(cls, small_budget_trace(seed), _(f"small budget seed={seed}"))


@grades(Reference.schedule)
def check_blocks_and_preemption(cls) -> None:
    """Blocks for the scheduled tokens only (block sizes 1, 3, 4); a short pool preempts the newest, and no more
    than it must, which gives its blocks back and waits at the head of waiting, and admits nobody in that step; a
    recomputation is a prefill step."""
    for block_size in (1, 3, 4):
        replay_rules(
            cls,
            _spec([(_ids(1, 11), 5, 0), (_ids(20, 7), 6, 1)], 60, block_size, 5),
            _(f"chunks and decodes, block_size={block_size}"),
        )
    replay_rules(cls, _spec([(_ids(1, 4), 10, 0), (_ids(10, 4), 10, 0)], 5, 4, 8), _("two requests outgrow the pool"))
    replay_rules(
        cls,
        _spec([(_ids(1, 3), 8, 0), (_ids(10, 3), 8, 0), (_ids(20, 3), 8, 0), (_ids(30, 12), 4, 1)], 8, 2, 5),
        _("a long prompt arrives into a full pool"),
    )
    replay_rules(
        cls, _spec([(_ids(1, 6), 12, 0), (_ids(10, 14), 3, 2)], 6, 4, 4), _("a chunk that cannot get its block")
    )
    replay_rules(
        cls,
        _spec([((1, 2), 12, 0), ((3, 4, 5), 12, 0), ((6, 7, 8, 9), 12, 0)], 8, 2, 12),
        _("three decodes, a pool where one victim is enough"),
    )
    for seed in range(3):
        replay_rules(cls, tight_trace(seed), _(f"tight pool seed={seed}"))


@grades(Reference.schedule)
def check_prefix_cache(cls) -> None:
    """Prefix hits cost no budget and are taken at admission; a partly computed block is never hit."""
    shared = _ids(1, 12)
    replay_rules(
        cls,
        _spec([(shared + [50], 3, 0), (shared + [60, 61], 3, 4), (shared + [70], 2, 5)], 20, 4, 6),
        _("hits on a computed prefix, budget 6"),
    )
    replay_rules(
        cls,
        _spec([(shared + _ids(80, 10), 2, 0), (shared + [60], 2, 1), (shared[:7] + [9], 2, 2)], 20, 4, 5),
        _("a prefix still being chunked when others arrive"),
    )
    replay_rules(
        cls, _spec([(shared, 2, 0), (shared, 2, 0), (shared, 2, 3)], 20, 4, 40), _("identical prompts in one step")
    )
    replay_rules(cls, _spec([(_ids(1, 9), 3, 0), (_ids(1, 9), 3, 6)], 5, 3, 4), _("a hit on a free but cached block"))


@grades(Reference.schedule)
def check_random_traces(cls, seeds=range(10)) -> None:
    """Seeded random workloads: shared prefixes, prompts longer than the budget, staggered arrivals; then tight
    pools (seeds 3 to 10) and small budgets (seeds 2 to 5), beyond those the other checks replay."""
    for seed in seeds:
        spec = make_chunk_trace(
            seed,
            10,
            num_blocks=8 + seed % 6,
            block_size=(2, 4, 3)[seed % 3],
            budget=(3, 5, 8, 13)[seed % 4],
            max_num_seqs=2 + seed % 5,
        )
        replay_rules(cls, spec, _(f"random trace seed={seed}"))
    for seed in range(3, 11):
        replay_rules(cls, tight_trace(seed), _(f"random tight pool seed={seed}"))
    for seed in range(2, 6):
        replay_rules(cls, small_budget_trace(seed), _(f"random small budget seed={seed}"))
