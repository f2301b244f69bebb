"""Paged decode attention on a GPU: the package's Triton kernel against the other ways to do it.

Layers: Llama-3.1-8B (32 query heads, 8 KV heads, head dim 128), also 64/8 (Llama-3.1-70B) and 32/32
(multi-head); block size 16; batch 1-256; context 512-32k plus a ragged batch; bf16 and fp16. Block
tables are random permutations of a pool at least 8x the L2 cache; ``triton.testing.do_bench`` flushes
L2 between timed calls and reports the median; every configuration is checked against the reference
(on its first sequences) before it is timed. Writes JSON and PNG and prints a table.

Without a CUDA GPU that Triton supports it says so and runs a dry run of the same plumbing in
Triton's interpreter on tiny shapes (the test suite runs that), then exits 0.

Usage: ``python bench/bench_paged_attention.py [--out DIR] [--quick] [--dry-run]``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from paged_kv.kernels.triton_mode import configure

MODE = configure()  # before torch/triton kernels: picks native GPU or the interpreter

import torch  # noqa: E402

from paged_kv.lab import decode_bench as db  # noqa: E402

TARGET = "at batch >= 32 and context >= 4096: >= 80% of HBM peak, and no slower than the best other paged kernel"


def gpu_configs(quick: bool):
    """(heads, batch, context, ragged, dtype) in the order they run."""
    batches = [1, 8, 32, 64, 128, 256] if not quick else [1, 32, 128]
    contexts = [512, 2048, 4096, 8192, 32768] if not quick else [512, 4096, 32768]
    for dtype in (torch.bfloat16, torch.float16):
        for batch in batches:
            for context in contexts:
                if batch * context <= 256 * 32768:
                    yield db.LLAMA_3_1_8B, batch, context, False, dtype
        yield db.LLAMA_3_1_8B, 64, 8192, True, dtype
    for heads in ((64, 8, 128), (32, 32, 128)):
        for batch, context in ((1, 32768), (32, 4096), (128, 4096), (256, 2048)):
            yield heads, batch, context, False, torch.bfloat16


def dry_configs():
    yield (4, 2, 16), 3, 40, False, torch.float16
    yield (4, 2, 16), 3, 24, True, torch.float32


def flex_worth_it(heads, batch: int, context: int, dtype) -> bool:
    """FlexAttention compiles a kernel per shape (tens of seconds): time it on two shapes only."""
    return heads == db.LLAMA_3_1_8B and batch == 32 and context in (4096, 32768) and dtype == torch.bfloat16


def fits(heads, batch, context, dtype, free_bytes: int) -> bool:
    _, kv_heads, head_dim = heads
    need = 2 * batch * context * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
    return need < 0.4 * free_bytes


def run(out_dir: Path, quick: bool, dry: bool) -> dict:
    native = MODE.native and not dry
    device = "cuda" if native else "cpu"
    if native:
        name = torch.cuda.get_device_name()
        peak, source = db.peak_bandwidth(name)
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        free = torch.cuda.mem_get_info()[0]
        configs, methods = list(gpu_configs(quick)), dict(db.COMPETITORS)
    else:
        name, peak, source, l2, free = f"CPU ({platform.processor() or platform.machine()})", None, "dry run", 0, 2**34
        configs = list(dry_configs())
        methods = {k: db.COMPETITORS[k] for k in ("triton (paged_kv)", "gather + SDPA (lab 04 copy)")}
    print(f"{name}: peak {peak or '?'} GB/s ({source}); {len(configs)} configurations; {MODE.describe()}")
    rows, workloads, started = [], {}, time.time()
    for heads, batch, context, ragged, dtype in configs:
        if not fits(heads, batch, context, dtype, free):
            print(f"skip {heads} B={batch} ctx={context}: does not fit in 40% of free memory")
            continue
        w = db.make_workload(batch, context, heads=heads, dtype=dtype, device=device, ragged=ragged,
                             min_pool_bytes=8 * l2)
        workloads[w.label] = w
        chosen = {k: v for k, v in methods.items() if k != "FlexAttention paged" or flex_worth_it(heads, batch, context, dtype)}
        new = db.measure(w, chosen, native=native, peak_gbps=peak, rep_ms=60)
        rows += new
        print(db.format_table(new).split("\n", 1)[1], flush=True)
        if native:  # keep the byte/FLOP counts for the roofline, free the pool
            workloads[w.label] = db.Workload(w.q, w.k_cache[:1].clone(), w.v_cache[:1].clone(), w.block_tables,
                                             w.seq_lens, w.label,
                                             w.max_seq_len)
            del w
            torch.cuda.empty_cache()
    report = {"device": name, "peak_gbps": peak, "peak_source": source, "triton_mode": MODE.describe(),
              "dry_run": not native, "seconds": round(time.time() - started, 1), "target": TARGET,
              "rows": [r.as_dict() for r in rows], "summary": summarize(rows)}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "paged_attention.json").write_text(json.dumps(report, indent=2))
    suffix = " (dry run)" if not native else ""
    fig = db.plot_bandwidth(rows, peak, f"Paged decode attention on {name}{suffix}")
    fig.savefig(out_dir / "paged_attention.png", dpi=110, bbox_inches="tight")
    roof = db.plot_roofline(rows, workloads, peak, None, f"Roofline: paged decode on {name}{suffix}")
    roof.savefig(out_dir / "paged_attention_roofline.png", dpi=110, bbox_inches="tight")
    print()
    print(db.format_table(rows))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out_dir / 'paged_attention.json'}, paged_attention.png and paged_attention_roofline.png")
    return report


def summarize(rows) -> dict:
    """The design target's workloads: the package kernel's worst fraction of peak and the best rival there."""
    ours = [r for r in rows if r.method == "triton (paged_kv)" and r.gbps]
    summary = {"package_kernel_timed": len(ours)}
    big = [r for r in ours if _batch(r.workload) >= 32 and _context(r.workload) >= 4096]
    if big and big[0].fraction_of_peak is not None:
        summary["min_fraction_of_peak_at_target"] = round(min(r.fraction_of_peak for r in big), 3)
    slower = []
    for r in big:
        rivals = [o for o in rows if o.workload == r.workload and o.gbps and o.method not in
                  ("triton (paged_kv)", "gather + SDPA (lab 04 copy)")]
        best = max(rivals, key=lambda o: o.gbps, default=None)
        if best and best.gbps > r.gbps:
            slower.append(f"{r.workload}: {best.method} {best.gbps:.0f} GB/s vs ours {r.gbps:.0f}")
    summary["slower_than_a_rival"] = slower
    return summary


def _batch(label: str) -> int:
    return int(label.split()[0].split("=")[1])


def _context(label: str) -> int:
    return int(label.split()[1].split("=")[1].replace("ragged<", "").replace("=", ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes and contexts")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes in the interpreter, even on a GPU")
    args = parser.parse_args(argv)
    if not MODE.native and not args.dry_run:
        print(f"No CUDA GPU that Triton supports ({MODE.reason}).")
        print("Nothing can be timed here: running a dry run of the benchmark's plumbing in the interpreter.")
    run(args.out, args.quick, args.dry_run or not MODE.native)
    return 0


if __name__ == "__main__":
    sys.exit(main())
