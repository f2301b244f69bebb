"""Paged decode attention on a GPU: the package's Triton kernel against the other ways to do it.

Layers: Llama-3.1-8B (32 query heads, 8 KV heads, head dim 128), also 64/8 (Llama-3.1-70B) and 32/32
(multi-head); block size 16, and 256 where FlashAttention-2's paged path can run (it needs a multiple
of 256); batch 1-256; context 512-32k plus a ragged batch; bf16 and fp16. Block tables are random
permutations of a pool at least 8x the L2 cache; every competitor is checked against the reference
(on its first sequences) before it is timed.

Timing: ``triton.testing.do_bench`` (L2 flushed between calls, median) for large shapes; small ones (under
64 MiB a step) as CUDA graphs over rotated block tables (``do_bench_cudagraph``), or marked launch-bound.
Each workload also times a device-to-device copy of the same number of bytes: the *attainable*
bandwidth, reported beside the datasheet peak. Competitors that do not run are listed with their
reason (not installed, block size, GPU) in the table, the JSON and the plot; the summary computes the
targets of issue #17 from the rows and names the peers that ran.

Without a CUDA GPU that Triton supports it says so and runs a dry run of the same plumbing in
Triton's interpreter on tiny shapes (the test suite runs that), then exits 0.

Usage: ``PYTHONPATH=. python3 bench/bench_paged_attention.py [--out DIR] [--quick] [--target] [--dry-run]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

from paged_kv.kernels.triton_mode import configure

MODE = configure()  # before torch/triton kernels: picks native GPU or the interpreter

import torch  # noqa: E402

import paged_decode_bench as db  # noqa: E402 - bench/ is this script's folder, first on sys.path

TARGET = (
    "Llama-3.1-8B layer, block size 16, batch >= 32, context >= 4096: the package kernel at >= 85% of the "
    "attainable copy bandwidth and no slower than any peer that ran, in the same run (measured on a GPU only)"
)
TARGET_FRACTION = 0.85
DRY_RUN_L2 = 1 << 13  # a nominal 8 KiB L2 for the dry run: small pools, two or three rotations exercised


@dataclass(frozen=True)
class Config:
    heads: tuple
    batch: int
    context: int
    ragged: bool = False
    dtype: torch.dtype = torch.bfloat16
    block_size: int = 16


def gpu_configs(quick: bool, target: bool = False) -> List[Config]:
    """The grid in the order it runs (duplicates dropped): block size 16, then 256, then other layers;
    ``target`` adds the target region (batch >= 32, context >= 4096, block size 16)."""
    batches = [1, 32, 128] if quick else [1, 8, 32, 64, 128, 256]
    contexts = [512, 4096, 32768] if quick else [512, 2048, 4096, 8192, 32768]
    dtypes = (torch.bfloat16,) if quick else (torch.bfloat16, torch.float16)
    configs = [
        Config(db.LLAMA_3_1_8B, b, c, False, d)
        for d in dtypes
        for b in batches
        for c in contexts
        if b * c <= 256 * 32768
    ]
    configs += [Config(db.LLAMA_3_1_8B, 64, 8192, True, d) for d in dtypes]
    big_blocks = ((32, 4096), (128, 4096)) if quick else ((1, 32768), (32, 4096), (128, 4096), (32, 32768))
    configs += [Config(db.LLAMA_3_1_8B, b, c, block_size=256) for b, c in big_blocks]
    if not quick:
        configs += [
            Config(h, b, c)
            for h in ((64, 8, 128), (32, 32, 128))
            for b, c in ((1, 32768), (32, 4096), (128, 4096), (256, 2048))
        ]
    if target:
        configs += [
            Config(db.LLAMA_3_1_8B, b, c) for b, c in ((32, 4096), (64, 8192), (128, 4096), (256, 4096), (32, 32768))
        ]
    return list(dict.fromkeys(configs))


def dry_configs() -> List[Config]:
    """Tiny shapes for the interpreter: a paged 4/2/16 layer at block sizes 16 and 256 (FA2's case)."""
    return [
        Config((4, 2, 16), 3, 40, False, torch.float16),
        Config((4, 2, 16), 3, 24, True, torch.float32),
        Config((4, 2, 16), 2, 40, False, torch.float16, block_size=256),
    ]


FLEX_SHAPES = {(db.LLAMA_3_1_8B, 32, 4096, 16), (db.LLAMA_3_1_8B, 128, 4096, 16), (db.LLAMA_3_1_8B, 32, 4096, 256)}


def flex_skip(config: Config, everywhere: bool) -> Dict[str, str]:
    """FlexAttention compiles once per shape (tens of seconds each): it runs on ``FLEX_SHAPES`` in bf16 only,
    unless ``everywhere``; elsewhere its row says why."""
    key = (config.heads, config.batch, config.context, config.block_size)
    if everywhere or (key in FLEX_SHAPES and config.dtype == torch.bfloat16 and not config.ragged):
        return {}
    return {
        "FlexAttention paged": "not in the FlexAttention subset (one compile per shape; --flex-everywhere "
        "times it on every workload)"
    }


def fits(config: Config, free_bytes: int) -> bool:
    """Whether the workload's K and V take under 40% of free memory (the copy and the pool's slack need room)."""
    _, kv_heads, head_dim = config.heads
    element = torch.empty((), dtype=config.dtype).element_size()
    return 2 * config.batch * config.context * kv_heads * head_dim * element < 0.4 * free_bytes


def run(out_dir: Path, quick: bool, dry: bool, target: bool = False, flex_everywhere: bool = False) -> dict:
    native = MODE.native and not dry
    device = "cuda" if native else "cpu"
    if native:
        name = torch.cuda.get_device_name()
        peak, source = db.peak_bandwidth(name)
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        free = torch.cuda.mem_get_info()[0]
        configs = gpu_configs(quick, target)
    else:
        name, peak, source = f"CPU ({platform.processor() or platform.machine()})", None, "dry run"
        l2, free, configs = DRY_RUN_L2, 2**34, dry_configs()
    print(f"{name}: peak {peak or '?'} GB/s ({source}); {len(configs)} configurations; {MODE.describe()}")
    rows, workloads, started = [], {}, time.time()
    for config in configs:
        if not fits(config, free):
            print(f"skip {config}: does not fit in 40% of free memory")
            continue
        new, w = run_config(config, native=native, device=device, peak=peak, l2=l2, flex_everywhere=flex_everywhere)
        workloads[w.label] = w
        rows += new
        print(db.format_table(new).split("\n", 1)[1], flush=True)
    report = {
        "device": name,
        "peak_gbps": peak,
        "peak_source": source,
        "triton_mode": MODE.describe(),
        "versions": versions(),
        "dry_run": not native,
        "seconds": round(time.time() - started, 1),
        "target": TARGET,
        "rows": [r.as_dict() for r in rows],
        "not_run": db.not_run(rows),
        "summary": summarize(rows),
    }
    write_outputs(out_dir, report, rows, workloads, peak, f"{name}{' (dry run)' if not native else ''}")
    return report


def run_config(config: Config, *, native: bool, device: str, peak, l2: int, flex_everywhere: bool):
    """Every competitor on one workload, then the copy of the same bytes; the pool is freed after (the
    returned workload keeps only what the roofline needs)."""
    w = db.make_workload(
        config.batch,
        config.context,
        heads=config.heads,
        dtype=config.dtype,
        device=device,
        ragged=config.ragged,
        block_size=config.block_size,
        min_pool_bytes=8 * l2,
    )
    timing = db.timing_for(w, native=native, l2_bytes=l2)
    rows = db.measure(
        w,
        db.COMPETITORS,
        native=native,
        peak_gbps=peak,
        rep_ms=60,
        timing=timing,
        skip=flex_skip(config, flex_everywhere),
    )
    kept = db.Workload(
        w.q, w.k_cache[:1].clone(), w.v_cache[:1].clone(), w.block_tables, w.seq_lens, w.label, w.max_seq_len
    )  # bytes and FLOPs need only q, the lengths, the tables and the cache's shape
    del w
    if native:
        torch.cuda.empty_cache()
    copy = db.measure_attainable(kept, timing, peak, device=device, rep_ms=60)
    db.attach_attainable(rows, copy)
    return rows + [copy], kept


def versions() -> dict:
    """The versions this run used (torch, triton and each peer library that imports)."""
    import importlib

    found = {"python": platform.python_version(), "torch": torch.__version__}
    for module in ("triton", "flash_attn", "flash_attn_3", "flashinfer"):
        try:
            found[module] = str(getattr(importlib.import_module(module), "__version__", "?"))
        except ImportError:
            found[module] = None
    return found


def write_outputs(out_dir: Path, report: dict, rows, workloads, peak, where: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "paged_attention.json").write_text(json.dumps(report, indent=2, default=str))
    fig = db.plot_bandwidth(rows, peak, f"Paged decode attention on {where}")
    fig.savefig(out_dir / "paged_attention.png", dpi=110, bbox_inches="tight")
    roof = db.plot_roofline(rows, workloads, peak, None, f"Roofline: paged decode on {where}")
    roof.savefig(out_dir / "paged_attention_roofline.png", dpi=110, bbox_inches="tight")
    print()
    print(db.format_table(rows))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out_dir / 'paged_attention.json'}, paged_attention.png and paged_attention_roofline.png")


