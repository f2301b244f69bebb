"""Lab 07's traces are compared with the reference's recorded decisions, so a class's handout (whose package
leaves the reference scheduler out) runs the picture and the visible tests: the recording must be what the
reference decides now, on exactly the traces the notebook names, and must catch what the live reference
catches."""

from __future__ import annotations

import pytest

from paged_kv.engine.scheduler import Scheduler
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.scheduler_trace import (
    RECORDED,
    TraceRequest,
    TraceSpec,
    compare_with_reference,
    recorded_snapshots,
    reference_snapshots,
    replay,
    snapshot_from_json,
    snapshot_to_json,
)
from tools.record_scheduler_traces import notebook_traces, recording, render


def test_the_recording_is_what_the_reference_decides_on_the_notebooks_traces():
    assert RECORDED.read_text() == render(recording()), "run: python -m tools.record_scheduler_traces"


def test_every_trace_the_notebook_compares_is_recorded_and_replays_as_recorded():
    traces = notebook_traces()
    assert len(traces) >= 5
    for case, spec in traces:
        assert recorded_snapshots(spec) == replay(Scheduler, spec), case


def test_a_snapshot_survives_its_json_form():
    for _, spec in notebook_traces():
        for snapshot in replay(Scheduler, spec):
            assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot


class _PreemptedToTheTail(Scheduler):
    def preempt(self, seq):
        self.block_manager.deallocate(seq)
        seq.num_scheduled_tokens = 0
        self.waiting.append(seq)  # the bug: a preempted sequence goes behind new arrivals


def _case(name: str) -> TraceSpec:
    return next(spec for case, spec in notebook_traces() if case.startswith(name))


def test_a_recorded_trace_passes_the_reference_and_catches_a_preemption_bug_as_the_live_one_does():
    spec = _case("four requests fill the pool")
    assert recorded_snapshots(spec) is not None
    assert compare_with_reference(Scheduler, spec, "recorded") == len(replay(Scheduler, spec))
    with pytest.raises(CheckFailed) as recorded:
        compare_with_reference(_PreemptedToTheTail, spec, "recorded")
    with pytest.raises(CheckFailed) as live:
        compare_with_reference(_PreemptedToTheTail, spec, "recorded", reference_cls=Scheduler)
    assert str(recorded.value) == str(live.value)
    assert "HEAD of waiting" in str(recorded.value)


def test_a_trace_the_notebook_does_not_name_is_replayed_with_the_reference():
    spec = TraceSpec((TraceRequest((5, 6, 7), 4), TraceRequest((8, 9), 3, 1)), num_blocks=5, block_size=2)
    assert recorded_snapshots(spec) is None
    assert reference_snapshots(spec) == replay(Scheduler, spec)
