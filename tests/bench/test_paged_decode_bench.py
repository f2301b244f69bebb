"""`make bench-gpu`'s harness (bench/paged_decode_bench.py) works without a GPU: its dry run in the interpreter
(every competitor listed, the skipped ones with their reason; the attainable copy; small shapes marked
launch-bound), the timing choice, the summary's targets, the byte accounting, the peak table, and the
FlexAttention competitor's block mask (eager, CPU)."""

import json
import sys
import warnings

import pytest
import torch

import paged_decode_bench as db  # bench/, on pytest's pythonpath (pyproject.toml)


def _bench():
    import bench_paged_attention as bench

    return bench


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One dry run of the benchmark for the tests below (it takes seconds in the interpreter)."""
    out = tmp_path_factory.mktemp("bench")
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = _bench().main(["--out", str(out), "--dry-run"])
    return code, json.loads((out / "paged_attention.json").read_text()), printed.getvalue(), out


def test_dry_run_writes_json_png_and_exits_zero(dry_run):
    code, report, printed, out = dry_run
    assert code == 0 and report["dry_run"] is True and (out / "paged_attention.png").stat().st_size > 5000
    assert (out / "paged_attention_roofline.png").stat().st_size > 5000
    ours = [r for r in report["rows"] if r["method"] == "triton (paged_kv)"]
    copy = [r for r in report["rows"] if r["method"] == "gather + SDPA (lab 04 copy)"]
    assert ours and all(r["ms"] and not r["note"] for r in ours + copy), ours + copy
    assert any("bs=256" in r["workload"] for r in ours), "the grid has a block-size-256 workload (FA2's case)"
    assert "triton (paged_kv)" in printed and report["versions"]["torch"] == torch.__version__


def test_every_competitor_has_a_row_per_workload_and_skips_say_why(dry_run):
    _, report, printed, _ = dry_run
    workloads = {r["workload"] for r in report["rows"]}
    for workload in workloads:
        methods = [r["method"] for r in report["rows"] if r["workload"] == workload]
        assert methods == [*db.COMPETITORS, db.ATTAINABLE], methods
    for row in report["rows"]:
        assert (row["ms"] is None) == row["note"].startswith("skipped: "), row
    for name in ("flash_attn_with_kvcache (FA2)", "FlashInfer BatchDecode", "flash_attn_interface (FA3)"):
        assert "not installed" in report["not_run"][name] or "needs" in report["not_run"][name]
        assert f"{name}" in printed and "skipped: " in printed
    assert set(report["not_run"]) >= {"flash_attn_with_kvcache (FA2)", "FlashInfer BatchDecode"}


def test_attainable_copy_is_measured_beside_every_workload(dry_run):
    _, report, printed, _ = dry_run
    copies = {r["workload"]: r for r in report["rows"] if r["method"] == db.ATTAINABLE}
    assert set(copies) == {r["workload"] for r in report["rows"]}
    for row in report["rows"]:
        if row["ms"] and row["method"] != db.ATTAINABLE:
            expected = row["gbps"] / copies[row["workload"]]["gbps"]
            assert row["fraction_of_attainable"] == pytest.approx(expected)
    assert "% attain" in printed


def test_small_shapes_in_the_dry_run_are_marked_launch_bound(dry_run):
    _, report, _, _ = dry_run
    timed = [r for r in report["rows"] if r["ms"]]
    assert timed and all(r["timing"] == "launch-bound" for r in timed)
    assert report["summary"]["launch_bound_rows"] == len(timed)


@pytest.mark.parametrize(
    "nbytes, native, graphs, mode, label",
    [
        (10 * 2**20, True, True, db.GRAPH, "cuda graph"),
        (10 * 2**20, True, False, db.DO_BENCH, "launch-bound"),
        (10 * 2**30, True, True, db.DO_BENCH, "do_bench"),
        (10 * 2**20, False, True, db.CPU_TIMER, "launch-bound"),
        (10 * 2**30, False, True, db.CPU_TIMER, "cpu timer"),
    ],
)
def test_timing_choice_graphs_small_shapes_and_labels_the_rest(nbytes, native, graphs, mode, label):
    timing = db.choose_timing(
        nbytes, native=native, graphs=graphs, pool_blocks=10**6, used_blocks=100, l2_bytes=50 * 2**20
    )
    assert (timing.mode, timing.label) == (mode, label)
    if timing.mode == db.GRAPH:
        assert timing.rotations * nbytes >= 2 * 50 * 2**20  # rotations cover twice the L2: no warm cache
    with pytest.raises(ValueError, match="bytes_moved"):
        db.choose_timing(0, native=True)


def test_rotations_are_capped_by_the_pool_and_use_disjoint_blocks():
    assert db.choose_timing(2**20, native=True, pool_blocks=30, used_blocks=10, l2_bytes=2**30).rotations == 3
    w = db.make_workload(3, 20, heads=(2, 1, 8), block_size=4, dtype=torch.float32, device="cpu", min_pool_bytes=16384)
    copies = db.rotated(w, 3)
    used = [set(c.block_tables[s, : int((c.seq_lens[s] + 3) // 4)].tolist()) for c in copies for s in range(3)]
    assert sum(len(u) for u in used) == len(set().union(*used)), "no block is read by two rotations"
    for c in copies:
        assert db.check_output(c, db.gather_then_sdpa(c)) is None
    with pytest.raises(ValueError, match="do not fit"):
        db.rotated(w, 100)


def test_fa2_reports_its_block_size_rule_and_runs_where_it_holds(monkeypatch):
    """With flash_attn importable (a stand-in that computes the reference), block size 16 is refused with
    flash-attn 2.x's rule; at 256 the next requirement, a GPU, is what the CPU lacks."""
    import types

    from paged_kv.kernels.attention import paged_decode_attention_ref

    fake = types.ModuleType("flash_attn")
    fake.__version__ = "2.8.3"
    fake.flash_attn_with_kvcache = lambda q, k, v, cache_seqlens, block_table, softmax_scale: (
        paged_decode_attention_ref(q[:, 0], k, v, block_table, cache_seqlens, softmax_scale)[:, None]
    )
    monkeypatch.setitem(sys.modules, "flash_attn", fake)
    for block_size, reason in ((16, "needs block size divisible by 256"), (256, "needs a CUDA GPU")):
        w = db.make_workload(2, 300, heads=(2, 1, 16), block_size=block_size, device="cpu")
        row = db.measure(w, {"fa2": db.flash_attn_paged}, native=False, peak_gbps=None)[0]
        assert row.ms is None and reason in row.note, row.note