def in_target(label: str) -> bool:
    """Whether a workload label is in the target region: Llama-3.1-8B layer, block size 16, batch >= 32,
    context >= 4096 (a ragged batch counts by its longest sequence)."""
    parts = dict(p.split("=", 1) for p in label.split() if "=" in p)
    context = int(parts["ctx"].replace("ragged<=", ""))
    return "32/8/128" in label.split() and parts.get("bs") == "16" and int(parts["B"]) >= 32 and context >= 4096


def summarize(rows: Sequence[db.Row]) -> dict:
    """The targets of issue #17 computed from the rows of one run (``None`` where nothing was measured).

    For the target region: the package kernel's worst fraction of the attainable copy bandwidth and of the
    datasheet peak, whether it is >= 85% of attainable, the peers that ran there and those that did not
    (with reasons), and every workload where a peer that ran was faster.
    """
    region = [r for r in rows if in_target(r.workload)]
    ours = [r for r in region if r.method == db.OURS and r.ran]
    attain = [r.fraction_of_attainable for r in ours if r.fraction_of_attainable is not None]
    peak = [r.fraction_of_peak for r in ours if r.fraction_of_peak is not None]
    peers_ran = sorted({r.method for r in region if r.method in db.PEERS and r.ran})
    peers_not = {m: why for m, why in db.not_run([r for r in region if r.method in db.PEERS]).items()}
    slower = []
    for r in ours:
        rivals = [o for o in region if o.workload == r.workload and o.method in db.PEERS and o.ran]
        best = max(rivals, key=lambda o: o.gbps, default=None)
        if best is not None and best.gbps > r.gbps:
            slower.append(f"{r.workload}: {best.method} {best.gbps:.0f} GB/s vs ours {r.gbps:.0f}")
    summary = {
        "package_kernel_timed": sum(1 for r in rows if r.method == db.OURS and r.ran),
        "target_workloads_timed": len(ours),
        "min_fraction_of_attainable_at_target": round(min(attain), 3) if attain else None,
        "min_fraction_of_peak_at_target": round(min(peak), 3) if peak else None,
        "meets_85_percent_of_attainable": (min(attain) >= TARGET_FRACTION) if attain else None,
        "peers_that_ran_at_target": peers_ran,
        "peers_that_did_not_run_at_target": peers_not,
        "slower_than_a_peer": slower,
        "no_slower_than_any_peer": (not slower) if ours and peers_ran else None,  # None: nothing to compare
        "launch_bound_rows": sum(1 for r in rows if r.timing == "launch-bound"),
    }
    summary["verdict"] = verdict(summary)
    return summary


