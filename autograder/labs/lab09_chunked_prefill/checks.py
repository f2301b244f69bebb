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
from paged_kv.lab.chunked_trace import check_rules as _check_rules
from paged_kv.lab.scheduler_trace import TraceRequest

from autograder.labs.checking import grades, student_side

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 4, which
# asks for "schedule() by the rules of section 3"): a fragment of the hint, as the rule check
# (``paged_kv.lab.chunked_trace``) gives it to the visible test and these checks, and its section. The first
# match wins. Registering a block only once it is computed, and the keys a wrong hit reads, are § 2's; every
# other rule is § 3's; a schedule() that makes the manager's calls fail is the task's own.
TEACHES = {
    "a block enters the prefix cache only once all its tokens are computed": "§ 2",
    "a sequence read keys its prefix never wrote": "§ 2",
    "a chunk that overruns the budget": "§ 3",
    "blocks for this step's tokens only": "§ 3",
    "running sequences come first": "§ 3",
    "admit from the head of waiting, in order": "§ 3",
    "when allocate_slots fails, preempt the newest running sequence": "§ 3",
    "budget was left unused although more could run": "§ 3",
    "schedule() returns (list of the scheduled sequences": "§ 3",
}


def replay_rules(cls, spec: ChunkTraceSpec, case: str) -> int:
    """``paged_kv.lab.chunked_trace.check_rules`` with the student's side replayed where it lives; the rules are
    checked here, on the snapshots that come back."""
    return _check_rules(cls, spec, case, run_cls=student_side(cls, "paged_kv.lab.chunked_trace.ChunkedTraceRun"))


TRUSTED_NAMES = {"check_rules": replay_rules}  # the visible cell's check_rules, run the trusted way


def _spec(requests, num_blocks, block_size, budget, max_num_seqs=8) -> ChunkTraceSpec:
    reqs = tuple(TraceRequest(tuple(prompt), tokens, arrival) for prompt, tokens, arrival in requests)
    return ChunkTraceSpec(reqs, num_blocks, block_size, max_num_seqs, budget)


def _ids(start: int, count: int):
    return list(range(start, start + count))


@grades(Reference.schedule)
def check_token_budget(cls) -> None:
    """Chunks never overrun the budget, are cut only by it, and a budget of one token still serves everyone."""
    replay_rules(cls, _spec([(_ids(1, 30), 3, 0)], 20, 4, 7), "a 30-token prompt, budget 7")
    replay_rules(
        cls,
        _spec([(_ids(1, 3), 12, 0), (_ids(10, 25), 3, 2), (_ids(40, 5), 4, 3)], 30, 4, 6),
        "decodes beside a long prompt, budget 6",
    )
    replay_rules(cls, _spec([(_ids(1, 5), 4, 0), (_ids(10, 6), 4, 0)], 20, 2, 1), "a budget of one token")
    replay_rules(
        cls,
        _spec([(_ids(1, 8), 3, 0), (_ids(20, 8), 3, 0), (_ids(30, 8), 3, 0)], 30, 4, 16),
        "prompts that exactly fill the budget",
    )
    replay_rules(cls, _spec([([i + 1, i + 2], 4, 0) for i in range(6)], 20, 4, 32, max_num_seqs=3), "max_num_seqs = 3")


@grades(Reference.schedule)
def check_blocks_and_preemption(cls) -> None:
    """Blocks for the scheduled tokens only (block sizes 1, 3, 4); a short pool preempts the newest, all or
    nothing, and admits nobody in that step."""
    for block_size in (1, 3, 4):
        replay_rules(
            cls,
            _spec([(_ids(1, 11), 5, 0), (_ids(20, 7), 6, 1)], 60, block_size, 5),
            f"chunks and decodes, block_size={block_size}",
        )
    replay_rules(cls, _spec([(_ids(1, 4), 10, 0), (_ids(10, 4), 10, 0)], 5, 4, 8), "two requests outgrow the pool")
    replay_rules(
        cls,
        _spec([(_ids(1, 3), 8, 0), (_ids(10, 3), 8, 0), (_ids(20, 3), 8, 0), (_ids(30, 12), 4, 1)], 8, 2, 5),
        "a long prompt arrives into a full pool",
    )
    replay_rules(cls, _spec([(_ids(1, 6), 12, 0), (_ids(10, 14), 3, 2)], 6, 4, 4), "a chunk that cannot get its block")


@grades(Reference.schedule)
def check_prefix_cache(cls) -> None:
    """Prefix hits cost no budget and are taken at admission; a partly computed block is never hit."""
    shared = _ids(1, 12)
    replay_rules(
        cls,
        _spec([(shared + [50], 3, 0), (shared + [60, 61], 3, 4), (shared + [70], 2, 5)], 20, 4, 6),
        "hits on a computed prefix, budget 6",
    )
    replay_rules(
        cls,
        _spec([(shared + _ids(80, 10), 2, 0), (shared + [60], 2, 1), (shared[:7] + [9], 2, 2)], 20, 4, 5),
        "a prefix still being chunked when others arrive",
    )
    replay_rules(
        cls, _spec([(shared, 2, 0), (shared, 2, 0), (shared, 2, 3)], 20, 4, 40), "identical prompts in one step"
    )
    replay_rules(cls, _spec([(_ids(1, 9), 3, 0), (_ids(1, 9), 3, 6)], 5, 3, 4), "a hit on a free but cached block")


@grades(Reference.schedule)
def check_random_traces(cls, seeds=range(16)) -> None:
    """Seeded random workloads: shared prefixes, prompts longer than the budget, staggered arrivals, tight pools."""
    for seed in seeds:
        spec = make_chunk_trace(
            seed,
            10,
            num_blocks=8 + seed % 6,
            block_size=(2, 4, 3)[seed % 3],
            budget=(3, 5, 8, 13)[seed % 4],
            max_num_seqs=2 + seed % 5,
        )
        replay_rules(cls, spec, f"random trace seed={seed}")