def test_missing_libraries_are_named_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import fails as if absent
    w = db.make_workload(2, 9, heads=(2, 1, 8), block_size=4, dtype=torch.float32, device="cpu")
    rows = db.measure(w, {"FlashInfer": db.flashinfer_paged}, native=False, peak_gbps=None)
    assert rows[0].note == "skipped: flashinfer not installed"
    assert "FlashInfer" in db.format_table(rows) and "flashinfer not installed" in db.format_table(rows)


def _row(workload, method, gbps, note=""):
    return db.Row(workload, method, 1.0 if gbps else None, gbps, None, None, note)


def test_summary_computes_the_targets_and_names_the_peers_that_ran():
    bench = _bench()
    target = "B=32 ctx=4096 32/8/128 bs=16 bfloat16"
    rows = [
        _row(target, db.OURS, 4000.0),
        _row(target, "FlashInfer BatchDecode", 4100.0),
        _row(target, "flash_attn_with_kvcache (FA2)", None, "skipped: needs block size divisible by 256"),
        _row("B=1 ctx=4096 32/8/128 bs=16 bfloat16", db.OURS, 100.0),
        _row(target, db.ATTAINABLE, 4400.0),
    ]
    db.attach_attainable(rows, rows[-1])
    summary = bench.summarize(rows)
    assert summary["min_fraction_of_attainable_at_target"] == pytest.approx(4000 / 4400, abs=1e-3)
    assert summary["meets_85_percent_of_attainable"] is True and summary["target_workloads_timed"] == 1
    assert summary["peers_that_ran_at_target"] == ["FlashInfer BatchDecode"]
    assert "needs block size" in summary["peers_that_did_not_run_at_target"]["flash_attn_with_kvcache (FA2)"]
    assert summary["no_slower_than_any_peer"] is False and "FlashInfer" in summary["slower_than_a_peer"][0]
    assert "slower than at least one of the peers that ran there (FlashInfer BatchDecode)" in summary["verdict"]