def verdict(summary: dict) -> str:
    """One sentence: what was measured, against which peers (never a win over peers that did not run)."""
    if not summary["target_workloads_timed"]:
        return "target region not measured in this run (no GPU, or no target workload fitted)"
    attain = summary["min_fraction_of_attainable_at_target"]
    first = (
        f"package kernel at >= {100 * attain:.1f}% of attainable at the target"
        if attain is not None
        else "package kernel timed at the target (attainable not measured)"
    )
    if not summary["peers_that_ran_at_target"]:
        return f"{first}; no peer ran there, so nothing was compared"
    faster = "no slower than" if summary["no_slower_than_any_peer"] else "slower than at least one of"
    return f"{first}; {faster} the peers that ran there ({', '.join(summary['peers_that_ran_at_target'])})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes, contexts and layers; bf16 only")
    parser.add_argument("--target", action="store_true", help="add the target region's workloads")
    parser.add_argument("--flex-everywhere", action="store_true", help="time FlexAttention on every workload")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes in the interpreter, even on a GPU")
    args = parser.parse_args(argv)
    if not MODE.native and not args.dry_run:
        print(f"No CUDA GPU that Triton supports ({MODE.reason}).")
        print("Nothing can be timed here: running a dry run of the benchmark's plumbing in the interpreter.")
    run(args.out, args.quick, args.dry_run or not MODE.native, args.target, args.flex_everywhere)
    return 0


if __name__ == "__main__":
    sys.exit(main())
