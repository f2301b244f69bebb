"""Replay a scripted workload through a scheduler, without a model: what lab 07's tests compare.

``TraceRun`` plays the engine's part around ``schedule()``: requests arrive at given steps, each step
calls ``schedule()`` once, records a ``Snapshot`` of the decision, then does what the engine does
after the model ran (``hash_blocks``, scheduled tokens become cached, one made-up token is appended,
requests with all their tokens finish). The made-up token depends only on the request and its
length, so a recomputed request produces the same tokens again, like greedy decoding.

The reference's snapshots of the notebook's own traces (the picture and the visible tests of lab 07) are
recorded in ``scheduler_traces.json`` (``tools/record_scheduler_traces.py`` writes it from the reference), so
a class's handout, whose package leaves the reference scheduler out, still compares with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from paged_kv.cache.checks import check_int, check_positive_int
from paged_kv.lab.feedback import CheckFailed, attempt, materialize
from paged_kv.lab.message_layout import field as field_line
from paged_kv.lab.i18n import N_, _
from paged_kv.cache.prefix_cache import BlockManager, Sequence


@dataclass(frozen=True)
class TraceRequest:
    """A request of a trace: its prompt token ids, how many tokens it generates, when it arrives."""

    prompt: Tuple[int, ...]
    max_tokens: int
    arrival_step: int = 0


@dataclass(frozen=True)
class TraceSpec:
    """A pool and a list of requests (named ``r0``, ``r1``, ... in order)."""

    requests: Tuple[TraceRequest, ...]
    num_blocks: int
    block_size: int
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256

    def __post_init__(self) -> None:
        check_positive_int("num_blocks", self.num_blocks)
        check_positive_int("block_size", self.block_size)
        room = min(self.num_blocks * self.block_size, self.max_num_batched_tokens)
        for i, r in enumerate(self.requests):
            longest = len(r.prompt) + check_positive_int("max_tokens", r.max_tokens) - 1
            if not r.prompt or longest > room:
                raise ValueError(
                    f"request r{i} reaches {longest} tokens; a trace request must fit the pool and the "
                    f"token budget alone ({room})"
                )


@dataclass(frozen=True)
class Snapshot:
    """Everything one ``schedule()`` decided, in plain values (names, not objects)."""

    step: int
    kind: str  # "prefill", "decode" or "idle" (nothing arrived yet)
    scheduled: Tuple[Tuple[str, int], ...]  # (name, num_scheduled_tokens) in batch order
    waiting: Tuple[str, ...]
    running: Tuple[str, ...]
    blocks: Tuple[Tuple[str, int], ...]  # (name, blocks held) for every request holding blocks
    cached: Tuple[Tuple[str, int], ...]  # (name, num_cached_tokens) for every scheduled request
    free_blocks: int


class StepCallGuard:
    """A block manager mixin that stops a ``schedule()`` stuck in a loop: at most ``max_calls`` counted calls per
    step (``start_step`` resets the count); ``loop_advice`` says what the scheduler should do instead."""

    verb = N_("asked")
    loop_advice = N_("When a sequence cannot get a block, preempt someone (or the sequence itself) or stop admitting")

    def __init__(self, num_blocks: int, block_size: int, max_calls: int = 10_000):
        super().__init__(num_blocks, block_size)
        self.max_calls = max_calls
        self.calls = 0

    def start_step(self) -> None:
        self.calls = 0

    def _count(self, what: str) -> None:
        self.calls += 1
        if self.calls > self.max_calls:
            verb, most, advice = _(self.verb), self.max_calls, _(self.loop_advice)
            raise AssertionError(
                _(f"schedule() {verb} {what} more than {most} times in one step: a loop that never ends? {advice}")
            )


class GuardedBlockManager(StepCallGuard, BlockManager):
    """A ``BlockManager`` whose ``can_allocate``/``can_append`` calls are counted per step (``StepCallGuard``)."""

    def can_allocate(self, seq: Sequence) -> int:
        self._count("can_allocate")
        return super().can_allocate(seq)

    def can_append(self, seq: Sequence) -> bool:
        self._count("can_append")
        return super().can_append(seq)


def made_up_token(request_index: int, length: int) -> int:
    """The token a request "generates" at a given length (a stand-in for the model's greedy choice)."""
    return 1 + (request_index * 37 + length * 11) % 97


class TraceRun:
    """Drive ``scheduler_cls(block_manager, max_num_seqs=..., max_num_batched_tokens=...)`` through a trace."""

    manager_class = GuardedBlockManager

    def __init__(self, scheduler_cls, spec: TraceSpec, max_steps: int = 2000):
        self.spec = spec
        self.manager = self.manager_class(spec.num_blocks, spec.block_size)
        self.scheduler = scheduler_cls(
            self.manager, max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens
        )
        self.seqs = [Sequence(list(r.prompt), spec.block_size) for r in spec.requests]
        self.names: Dict[int, str] = {id(s): f"r{i}" for i, s in enumerate(self.seqs)}
        self.index: Dict[int, int] = {id(s): i for i, s in enumerate(self.seqs)}
        self.generated = [0] * len(self.seqs)
        self.arrived = [False] * len(self.seqs)
        self.step_index = 0
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.snapshots: List[Snapshot] = []
        self._batch: list = []

    @property
    def done(self) -> bool:
        return all(g == r.max_tokens for g, r in zip(self.generated, self.spec.requests))

    def readable(self, text: str) -> str:
        """``text`` with the trace's sequences called by their trace names (``sequence 29`` -> ``sequence r1``)."""
        names = {str(s.seq_id): self.names[id(s)] for s in self.seqs}
        return re.sub(r"\bsequence (\d+)\b", lambda m: f"sequence {names.get(m.group(1), m.group(1))}", text)

    def _name(self, seq) -> str:
        name = self.names.get(id(seq))
        if name is None:
            raise AssertionError(_(f"schedule() returned or queued {seq!r}, which is not one of the trace's sequences"))
        return name

    def _arrivals(self) -> None:
        for i, request in enumerate(self.spec.requests):
            if not self.arrived[i] and request.arrival_step <= self.step_index:
                self.scheduler.add(self.seqs[i])
                self.arrived[i] = True

    def step(self) -> Snapshot:
        """One whole step: ``decide`` then ``complete``; returns the snapshot."""
        snapshot = self.decide()
        self.complete()
        return snapshot

    def decide(self) -> Snapshot:
        """Arrivals, then one ``schedule()``; returns what it decided (call ``complete`` next)."""
        if self.done:
            raise RuntimeError("the trace has finished")
        if self.step_index >= self.max_steps:
            steps = self.max_steps
            raise AssertionError(_(f"the trace is still running after {steps} steps: is a request stuck?"))
        self._arrivals()
        self._batch = []
        if self.scheduler.is_finished():  # nothing has arrived yet: an idle step
            snapshot = Snapshot(self.step_index, "idle", (), (), (), (), (), self.manager.num_free_blocks)
            self.snapshots.append(snapshot)
            return snapshot
        batch, is_prefill = self._schedule()
        snapshot = self._snapshot(batch, is_prefill)
        self.snapshots.append(snapshot)
        self._batch = batch
        return snapshot

    def _schedule(self) -> Tuple[list, bool]:
        """One ``schedule()`` call, its manager calls counted, its result's shape checked."""
        self.manager.start_step()
        result = self.scheduler.schedule()
        if not isinstance(result, tuple) or len(result) != 2:
            raise AssertionError(_(f"schedule() must return a tuple (scheduled, is_prefill), got {result!r}"))
        batch, is_prefill = result
        if not isinstance(batch, list) or not isinstance(is_prefill, bool):
            first, second = type(batch).__name__, type(is_prefill).__name__
            raise AssertionError(_(f"schedule() must return (list of sequences, bool), got ({first}, {second})"))
        return batch, is_prefill

    def complete(self) -> None:
        """The engine's part after the model ran on the decided batch; moves to the next step."""
        self._after_model(self._batch)
        self._batch = []
        self.step_index += 1

    def _snapshot(self, batch, is_prefill: bool) -> Snapshot:
        scheduled = tuple((self._name(s), int(s.num_scheduled_tokens)) for s in batch)
        holders = [s for s in self.seqs if s.block_table]
        return Snapshot(
            step=self.step_index,
            kind="prefill" if is_prefill else "decode",
            scheduled=scheduled,
            waiting=tuple(self._name(s) for s in self.scheduler.waiting),
            running=tuple(self._name(s) for s in self.scheduler.running),
            blocks=tuple((self._name(s), len(s.block_table)) for s in holders),
            cached=tuple((self._name(s), int(s.num_cached_tokens)) for s in batch),
            free_blocks=self.manager.num_free_blocks,
        )

    def _after_model(self, batch) -> None:
        for seq in batch:
            self.manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            i = self.index[id(seq)]
            seq.append_token(made_up_token(i, len(seq)))
            self.generated[i] += 1
            if self.generated[i] == self.spec.requests[i].max_tokens:
                self.scheduler.finish(seq)

    def audit(self) -> None:
        """The pool agrees with the queues: only running sequences hold blocks, ref counts match."""
        held = Counter()
        running = {id(s) for s in self.scheduler.running}
        for seq in self.seqs:
            if seq.block_table and id(seq) not in running:
                name, table = self._name(seq), seq.block_table
                raise AssertionError(
                    _(
                        f"{name} is not running but still holds blocks {table}: "
                        "were its blocks given back (deallocate) when it left the running queue?"
                    )
                )
            held.update(seq.block_table)
        for block in self.manager.blocks:
            if block.ref_count != held.get(block.block_id, 0):
                block_id, count, tables = block.block_id, block.ref_count, held.get(block.block_id, 0)
                raise AssertionError(_(f"block {block_id} has ref_count {count} but {tables} block table(s) list it"))
        in_use = self.manager.num_blocks - self.manager.num_free_blocks
        if in_use != len(held):
            listed = len(held)
            raise AssertionError(_(f"{in_use} blocks are marked in use but the block tables hold {listed}"))


def make_trace(
    seed: int,
    num_requests: int,
    *,
    num_blocks: int,
    block_size: int,
    shared_prefixes: int = 2,
    prefix_blocks: Tuple[int, int] = (1, 3),
    suffix_len: Tuple[int, int] = (1, 12),
    max_tokens: Tuple[int, int] = (1, 24),
    arrival_spread: int = 6,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 256,
) -> TraceSpec:
    """A seeded random trace: prompts start with one of ``shared_prefixes`` common prefixes (whole
    blocks, so they can hit the prefix cache) followed by a private suffix; arrivals are spread over
    the first ``arrival_spread`` steps. Every request fits the pool on its own."""
    import random

    rng = random.Random(check_int("seed", seed))
    prefixes = [
        [rng.randint(100, 200) for _ in range(block_size * rng.randint(*prefix_blocks))] for _ in range(shared_prefixes)
    ]
    requests = []
    for _request in range(check_positive_int("num_requests", num_requests)):
        prompt = list(rng.choice(prefixes)) + [rng.randint(1, 99) for _token in range(rng.randint(*suffix_len))]
        room = min(num_blocks * block_size, max_num_batched_tokens)  # every request must fit alone
        prompt = prompt[:room]
        tokens = min(rng.randint(*max_tokens), room - len(prompt) + 1)
        requests.append(TraceRequest(tuple(prompt), tokens, rng.randint(0, arrival_spread)))
    return TraceSpec(tuple(requests), num_blocks, block_size, max_num_seqs, max_num_batched_tokens)


def format_snapshot(s: Snapshot) -> str:
    """One line for a human: ``step 3 decode [r0, r1] | waiting [r2] | running [r0, r1] | free 2``."""
    batch = ", ".join(f"{n}+{t}" for n, t in s.scheduled)
    return (
        f"step {s.step} {s.kind:7s} scheduled [{batch}] | waiting [{', '.join(s.waiting)}] | "
        f"running [{', '.join(s.running)}] | free blocks {s.free_blocks}"
    )


def replay(scheduler_cls, spec: TraceSpec, max_steps: int = 2000) -> List[Snapshot]:
    """Run a whole trace; return its snapshots."""
    run = TraceRun(scheduler_cls, spec, max_steps)
    while not run.done:
        run.step()
    return run.snapshots


# ---- the reference's snapshots, recorded -----------------------------------------------------------------
RECORDED = Path(__file__).with_name("scheduler_traces.json")


def spec_key(spec: TraceSpec) -> str:
    """A stable name for a trace: the SHA-256 of its fields as canonical JSON (16 hex digits)."""
    text = json.dumps(asdict(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def snapshot_to_json(s: Snapshot) -> list:
    return [s.step, s.kind, s.scheduled, s.waiting, s.running, s.blocks, s.cached, s.free_blocks]


def _pairs(values) -> Tuple[Tuple[str, int], ...]:
    return tuple((str(name), int(count)) for name, count in values)


def snapshot_from_json(row: list) -> Snapshot:
    step, kind, scheduled, waiting, running, blocks, cached, free_blocks = row
    return Snapshot(
        int(step),
        str(kind),
        _pairs(scheduled),
        tuple(waiting),
        tuple(running),
        _pairs(blocks),
        _pairs(cached),
        int(free_blocks),
    )


def recorded_snapshots(spec: TraceSpec, path: Path = RECORDED) -> Optional[List[Snapshot]]:
    """The reference's snapshots of ``spec`` as recorded, or None when the trace is not recorded."""
    if not path.exists():
        return None
    entry = json.loads(path.read_text()).get(spec_key(spec))
    return None if entry is None else [snapshot_from_json(row) for row in entry["snapshots"]]


def reference_snapshots(spec: TraceSpec) -> List[Snapshot]:
    """What the reference scheduler decides on ``spec``: recorded for the notebook's traces, else replayed."""
    recorded = recorded_snapshots(spec)
    if recorded is not None:
        return recorded
    from paged_kv.engine.scheduler import Scheduler as reference_cls

    return replay(reference_cls, spec)


class RecordedRun:
    """The reference's side of ``compare_with_reference`` read back from recorded snapshots (as ``TraceRun``:
    ``decide``, ``complete``, ``done``, ``step_index``)."""

    def __init__(self, snapshots: List[Snapshot]):
        self.snapshots = list(snapshots)
        self.step_index = 0

    @property
    def done(self) -> bool:
        return self.step_index == len(self.snapshots)

    def decide(self) -> Snapshot:
        return self.snapshots[self.step_index]

    def complete(self) -> None:
        self.step_index += 1


def _admitted_out_of_turn(ref: Snapshot, got: Snapshot) -> bool:
    """The student admitted a sequence the reference left waiting, but not the head the reference stopped at."""
    admitted = {n for n, _ in got.scheduled}
    return bool(ref.waiting) and ref.waiting[0] not in admitted and bool(admitted & set(ref.waiting[1:]))


def _hint(field: str, ref: Snapshot, got: Snapshot) -> str:
    """The hint of a step where ``field`` differs (in the notebook's language)."""
    return _(_hint_text(field, ref, got))


def _hint_text(field: str, ref: Snapshot, got: Snapshot) -> str:
    ref_names, got_names = [n for n, _t in ref.scheduled], [n for n, _t in got.scheduled]
    if field == "kind" and got.kind == "prefill":
        admitted, head = ", ".join(got_names), ref.waiting[0] if ref.waiting else "-"
        return N_(
            f"you admitted {admitted} but nothing fits yet: the head of waiting ({head}) does not fit, and first "
            "come, first served stops there; never admit one from behind it"
        )
    if field == "kind":
        names = ", ".join(ref_names)
        return N_(
            f"the head of waiting fits ({names} should be admitted: can_allocate != -1 and the "
            "uncached tokens fit the budget); a step that admits anything is a prefill step, with no decode"
        )
    if field == "scheduled" and got.kind == "prefill":
        if _admitted_out_of_turn(ref, got):
            return N_(
                "first come, first served: stop at the first waiting sequence that does not fit; never admit one "
                "from behind it"
            )
        if len(got_names) > len(ref_names):
            return N_(
                "admit only while can_allocate(head) != -1, its uncached tokens fit the token budget "
                "(len(seq) - hits * block_size), and fewer than max_num_seqs are scheduled"
            )
        if len(got_names) < len(ref_names):
            return N_(
                "keep admitting from the head while the next one fits: the budget counts only uncached tokens "
                "and shrinks by what each admitted sequence computes"
            )
        return N_("a prefill's num_scheduled_tokens is len(seq) - seq.num_cached_tokens, after allocate")
    if field == "scheduled":
        if got_names == ref_names:
            return N_("decode sets num_scheduled_tokens = 1 for every scheduled sequence")
        if got.free_blocks < ref.free_blocks and len(got.waiting) >= len(ref.waiting):
            free, wanted = got.free_blocks, ref.free_blocks
            return N_(
                f"after this step {free} blocks are free instead of {wanted}: does preempt() give "
                "the sequence's blocks back with deallocate(seq)?"
            )
        return N_(
            "decode takes running sequences from the head (oldest first), at most max_num_seqs; when one "
            "cannot get a block, preempt the NEWEST running sequence (the tail), or itself if none is left"
        )
    if field == "waiting":
        return N_("a preempted sequence goes back to the HEAD of waiting (appendleft), ahead of new arrivals")
    if field == "running":
        return N_(
            "keep running in admission order: admitted sequences join the tail; after a decode step the "
            "scheduled ones go back to the head in their order, ahead of those not scheduled"
        )
    if field in ("blocks", "free_blocks"):
        return N_(
            "prefill: allocate(seq, hits); decode: may_append(seq) once can_append(seq) is true; "
            "preempt: deallocate(seq), so its blocks return to the pool"
        )
    return N_("allocate(seq, n) with the n that can_allocate returned sets num_cached_tokens (prefix-cache hits)")


FIELDS = ("kind", "scheduled", "waiting", "running", "blocks", "free_blocks", "cached")
_WHAT = {
    "kind": N_("kind of step"),
    "scheduled": N_("scheduled (name+tokens)"),
    "waiting": N_("waiting queue"),
    "running": N_("running queue"),
    "blocks": N_("blocks held (name, count)"),
    "free_blocks": N_("free blocks"),
    "cached": N_("num_cached_tokens of the scheduled"),
}


def compare_with_reference(scheduler_cls, spec: TraceSpec, case: str, reference_cls=None, run_cls=None) -> int:
    """Replay ``spec`` with ``scheduler_cls`` and with the reference side by side; raise ``AssertionError``
    at the first step where they differ (what, expected, got, a hint). Returns the number of steps.

    ``run_cls`` makes the student's side of the replay (default ``TraceRun``; a grader passes the grading
    kernel's, so that the student's scheduler runs there and only its snapshots come back). With no
    ``reference_cls``, a recorded trace (``scheduler_traces.json``) is compared with its recording."""
    recorded = recorded_snapshots(spec) if reference_cls is None else None
    if recorded is not None:
        ref_run = RecordedRun(recorded)
    else:
        if reference_cls is None:
            from paged_kv.engine.scheduler import Scheduler as reference_cls
        ref_run = TraceRun(reference_cls, spec)
    run = (run_cls or TraceRun)(scheduler_cls, spec)
    previous = None
    case = _(case)
    while not ref_run.done:
        expected = ref_run.decide()
        step = expected.step
        where = _(f"{case}, step {step}")
        before = "\n" + field_line("before:", format_snapshot(previous)) if previous else ""
        got = materialize(_guarded(where, run.decide, before, _(_DECIDE_HINT), run.readable))
        if type(got) is not Snapshot:
            raise CheckFailed(where, _("schedule()'s step could not be read back"), got=got)
        for field in FIELDS:
            want, have = getattr(expected, field), getattr(got, field)
            if want != have:
                what = _(_WHAT[field])
                raise CheckFailed(
                    where,
                    _(f"{what} differs") + before,
                    expected=_Shown(_pretty(field, want)),
                    got=_Shown(_pretty(field, have)),
                    hint=_hint(field, expected, got),
                )
        _guarded(where, run.audit, before, _(_AUDIT_HINT), run.readable)
        ref_run.complete()
        _guarded(where, run.complete, before, _(_RECORD_HINT), run.readable)
        previous = expected
    if not run.done:
        steps = ref_run.step_index
        raise CheckFailed(case, _(f"the reference finished every request after {steps} steps, yours did not"))
    return ref_run.step_index


class _Shown(str):
    """A value shown as it is (no quotes) on the expected/got lines of a failed check."""

    def __repr__(self) -> str:
        return str(self)


def _guarded(where: str, action, before: str, hint: str, readable=str):
    """Run the student's side of a step; any failure becomes one ``CheckFailed`` naming the step (and the
    trace's sequences by their trace names, through ``readable``)."""
    try:
        return attempt(where, action, hint=hint)
    except CheckFailed as failed:
        raise CheckFailed(failed.case, readable(failed.problem) + before, hint=failed.hint or hint) from None


_DECIDE_HINT = N_(
    "a schedule() that follows the rules never makes a BlockManager call fail: ask can_allocate before "
    "allocate, can_append before may_append, and preempt when can_append is false"
)
_AUDIT_HINT = N_(
    "only running sequences hold blocks: preempt(seq) must give them back with deallocate(seq), and a "
    "sequence taken off running must end up in waiting or scheduled again"
)
_RECORD_HINT = N_(
    "every scheduled sequence needs a block for each of its tokens: allocate(seq, hits) before a prefill, "
    "may_append(seq) before a decode, and num_scheduled_tokens set for each"
)


def _pretty(field: str, value) -> str:
    if field == "scheduled":
        return " ".join(f"{n}+{t}" for n, t in value) or _("(nothing)")
    if field in ("blocks", "cached"):
        return " ".join(f"{n}:{t}" for n, t in value) or _("(none)")
    if field in ("waiting", "running"):
        return "[" + ", ".join(value) + "]"
    return str(value)
