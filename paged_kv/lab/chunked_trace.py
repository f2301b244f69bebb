"""Replay a scripted workload through a chunked-prefill scheduler, without a model, and check lab 09's rules.

``ChunkedTraceRun`` plays the engine around ``schedule()`` (it runs where the scheduler lives): arrivals, one
``schedule()`` per step, a ``ChunkSnapshot`` of plain values, then the engine's part after the model
(``hash_blocks``, the scheduled tokens become computed, a made-up token for each sequence whose chunk reached
its end, finished requests give their blocks back).

``check_rules`` reads only the snapshots (so it can run in the trusted grading process) and checks what the
rules fix, never a particular order among correct choices: the token budget, blocks for the scheduled tokens
only, running before waiting, first come first served, newest-first preemption that is all or nothing, no
admission in a step that preempted, budget left unused only when nothing more could run, only fully computed
blocks in the prefix cache, and, with a simulated KV cache that remembers which token each slot holds, that
every sequence reads back exactly the keys of its own prefix (a wrong prefix hit reads a slot nobody wrote).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from paged_kv.cache.checks import check_int, check_positive_int
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.engine.chunked import ChunkedBlockManager
from paged_kv.lab.feedback import CheckFailed, attempt, materialize
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
    (name, block table, computed tokens, length), the blocks the prefix cache names, the free count."""

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


class GuardedChunkedBlockManager(StepCallGuard, ChunkedBlockManager):
    """A ``ChunkedBlockManager`` whose ``get_computed_blocks``/``allocate_slots`` calls are counted per step."""

    verb = "called"
    loop_advice = "When allocate_slots fails, preempt the newest running sequence (or stop)"

    def get_computed_blocks(self, seq: Sequence) -> int:
        self._count("get_computed_blocks")
        return super().get_computed_blocks(seq)

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> bool:
        self._count("allocate_slots")
        return super().allocate_slots(seq, num_new_tokens, num_cached_blocks)


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
            raise AssertionError(f"the trace is still running after {self.max_steps} steps: is a request stuck?")
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
        )

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
                raise AssertionError(
                    f"{self._name(seq)} is not running but still holds blocks {seq.block_table}: "
                    "were its blocks given back (preempt -> deallocate) when it left running?"
                )
            held.update(seq.block_table)
        for block in self.manager.blocks:
            if block.ref_count != held.get(block.block_id, 0):
                raise AssertionError(
                    f"block {block.block_id} has ref_count {block.ref_count} but "
                    f"{held.get(block.block_id, 0)} block table(s) list it"
                )


# ---- the rules, read from the snapshots --------------------------------------------------------------------
HINTS = {
    "budget": "a chunk that overruns the budget: each sequence gets min(its missing tokens, the budget LEFT), and "
    "the budget shrinks by every scheduled token",
    "blocks": "blocks for this step's tokens only: allocate_slots(seq, n) for the n tokens you schedule (never the "
    "whole prompt at admission: allocate(seq, ...) gives a sequence all its blocks)",
    "registered": "a block enters the prefix cache only once all its tokens are computed: the engine registers "
    "after the step (hash_blocks); schedule() never registers blocks itself",
    "running_first": "running sequences come first: every one gets its tokens (a decode, or the next chunk) before "
    "any waiting sequence is admitted; otherwise prefill starves the decodes",
    "fcfs": "admit from the HEAD of waiting, in order, and stop at the first that does not get its blocks",
    "preempt": "when allocate_slots fails, preempt the NEWEST running sequence (running.pop()), to the HEAD of "
    "waiting; if it was the sequence itself, stop the running pass; admit nobody in that step",
    "unused": "budget was left unused although more could run: a prefix hit costs no budget (only len(seq) - hits * "
    "block_size tokens count), and a chunk is cut only by the budget left",
    "kv": "a sequence read keys its prefix never wrote: a prefix hit on a block whose tokens are not all computed, "
    "or a block written by two sequences",
    "shape": "schedule() returns (list of the scheduled sequences, any prompt chunk among them), each with "
    "1 <= num_scheduled_tokens <= len(seq) - num_computed_tokens, each scheduled once",
}


def _fail(where: str, problem: str, rule: str, expected=None, got=None):
    shown = {}
    if expected is not None:
        shown["expected"] = _Shown(expected)
    if got is not None:
        shown["got"] = _Shown(got)
    raise CheckFailed(where, problem, hint=HINTS[rule], **shown)


class _Shown(str):
    def __repr__(self) -> str:
        return str(self)


