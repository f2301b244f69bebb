"""The reference scheduler's policy (FCFS admission, decode growth, newest-first preemption by recompute)
and the trace harness that lab 07 grades with."""

import functools
import re

import pytest

from paged_kv.cache.prefix_cache import BlockManager, Sequence
from paged_kv.engine.scheduler import MaxReservationScheduler, Scheduler, SchedulerBase
from paged_kv.lab.scheduler_trace import (
    Snapshot,
    TraceRequest,
    TraceRun,
    TraceSpec,
    format_snapshot,
    make_trace,
    replay,
)


def scheduler(num_blocks, block_size=4, **kwargs):
    return Scheduler(BlockManager(num_blocks, block_size), **kwargs)


def grow(sched, seqs, token=7):
    """What the engine does after a step: the scheduled tokens are cached, one token is appended."""
    for seq in seqs:
        sched.block_manager.hash_blocks(seq)
        seq.num_cached_tokens += seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        seq.append_token(token)


def test_prefill_admits_from_the_head_and_stops_at_the_first_that_does_not_fit():
    sched = scheduler(num_blocks=5)
    big, small = Sequence(list(range(1, 22)), 4), Sequence([1, 2], 4)  # 6 blocks > 5 free... after the first
    first = Sequence(list(range(30, 38)), 4)  # 2 blocks
    sched.add(first)
    batch, is_prefill = sched.schedule()
    assert is_prefill and batch == [first] and first.num_scheduled_tokens == 8
    grow(sched, batch)
    sched.add(Sequence(list(range(1, 17)), 4))  # 4 blocks: does not fit in the 3 left
    sched.add(small)  # would fit, but must wait its turn (FCFS)
    batch, is_prefill = sched.schedule()
    assert not is_prefill and batch == [first]
    assert [len(s) for s in sched.waiting] == [16, 2]
    assert big.num_blocks == 6


def test_prefill_respects_the_token_budget_and_counts_only_uncached_tokens():
    sched = scheduler(num_blocks=20, max_num_batched_tokens=16)
    a, b = Sequence(list(range(1, 13)), 4), Sequence(list(range(1, 13)), 4)
    sched.add(a)
    sched.add(b)
    batch, _ = sched.schedule()
    assert batch == [a]  # 12 + 12 > 16: b waits
    grow(sched, batch)
    batch, is_prefill = sched.schedule()  # b now hits a's two full blocks: 4 tokens to compute
    assert is_prefill and batch == [b] and b.num_cached_tokens == 8 and b.num_scheduled_tokens == 4


def test_max_num_seqs_caps_prefill_and_decode():
    sched = scheduler(num_blocks=20, max_num_seqs=2)
    seqs = [Sequence([i + 1, i + 2], 4) for i in range(3)]
    for s in seqs:
        sched.add(s)
    batch, _ = sched.schedule()
    assert batch == seqs[:2]
    grow(sched, batch)
    batch, _ = sched.schedule()
    assert batch == seqs[2:]
    grow(sched, batch)
    batch, is_prefill = sched.schedule()
    assert not is_prefill and batch == seqs[:2] and list(sched.running) == seqs


def test_decode_preempts_the_newest_and_puts_it_at_the_head_of_waiting():
    sched = scheduler(num_blocks=3)
    old, new = Sequence([1, 2, 3, 4], 4), Sequence([5, 6, 7, 8], 4)
    sched.add(old)
    sched.add(new)
    batch, _ = sched.schedule()
    grow(sched, batch)  # both now need a second block; one is free
    batch, is_prefill = sched.schedule()
    assert not is_prefill and batch == [old]
    assert list(sched.waiting) == [new] and list(sched.running) == [old]
    assert new.block_table == [] and new.num_cached_tokens == 0 and len(old.block_table) == 2
    assert sched.block_manager.num_free_blocks == 1


def test_a_sequence_preempts_itself_when_no_other_is_left_to_preempt():
    sched = scheduler(num_blocks=3)
    a, b = Sequence([1, 2, 3], 4), Sequence([4, 5, 6, 7, 8, 9, 10, 11], 4)
    sched.add(a)
    sched.add(b)
    batch, _ = sched.schedule()  # a: 1 block, b: 2 blocks, pool full
    grow(sched, batch)  # a: 4 tokens (fits), b: 9 tokens (needs a third block)
    batch, _ = sched.schedule()  # a is scheduled, then b finds no one behind it to preempt
    assert batch == [a] and list(sched.waiting) == [b] and not b.block_table


def test_add_refuses_what_could_never_run():
    sched = scheduler(num_blocks=2, max_num_batched_tokens=6)
    with pytest.raises(ValueError, match="whole pool"):
        sched.add(Sequence(list(range(1, 10)), 4))
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        sched.add(Sequence(list(range(1, 8)), 4))
    with pytest.raises(ValueError, match="block_size"):
        sched.add(Sequence([1], 8))
    seq = Sequence([1], 4)
    sched.add(seq)
    with pytest.raises(ValueError, match="already queued"):
        sched.add(seq)
    with pytest.raises(ValueError, match="not running"):
        sched.finish(seq)
    with pytest.raises(TypeError):
        Scheduler("pool")


