"""Contiguous baselines (the vLLM paper's Orca Max / Pow2 / Oracle) against paging on one workload."""

import statistics

import pytest

from paged_kv import KVCacheManager
from paged_kv.lab.baselines import (
    PAPER_FIGURE2,
    FirstFitArena,
    compare_systems,
    reserve_max,
    reserve_oracle,
    reserve_pow2,
    serve_contiguous,
    serve_paged,
)
from paged_kv.lab.simulate import TRACE_MEANS, synthetic_lengths


def test_reservation_policies_follow_the_paper():
    assert reserve_max(100, 25, 2048) == 2048
    assert reserve_pow2(100, 25, 2048) == 132  # 25 output tokens -> 32 reserved (at most 2x)
    assert reserve_pow2(100, 32, 2048) == 132
    assert reserve_pow2(100, 33, 2048) == 164
    assert reserve_pow2(1500, 520, 2048) == 2048  # never past the model's context
    assert reserve_oracle(100, 25, 2048) == 125


def test_first_fit_arena_reuses_and_merges_holes():
    arena = FirstFitArena(10)
    a, b, c = arena.allocate(3), arena.allocate(3), arena.allocate(3)
    assert (a, b, c) == (0, 3, 6) and arena.free_slots == 1
    arena.release(a)
    arena.release(c)
    assert arena.free_slots == 7
    assert arena.allocate(5) is None, "7 slots are free, but not 5 in one piece (external fragmentation)"
    arena.release(b)
    assert arena.holes == [[0, 10]], "released neighbours merge back into one hole"
    with pytest.raises(ValueError, match="double release"):
        arena.release(b)


def test_synthetic_lengths_are_seeded_bounded_and_shaped_like_the_traces():
    for kind, (prompt_mean, output_mean) in TRACE_MEANS.items():
        pairs = synthetic_lengths(kind, 3000, seed=3)
        assert pairs == synthetic_lengths(kind, 3000, seed=3)
        assert all(p >= 1 and o >= 1 and p + o <= 2048 for p, o in pairs)
        assert abs(statistics.mean(p for p, _ in pairs) / prompt_mean - 1) < 0.1
        assert abs(statistics.mean(o for _, o in pairs) / output_mean - 1) < 0.1
    with pytest.raises(ValueError, match="kind"):
        synthetic_lengths("wikipedia", 10)


def test_usage_shares_add_up_to_the_whole_pool_and_every_request_finishes():
    lengths = synthetic_lengths("sharegpt", 120, seed=1)
    results = compare_systems(lengths, KVCacheManager, 8192)
    for usage in results.values():
        assert sum(usage.shares()) == pytest.approx(1.0)
        assert min(usage.shares()) >= 0
        assert usage.finished == len(lengths)
    assert results["Orca (Oracle)"].internal_fragmentation == 0
    assert results["Orca (Max)"].mean_running == pytest.approx(8192 // 2048)


def test_paging_keeps_more_token_states_and_runs_more_requests_than_every_reservation():
    results = compare_systems(synthetic_lengths("sharegpt", 300, seed=0), KVCacheManager, 15_696)
    order = ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM"]
    states = [results[name].token_states for name in order]
    running = [results[name].mean_running for name in order]
    assert states == sorted(states) and running == sorted(running)
    assert results["vLLM"].token_states > 0.9
    # Reserving the maximum length on ShareGPT-shaped lengths lands close to the paper's Orca (Max) bar.
    paper = [x / 100 for x in PAPER_FIGURE2["Orca (Max)"]]
    assert all(abs(ours - theirs) < 0.04 for ours, theirs in zip(results["Orca (Max)"].shares(), paper))


def test_paged_serving_preempts_by_recompute_when_decode_runs_out():
    lengths = [(8, 40)] * 6  # prompts fit at once; their outputs do not
    usage = serve_paged(lengths, KVCacheManager, 128, block_size=8)
    assert usage.preemptions > 0 and usage.finished == 6


@pytest.mark.parametrize(
    "lengths, error", [([(0, 3)], ValueError), ([(3000, 10)], ValueError), ([[3, 4]], TypeError), ([], ValueError)]
)
def test_serving_rejects_bad_workloads(lengths, error):
    with pytest.raises(error):
        serve_contiguous(lengths, reserve_oracle, 4096)


def test_a_request_larger_than_the_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        serve_contiguous([(100, 100)], reserve_max, 1024)
    with pytest.raises(ValueError, match="whole pool"):
        serve_paged([(100, 100)], KVCacheManager, 64, block_size=16)


def test_kv_usage_figure_renders_with_the_paper_bars(tmp_path):
    from paged_kv.lab.viz import plot_kv_usage

    runs = {"ShareGPT-like": compare_systems(synthetic_lengths("sharegpt", 80, seed=2), KVCacheManager, 4096)}
    fig = plot_kv_usage(runs, PAPER_FIGURE2)
    fig.savefig(tmp_path / "usage.png")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "Orca (Max): paper" in labels and "vLLM: ShareGPT-like" in labels


def test_a_request_that_can_only_grow_past_the_pool_is_refused_before_serving():
    with pytest.raises(ValueError, match="whole pool"):
        serve_paged([(8, 200)], KVCacheManager, 64, block_size=16)


def test_a_decode_that_does_not_grow_the_request_stops_the_run_with_a_clear_error():
    from paged_kv.lab.starters import KVCacheManagerWithoutDecode

    class ForgetsLength(KVCacheManagerWithoutDecode):
        def allocate_for_decode(self, req):
            self._check_decode(req)

    with pytest.raises(RuntimeError, match="exactly one token"):
        serve_paged([(4, 4)] * 3, ForgetsLength, 256, block_size=4)


def test_an_unwritten_decode_todo_is_not_taken_for_an_oom():
    from paged_kv.lab.starters import KVCacheManagerWithoutDecode

    with pytest.raises(NotImplementedError):
        serve_paged([(4, 4)] * 3, KVCacheManagerWithoutDecode, 256, block_size=4)


def test_a_decode_that_never_gets_a_block_stops_the_run():
    from paged_kv.lab.starters import KVCacheManagerWithoutDecode

    class AlwaysOOM(KVCacheManagerWithoutDecode):
        def allocate_for_decode(self, req):
            raise RuntimeError("OOM: always")

    with pytest.raises(RuntimeError, match="no request could decode"):
        serve_paged([(4, 4)] * 3, AlwaysOOM, 256, block_size=4)


def test_paged_serving_takes_a_decode_step_of_the_same_signature_as_lab_03s_stretch():
    from paged_kv.lab.baselines import decode_step_with_preemption

    calls = []

    def step(manager, running, waiting):
        calls.append(len(running))
        return decode_step_with_preemption(manager, running, waiting)

    lengths = [(8, 40)] * 6
    usage = serve_paged(lengths, KVCacheManager, 128, block_size=8, decode_step=step)
    assert calls and usage.preemptions == serve_paged(lengths, KVCacheManager, 128, block_size=8).preemptions