class RuleChecker:
    """Checks each snapshot of a run against the rules, with a simulated KV cache (trusted side: plain data)."""

    def __init__(self, spec: ChunkTraceSpec, case: str):
        self.spec, self.case = spec, case
        self.slots: Dict[Tuple[int, int], Tuple[int, ...]] = {}  # (block, offset) -> the prefix it holds the key of
        self.tokens = [list(r.prompt) for r in spec.requests]
        self.generated = [0] * len(spec.requests)

    def _index(self, name: str) -> int:
        return int(name[1:])

    def step(self, s: ChunkSnapshot) -> None:
        where = f"{self.case}, step {s.step}"
        if s.idle:
            return
        budget, size = self.spec.max_num_batched_tokens, self.spec.block_size
        holders = {name: (table, computed, length) for name, table, computed, length in s.holders}
        sched = dict(s.scheduled)
        line = " ".join(f"{n}+{t}" for n, t in s.scheduled) or "(nothing)"
        if len(sched) != len(s.scheduled):
            _fail(where, "a sequence is scheduled twice", "shape", got=line)
        if not s.scheduled:
            _fail(where, "nothing was scheduled although sequences wait or run", "shape")
        for name, n in s.scheduled:
            if name not in s.running:
                _fail(where, f"{name} is scheduled but not in running", "shape")
            table, computed, length = holders.get(name, ((), 0, 0))
            if type(n) is not int or n < 1 or computed + n > len(self.tokens[self._index(name)]):
                _fail(
                    where,
                    f"{name}: {n} tokens scheduled after {computed} computed, of {len(self.tokens[self._index(name)])}",
                    "shape",
                )
        total = sum(sched.values())
        if total > budget:
            _fail(
                where,
                f"{total} tokens scheduled, more than the budget of {budget}",
                "budget",
                expected=f"at most {budget}",
                got=line,
            )
        if len(s.running) > self.spec.max_num_seqs:
            _fail(where, f"{len(s.running)} sequences run, more than max_num_seqs={self.spec.max_num_seqs}", "fcfs")
        # blocks: exactly what computed + scheduled tokens need; only running sequences hold any
        for name, (table, computed, length) in holders.items():
            if name not in s.running:
                _fail(where, f"{name} holds blocks {list(table)} but is not running", "preempt")
            need = -(-(computed + sched.get(name, 0)) // size)
            if len(table) != need:
                _fail(
                    where,
                    f"{name} holds {len(table)} blocks for {computed} computed + {sched.get(name, 0)} "
                    f"scheduled tokens (blocks of {size})",
                    "blocks",
                    expected=f"{need} blocks",
                    got=f"{len(table)} blocks",
                )
        for name in s.running:
            if name not in holders:
                _fail(where, f"{name} is running but holds no blocks", "blocks")
        # registration: a block the prefix cache names is fully computed wherever it is held
        registered = set(s.registered)
        for name, (table, computed, length) in holders.items():
            for j, block in enumerate(table):
                if block in registered and (j + 1) * size > computed:
                    _fail(
                        where,
                        f"block {block} ({name}'s block {j}) is in the prefix cache but only "
                        f"{max(computed - j * size, 0)} of its {size} tokens are computed",
                        "registered",
                    )
        # queues: preemption, running first, first come first served
        preempted = [n for n in s.running_before if n not in s.running]
        admitted = [n for n, _ in s.scheduled if n not in s.running_before]
        if preempted:
            k = len(preempted)
            if list(s.running_before[-k:]) != preempted:
                _fail(
                    where,
                    f"preempted {preempted}, not the newest of running {list(s.running_before)}",
                    "preempt",
                    expected=str(list(s.running_before[-k:])),
                    got=str(preempted),
                )
            if list(s.waiting[:k]) != preempted:
                _fail(
                    where,
                    "the preempted sequences are not at the head of waiting, newest last",
                    "preempt",
                    expected=str(preempted),
                    got=str(list(s.waiting[:k])),
                )
            if admitted:
                _fail(where, f"admitted {admitted} in a step that preempted {preempted}", "preempt")
        if admitted:
            skipped = [n for n in s.running_before if n not in sched and n not in preempted]
            if skipped:
                _fail(where, f"admitted {admitted} while running {skipped} got no token", "running_first")
            if admitted != list(s.waiting_before[: len(admitted)]):
                _fail(
                    where,
                    f"admitted {admitted}, not the head of waiting {list(s.waiting_before)}",
                    "fcfs",
                    expected=str(list(s.waiting_before[: len(admitted)])),
                    got=str(admitted),
                )
        if total < budget and not preempted:
            for name, n in s.scheduled:
                table, computed, length = holders[name]
                if computed + n < len(self.tokens[self._index(name)]):
                    _fail(
                        where,
                        f"{name} got {n} tokens, short of its end, while {budget - total} of the budget were left",
                        "unused",
                    )
            for name in s.running_before:
                if name not in sched:
                    _fail(
                        where,
                        f"running {name} got no token although {budget - total} of the budget was left",
                        "running_first",
                    )
            if s.waiting and len(s.running) < self.spec.max_num_seqs:
                head = self.tokens[self._index(s.waiting[0])]
                if s.free_blocks >= -(-len(head) // size):
                    _fail(
                        where,
                        f"{s.waiting[0]} waits although {budget - total} tokens of the budget and "
                        f"{s.free_blocks} free blocks were left",
                        "unused",
                    )
        # the simulated KV cache: this step writes every scheduled token's key, then every query reads its prefix
        for name, n in s.scheduled:
            i = self._index(name)
            table, computed, length = holders[name]
            for p in range(computed, computed + n):
                self.slots[(table[p // size], p % size)] = tuple(self.tokens[i][: p + 1])
        for name, n in s.scheduled:
            i = self._index(name)
            table, computed, length = holders[name]
            for p in range(computed + n):
                if self.slots.get((table[p // size], p % size)) != tuple(self.tokens[i][: p + 1]):
                    _fail(
                        where,
                        f"{name} reads the key of its position {p} from block {table[p // size]}, which "
                        "holds another token's (or none)",
                        "kv",
                    )

    def complete(self, s: ChunkSnapshot) -> None:
        """Advance the trusted copy of each request's tokens as the engine does after the step."""
        holders = {name: (computed, length) for name, _, computed, length in s.holders}
        for name, n in s.scheduled:
            i = self._index(name)
            computed, _ = holders[name]
            if computed + n == len(self.tokens[i]):
                self.tokens[i].append(made_up_token(i, len(self.tokens[i])))
                self.generated[i] += 1


def check_rules(scheduler_cls, spec: ChunkTraceSpec, case: str, run_cls=None, max_steps: int = 3000) -> int:
    """Replay ``spec`` with ``scheduler_cls``; raise ``CheckFailed`` at the first step that breaks a rule, or when
    the run does not finish. Returns the number of steps. ``run_cls`` makes the student's side of the replay."""
    run = (run_cls or ChunkedTraceRun)(scheduler_cls, spec, max_steps)
    checker = RuleChecker(spec, case)
    while not materialize(run.done):
        got = materialize(_guarded(case, run.decide, run.readable))
        if type(got) is not ChunkSnapshot:
            raise CheckFailed(case, "schedule()'s step could not be read back", got=got)
        checker.step(got)
        _guarded(f"{case}, step {got.step}", run.audit, run.readable)
        _guarded(f"{case}, step {got.step}", run.complete, run.readable)
        checker.complete(got)
    wanted = [r.max_tokens for r in spec.requests]
    if checker.generated != wanted:
        raise CheckFailed(case, "the run ended with requests unserved", expected=wanted, got=checker.generated)
    return materialize(run.step_index)


def _guarded(where: str, action, readable=str):
    try:
        return attempt(where, action, hint=_HINT)
    except CheckFailed as failed:
        raise CheckFailed(failed.case, readable(failed.problem), hint=failed.hint or _HINT) from None


_HINT = (
    "ask allocate_slots before you schedule a sequence and act on its answer (False: preempt or stop); "
    "take a sequence off running only to preempt it, and set num_scheduled_tokens for every one you return"
)


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
    for _ in range(check_positive_int("num_requests", num_requests)):
        suffix = [rng.randint(1, 99) for _ in range(rng.randint(1, 20))]
        prompt = (list(rng.choice(prefixes)) if rng.random() < 0.7 else []) + suffix
        prompt = prompt[:room]
        tokens = min(rng.randint(1, 16), room - len(prompt) + 1)
        requests.append(TraceRequest(tuple(prompt), tokens, rng.randint(0, arrival_spread)))
    return ChunkTraceSpec(tuple(requests), num_blocks, block_size, max_num_seqs, budget)


def describe(spec: ChunkTraceSpec) -> str:
    """The trace in a few lines: each request's prompt length, tokens and arrival."""
    rows = [
        f"r{i}: {len(r.prompt)}-token prompt, {r.max_tokens} tokens, arrives at step {r.arrival_step}"
        for i, r in enumerate(spec.requests)
    ]
    return "\n".join(
        rows
        + [
            f"pool {spec.num_blocks} blocks of {spec.block_size}, budget "
            f"{spec.max_num_batched_tokens} tokens, max_num_seqs {spec.max_num_seqs}"
        ]
    )


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


def first_failure(scheduler_cls, spec: ChunkTraceSpec, case: str) -> Optional[str]:
    """The message of the first broken rule, or None (for tests and the instructor's tools)."""
    try:
        check_rules(scheduler_cls, spec, case)
    except CheckFailed as failed:
        return str(failed)
    return None
