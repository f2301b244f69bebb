"""Replay a scripted workload through a chunked-prefill scheduler, without a model (the student's side of lab 09).

``ChunkedTraceRun`` plays the engine around ``schedule()`` (it runs where the scheduler lives): arrivals, one
``schedule()`` per step, a ``ChunkSnapshot`` of plain values, then the engine's part after the model
(``hash_blocks``, the scheduled tokens become computed, a made-up token for each sequence whose chunk reached
its end, finished requests give their blocks back). Its block manager records what a snapshot cannot see in
the queues: which sequences ``schedule()`` gave blocks back (preemptions, even of one re-admitted at once),
and with how many prefix hits each admission was made against how many the cache held.

``paged_kv.lab.chunked_rules.check_rules`` reads only the snapshots (so it can run in the trusted grading
process) and checks each rule of the lab.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import List, Tuple

from paged_kv.cache.checks import check_int, check_positive_int
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.engine.chunked import ChunkedBlockManager
from paged_kv.lab.i18n import N_, _
from paged_kv.lab.scheduler_trace import StepCallGuard, TraceRequest, TraceRun, made_up_token


@dataclass(frozen=True)
class ChunkTraceSpec:
    """A pool, a token budget and requests (``r0``, ``r1``, ...). A prompt may be longer than the budget."""

    requests: Tuple[TraceRequest, ...]
    num_blocks: int
    block_size: int
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 8

    def __post_init__(self) -> None:
        check_positive_int("num_blocks", self.num_blocks)
        check_positive_int("block_size", self.block_size)
        check_positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        for i, r in enumerate(self.requests):
            longest = len(r.prompt) + check_positive_int("max_tokens", r.max_tokens) - 1
            if not r.prompt or longest > self.num_blocks * self.block_size:
                raise ValueError(
                    f"request r{i} reaches {longest} tokens; it must fit the pool alone "
                    f"({self.num_blocks * self.block_size})"
                )


@dataclass(frozen=True)
class ChunkSnapshot:
    """One ``schedule()`` in plain values: queues before and after, what was scheduled, every block holder
    (name, block table, computed tokens, length), the blocks the prefix cache names, the free count; then what
    the block manager saw: ``freed``, the sequences whose blocks ``schedule()`` gave back (preemptions), in
    order; ``admissions``, (name, prefix hits taken, hits the cache held) for each sequence given its first
    blocks; ``head``, (name, hits the cache holds, how many of them are free-but-cached blocks) for the head
    of waiting after the step, or () when waiting is empty."""

    step: int
    idle: bool
    waiting_before: Tuple[str, ...]
    running_before: Tuple[str, ...]
    scheduled: Tuple[Tuple[str, int], ...]
    is_prefill: bool
    waiting: Tuple[str, ...]
    running: Tuple[str, ...]
    holders: Tuple[Tuple[str, Tuple[int, ...], int, int], ...]
    registered: Tuple[int, ...]
    free_blocks: int
    freed: Tuple[str, ...] = ()
    admissions: Tuple[Tuple[str, int, int], ...] = ()
    head: Tuple[object, ...] = ()


class GuardedChunkedBlockManager(StepCallGuard, ChunkedBlockManager):
    """A ``ChunkedBlockManager`` whose ``get_computed_blocks``/``allocate_slots`` calls are counted per step, and
    which records, per step, the sequences given back their blocks (``freed``) and each admission's prefix
    hits, taken and available (``admitted``)."""

    verb = N_("called")
    loop_advice = N_("When allocate_slots fails, preempt the newest running sequence (or stop)")

    def start_step(self) -> None:
        super().start_step()
        self.freed: List[Sequence] = []
        self.admitted: List[Tuple[Sequence, int, int]] = []

    def get_computed_blocks(self, seq: Sequence) -> int:
        self._count("get_computed_blocks")
        return super().get_computed_blocks(seq)

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> bool:
        self._count("allocate_slots")
        available = None
        if isinstance(seq, Sequence) and not seq.block_table:
            available = ChunkedBlockManager.get_computed_blocks(self, seq)
        done = super().allocate_slots(seq, num_new_tokens, num_cached_blocks)
        if done and available is not None:
            self.admitted.append((seq, int(num_cached_blocks), available))
        return done

    def deallocate(self, seq: Sequence) -> None:
        if isinstance(seq, Sequence) and seq.block_table:
            self.freed.append(seq)
        super().deallocate(seq)


class ChunkedTraceRun(TraceRun):
    """Drive ``scheduler_cls(block_manager, max_num_seqs=..., max_num_batched_tokens=...)`` through a trace (lab
    07's ``TraceRun``, with a chunked block manager, chunk snapshots, and no token sampled for a chunk short of
    the end)."""

    manager_class = GuardedChunkedBlockManager

    def __init__(self, scheduler_cls, spec: ChunkTraceSpec, max_steps: int = 3000):
        super().__init__(scheduler_cls, spec, max_steps)

    def decide(self) -> ChunkSnapshot:
        if self.done:
            raise RuntimeError("the trace has finished")
        if self.step_index >= self.max_steps:
            steps = self.max_steps
            raise AssertionError(_(f"the trace is still running after {steps} steps: is a request stuck?"))
        self._arrivals()
        self._batch = []
        waiting_before = tuple(self._name(s) for s in self.scheduler.waiting)
        running_before = tuple(self._name(s) for s in self.scheduler.running)
        if self.scheduler.is_finished():
            return self._snapshot(True, waiting_before, running_before, [], False)
        batch, is_prefill = self._schedule()
        self._batch = batch
        return self._snapshot(False, waiting_before, running_before, batch, is_prefill)

    def _snapshot(self, idle, waiting_before, running_before, batch, is_prefill) -> ChunkSnapshot:
        m = self.manager
        registered = tuple(sorted(b for h, b in m.hash_to_block_id.items() if m.blocks[b].hash == h))
        return ChunkSnapshot(
            step=self.step_index,
            idle=idle,
            waiting_before=waiting_before,
            running_before=running_before,
            scheduled=tuple((self._name(s), int(s.num_scheduled_tokens)) for s in batch),
            is_prefill=is_prefill,
            waiting=tuple(self._name(s) for s in self.scheduler.waiting),
            running=tuple(self._name(s) for s in self.scheduler.running),
            holders=tuple(
                (self._name(s), tuple(int(b) for b in s.block_table), int(s.num_computed_tokens), len(s))
                for s in self.seqs
                if s.block_table
            ),
            registered=registered,
            free_blocks=m.num_free_blocks,
            freed=() if idle else tuple(self._name(s) for s in m.freed),
            admissions=() if idle else tuple((self._name(s), taken, held) for s, taken, held in m.admitted),
            head=() if idle else self._head(),
        )

    def _head(self) -> Tuple[object, ...]:
        """(name, prefix hits the cache holds, how many of those blocks are free) for the head of waiting."""
        if not self.scheduler.waiting:
            return ()
        seq, m = self.scheduler.waiting[0], self.manager
        if not isinstance(seq, Sequence) or seq.block_table:
            return ()
        hits = ChunkedBlockManager.get_computed_blocks(m, seq)
        revived = sum(1 for b in m._hits(seq, hits) if b not in m.used_block_ids)
        return (self._name(seq), hits, revived)

    def _after_model(self, batch) -> None:
        for seq in batch:
            self.manager.hash_blocks(seq)
            seq.num_computed_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if seq.num_computed_tokens < len(seq):
                continue  # a chunk short of the end: nothing is sampled
            i = self.index[id(seq)]
            seq.append_token(made_up_token(i, len(seq)))
            self.generated[i] += 1
            if self.generated[i] == self.spec.requests[i].max_tokens:
                self.scheduler.finish(seq)

    def audit(self) -> None:
        """Only running sequences hold blocks; ref counts match the tables; nothing leaked."""
        held = Counter()
        running = {id(s) for s in self.scheduler.running}
        for seq in self.seqs:
            if seq.block_table and id(seq) not in running:
                name, table = self._name(seq), seq.block_table
                raise AssertionError(
                    _(
                        f"{name} is not running but still holds blocks {table}: were its blocks given back "
                        "(preempt -> deallocate) when it left running?"
                    )
                )
            held.update(seq.block_table)
        for block in self.manager.blocks:
            if block.ref_count != held.get(block.block_id, 0):
                block_id, count, tables = block.block_id, block.ref_count, held.get(block.block_id, 0)
                raise AssertionError(_(f"block {block_id} has ref_count {count} but {tables} block table(s) list it"))


def make_chunk_trace(
    seed: int,
    num_requests: int,
    *,
    num_blocks: int,
    block_size: int,
    budget: int,
    max_num_seqs: int = 8,
    shared_prefixes: int = 2,
    arrival_spread: int = 8,
) -> ChunkTraceSpec:
    """A seeded random trace: prompts of 1 to 40 tokens, many starting with a shared prefix of whole blocks (so
    they hit the prefix cache), some longer than the budget; arrivals spread over the first steps."""
    import random

    rng = random.Random(check_int("seed", seed))
    prefixes = [[rng.randint(100, 200) for _ in range(block_size * rng.randint(1, 3))] for _ in range(shared_prefixes)]
    room = num_blocks * block_size
    requests = []
    for _request in range(check_positive_int("num_requests", num_requests)):
        suffix = [rng.randint(1, 99) for _ in range(rng.randint(1, 20))]
        prompt = (list(rng.choice(prefixes)) if rng.random() < 0.7 else []) + suffix
        prompt = prompt[:room]
        tokens = min(rng.randint(1, 16), room - len(prompt) + 1)
        requests.append(TraceRequest(tuple(prompt), tokens, rng.randint(0, arrival_spread)))
    return ChunkTraceSpec(tuple(requests), num_blocks, block_size, max_num_seqs, budget)


def describe(spec: ChunkTraceSpec) -> str:
    """The trace in a few lines: each request's prompt length, tokens and arrival."""
    rows = []
    for i, r in enumerate(spec.requests):
        prompt, tokens, step = len(r.prompt), r.max_tokens, r.arrival_step
        rows.append(_(f"r{i}: {prompt}-token prompt, {tokens} tokens, arrives at step {step}"))
    blocks, size, budget, most = spec.num_blocks, spec.block_size, spec.max_num_batched_tokens, spec.max_num_seqs
    rows.append(_(f"pool {blocks} blocks of {size}, budget {budget} tokens, max_num_seqs {most}"))
    return "\n".join(rows)


def replay(scheduler_cls, spec: ChunkTraceSpec) -> List[ChunkSnapshot]:
    """Every snapshot of a run (no checks): for pictures and tables."""
    run = ChunkedTraceRun(scheduler_cls, spec)
    snapshots = []
    while not run.done:
        snapshots.append(run.decide())
        run.complete()
    return snapshots


def format_chunk_snapshot(s: ChunkSnapshot) -> str:
    """``step 3 scheduled [r0+1, r2+5] | waiting [r3] | running [r0, r2] | free blocks 2``."""
    batch = ", ".join(f"{n}+{t}" for n, t in s.scheduled)
    return (
        f"step {s.step} scheduled [{batch}] | waiting [{', '.join(s.waiting)}] | running "
        f"[{', '.join(s.running)}] | free blocks {s.free_blocks}"
    )