def test_the_base_class_leaves_the_decision_to_subclasses():
    base = SchedulerBase(BlockManager(4, 4))
    with pytest.raises(NotImplementedError):
        base.schedule()
    with pytest.raises(NotImplementedError):
        base.preempt(Sequence([1], 4))


def test_random_traces_keep_the_pool_consistent_and_finish_every_request():
    for seed in range(40):
        spec = make_trace(seed, 12, num_blocks=10, block_size=4, max_num_seqs=4, max_num_batched_tokens=40)
        run = TraceRun(Scheduler, spec)
        while not run.done:
            run.step()
            run.audit()
        assert run.manager.num_free_blocks == spec.num_blocks
        assert all(s.kind in ("prefill", "decode", "idle") for s in run.snapshots)


def test_traces_produce_prefix_hits_and_preemptions():
    spec = make_trace(1, 16, num_blocks=8, block_size=4, max_num_seqs=6, max_num_batched_tokens=32)
    snapshots = replay(Scheduler, spec)
    assert any(cached > 0 for s in snapshots if s.kind == "prefill" for _, cached in s.cached)
    readmitted = [name for s in snapshots if s.kind == "prefill" for name, _ in s.scheduled]
    assert len(readmitted) > len(spec.requests), "expected at least one preempted request to be admitted again"


def test_trace_spec_rejects_requests_that_cannot_fit_alone():
    with pytest.raises(ValueError, match="fit the pool"):
        TraceSpec((TraceRequest(tuple(range(1, 10)), 4),), num_blocks=2, block_size=4)


def test_trace_run_reports_a_scheduler_that_returns_the_wrong_type():
    class Wrong(Scheduler):
        def schedule(self):
            return list(super().schedule())

    run = TraceRun(Wrong, TraceSpec((TraceRequest((1, 2), 2),), num_blocks=2, block_size=4))
    with pytest.raises(AssertionError, match="must return a tuple"):
        run.step()


def test_a_block_manager_error_in_a_trace_names_the_sequence_as_the_trace_does():
    """``OOM: sequence 4711 ...`` would name a global id; the failure block calls every sequence r0, r1, ..."""
    from paged_kv.lab.feedback import CheckFailed
    from paged_kv.lab.scheduler_trace import compare_with_reference

    class NeverChecksForRoom(Scheduler):
        def schedule(self):
            if self.waiting:
                return super().schedule()
            for seq in self.running:
                self.block_manager.may_append(seq)  # no can_append, no preemption
                seq.num_scheduled_tokens = 1
            return list(self.running), False

    spec = TraceSpec((TraceRequest((1, 2), 5), TraceRequest((3, 4), 5)), num_blocks=7, block_size=1)
    with pytest.raises(CheckFailed) as caught:
        compare_with_reference(NeverChecksForRoom, spec, "block_size=1")
    problem = caught.value.problem
    assert re.search(r"raised RuntimeError: OOM: sequence r[01] needs", problem), problem
    assert not re.search(r"sequence \d", problem), problem


def test_snapshot_formatting_is_one_readable_line():
    s = Snapshot(3, "decode", (("r0", 1), ("r1", 1)), ("r2",), ("r0", "r1"), (("r0", 2),), (("r0", 5),), 2)
    assert format_snapshot(s) == (
        "step 3 decode  scheduled [r0+1, r1+1] | waiting [r2] | running [r0, r1] | free blocks 2"
    )


def test_max_reservation_scheduler_runs_at_most_what_the_reservations_allow():
    spec = make_trace(2, 12, num_blocks=16, block_size=4, max_num_seqs=8, max_num_batched_tokens=20)
    factory = functools.partial(MaxReservationScheduler, max_model_len=20)  # 5 blocks each: 3 at once
    run = TraceRun(factory, spec)
    while not run.done:
        snapshot = run.step()
        assert len(snapshot.running) <= 3
    with pytest.raises(ValueError, match="needs 5 blocks"):
        MaxReservationScheduler(BlockManager(4, 4), max_model_len=20)


def test_the_lab_starter_has_the_given_code_and_stubs_for_schedule_and_preempt():
    from paged_kv.lab.feedback import TodoNotWritten
    from paged_kv.lab.starters import SchedulerWithoutSchedule

    assert not issubclass(SchedulerWithoutSchedule, Scheduler) and issubclass(SchedulerWithoutSchedule, SchedulerBase)
    assert set(SchedulerWithoutSchedule.__todo__) == {"schedule", "preempt"}
    sched = SchedulerWithoutSchedule(BlockManager(4, 4))
    sched.add(Sequence([1, 2], 4))  # given code works
    with pytest.raises(TodoNotWritten, match="schedule is this lab's TODO"):
        sched.schedule()
    with pytest.raises(TodoNotWritten, match="preempt is this lab's TODO"):
        sched.preempt(sched.waiting[0])