def test_a_missing_rival_never_reads_as_a_win():
    bench = _bench()
    target = "B=64 ctx=ragged<=8192 32/8/128 bs=16 bfloat16"
    rows = [
        _row(target, db.OURS, 3000.0),
        _row(target, "FlashInfer BatchDecode", None, "skipped: flashinfer not installed"),
    ]
    summary = bench.summarize(rows)
    assert summary["no_slower_than_any_peer"] is None and summary["peers_that_ran_at_target"] == []
    assert "no peer ran there" in summary["verdict"] and summary["meets_85_percent_of_attainable"] is None


@pytest.mark.parametrize(
    "label, inside",
    [
        ("B=32 ctx=4096 32/8/128 bs=16 bfloat16", True),
        ("B=32 ctx=4096 32/8/128 bs=256 bfloat16", False),
        ("B=16 ctx=32768 32/8/128 bs=16 bfloat16", False),
        ("B=256 ctx=2048 32/8/128 bs=16 float16", False),
        ("B=32 ctx=4096 64/8/128 bs=16 bfloat16", False),
    ],
)
def test_target_region(label, inside):
    assert _bench().in_target(label) is inside


def test_gpu_grid_holds_block_256_and_the_target_region():
    bench = _bench()
    quick = bench.gpu_configs(quick=True, target=True)
    assert len(quick) == len(set(quick))
    assert any(c.block_size == 256 for c in quick)
    assert sum(1 for c in quick if c.block_size == 16 and c.batch >= 32 and c.context >= 4096) >= 5
    assert bench.flex_skip(bench.Config(db.LLAMA_3_1_8B, 32, 4096), everywhere=False) == {}
    assert "FlexAttention paged" in bench.flex_skip(bench.Config(db.LLAMA_3_1_8B, 1, 512), everywhere=False)


def test_bytes_moved_counts_live_tokens_only():
    w = db.make_workload(
        2, 20, heads=(4, 2, 8), block_size=16, dtype=torch.float16, device="cpu", ragged=False, min_pool_bytes=10**5
    )
    kv = 2 * 40 * 2 * 8 * 2  # K and V, 40 tokens, 2 KV heads, 8 dims, 2 bytes
    q_out = 2 * 2 * 4 * 8 * 2
    assert w.bytes_moved() == kv + q_out + 4 * 4 + 2 * 4  # 4 table entries, 2 lengths
    assert w.k_cache.shape[0] * 16 * 2 * 8 * 2 * 2 >= 10**5  # the pool honours min_pool_bytes
    assert sorted(w.block_tables.flatten().tolist()) == sorted(set(w.block_tables.flatten().tolist()))


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H200", 4800.0),
        ("NVIDIA H100 80GB HBM3", 3350.0),
        ("NVIDIA H100 PCIe", 2000.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0),
        ("Tesla T4", 320.0),
        ("NVIDIA L4", 300.0),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA H200 NVL", 4800.0),
        ("Unknown GPU", None),
    ],
)
def test_peak_table(name, peak):
    assert db.peak_bandwidth(name)[0] == peak


@pytest.mark.parametrize("ragged", [False, True])
def test_flex_attention_block_mask_reads_each_sequences_blocks(ragged):
    warnings.filterwarnings("ignore")
    w = db.make_workload(
        3, 40, heads=(4, 2, 16), block_size=4, dtype=torch.float32, device="cpu", ragged=ragged, min_pool_bytes=20000
    )
    assert db.check_against_reference(w, db.flex_paged) is None
    assert db.check_against_reference(w, db.gather_then_sdpa) is None


def test_a_wrong_competitor_is_skipped_not_timed():
    w = db.make_workload(2, 9, heads=(2, 1, 8), block_size=4, dtype=torch.float32, device="cpu")
    rows = db.measure(w, {"wrong": lambda w: lambda: torch.zeros_like(w.q)}, native=False, peak_gbps=None)
    assert rows[0].ms is None and rows[0].note.startswith("skipped: wrong result")


def test_a_competitor_that_cannot_be_set_up_is_reported():
    def broken(w):
        raise RuntimeError("CUDA driver too old")

    w = db.make_workload(2, 9, heads=(2, 1, 8), block_size=4, dtype=torch.float32, device="cpu")
    row = db.measure(w, {"broken": broken}, native=False, peak_gbps=None)[0]
    assert row.ms is None and "could not be set up: RuntimeError: CUDA driver too old" in row.note
