"""`make bench-gpu`'s plumbing works without a GPU: its dry run in the interpreter, the byte accounting,
the peak table, and the FlexAttention competitor's block mask (checked in eager mode on the CPU)."""
import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

from paged_kv.lab import decode_bench as db

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_dry_run_writes_json_png_and_exits_zero(tmp_path, capsys):
    sys.path.insert(0, str(BENCH))
    try:
        import bench_paged_attention as bench
    finally:
        sys.path.remove(str(BENCH))
    assert bench.main(["--out", str(tmp_path), "--dry-run"]) == 0
    report = json.loads((tmp_path / "paged_attention.json").read_text())
    assert report["dry_run"] is True and (tmp_path / "paged_attention.png").stat().st_size > 5000
    assert (tmp_path / "paged_attention_roofline.png").stat().st_size > 5000
    methods = {r["method"] for r in report["rows"]}
    assert {"triton (paged_kv)", "gather + SDPA (lab 04 copy)"} <= methods
    assert all(r["ms"] and not r["note"] for r in report["rows"]), report["rows"]
    assert "triton (paged_kv)" in capsys.readouterr().out


def test_bytes_moved_counts_live_tokens_only():
    w = db.make_workload(2, 20, heads=(4, 2, 8), block_size=16, dtype=torch.float16, device="cpu", ragged=False,
                         min_pool_bytes=10**5)
    kv = 2 * 40 * 2 * 8 * 2                         # K and V, 40 tokens, 2 KV heads, 8 dims, 2 bytes
    q_out = 2 * 2 * 4 * 8 * 2
    assert w.bytes_moved() == kv + q_out + 4 * 4 + 2 * 4   # 4 table entries, 2 lengths
    assert w.k_cache.shape[0] * 16 * 2 * 8 * 2 * 2 >= 10**5  # the pool honours min_pool_bytes
    assert sorted(w.block_tables.flatten().tolist()) == sorted(set(w.block_tables.flatten().tolist()))


@pytest.mark.parametrize("name, peak", [("NVIDIA H200", 4800.0), ("NVIDIA H100 80GB HBM3", 3350.0),
                                        ("NVIDIA H100 PCIe", 2000.0), ("NVIDIA A100-SXM4-80GB", 2039.0),
                                        ("Tesla T4", 320.0), ("NVIDIA L4", 300.0), ("NVIDIA H100 NVL", None),
                                        ("NVIDIA GH200 480GB", None), ("NVIDIA H200 NVL", 4800.0),
                                        ("Unknown GPU", None)])
def test_peak_table(name, peak):
    assert db.peak_bandwidth(name)[0] == peak


@pytest.mark.parametrize("ragged", [False, True])
def test_flex_attention_block_mask_reads_each_sequences_blocks(ragged):
    warnings.filterwarnings("ignore")
    w = db.make_workload(3, 40, heads=(4, 2, 16), block_size=4, dtype=torch.float32, device="cpu", ragged=ragged,
                         min_pool_bytes=20000)
    assert db.check_against_reference(w, db.flex_paged) is None
    assert db.check_against_reference(w, db.gather_then_sdpa) is None


def test_a_wrong_competitor_is_skipped_not_timed():
    w = db.make_workload(2, 9, heads=(2, 1, 8), block_size=4, dtype=torch.float32, device="cpu")
    rows = db.measure(w, {"wrong": lambda w: (lambda: torch.zeros_like(w.q))}, native=False, peak_gbps=None)
    assert rows[0].ms is None and rows[0].note.startswith("skipped: wrong result")
