"""Tune the package kernel by measurement: sweep TILE x num_warps x num_stages on the GPU at hand and keep
the fastest per (block size, head dim, query-head group).

Each candidate is checked against the reference, then timed with ``triton.testing.do_bench`` on a
workload of the target region (batch 32, context 4096, random block tables over a pool 8x the L2).
The winners, with the GPU's name, the Triton version, the date and the registers and shared memory of
the winning build, go to ``tune_results.json`` in ``--out``; with ``--write`` they are merged into
``paged_kv/kernels/launch_table.json``, which ``plan_launch`` reads (for that GPU only).

Without a GPU (or with ``--dry-run``) it sweeps two candidates on a tiny shape in Triton's interpreter to
exercise the plumbing; a dry run never writes the package's table (``--table PATH`` names another file).

Usage: ``PYTHONPATH=. python3 bench/tune_paged_attention.py [--out DIR] [--quick] [--write] [--dry-run]``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from paged_kv.kernels.triton_mode import configure

MODE = configure()

import torch  # noqa: E402

from paged_kv.kernels.launch_table import TABLE_PATH, TunedLaunch, write_table  # noqa: E402
from paged_kv.kernels.triton_attention import observed_resources  # noqa: E402
import paged_decode_bench as db  # noqa: E402 - bench/ is this script's folder, first on sys.path

FULL = dict(tiles=(16, 32, 64, 128), warps=(2, 4, 8), stages=(1, 2, 3, 4))
QUICK = dict(tiles=(32, 64, 128), warps=(4, 8), stages=(2, 3))
DRY = dict(tiles=(16, 32), warps=(4,), stages=(1,))


def shapes(quick: bool, dry: bool) -> List[Tuple[Tuple[int, int, int], int]]:
    """(heads, block size) to tune: the Llama-3.1-8B layer at block sizes 16 and 256, and (full sweep) the
    64/8 and 32/32 layers at 16."""
    if dry:
        return [((4, 2, 16), 16)]
    found = [(db.LLAMA_3_1_8B, 16), (db.LLAMA_3_1_8B, 256)]
    return found if quick else found + [((64, 8, 128), 16), ((32, 32, 128), 16)]


def candidates(grid: Dict[str, Sequence[int]]) -> List[Tuple[int, int, int]]:
    """Every (tile, num_warps, num_stages) of the grid."""
    return list(itertools.product(grid["tiles"], grid["warps"], grid["stages"]))


def sweep(w: db.Workload, grid, *, native: bool) -> List[dict]:
    """One result per candidate: its time and bandwidth, or why it was not timed; resources when known."""
    timing = db.Timing(db.DO_BENCH if native else db.CPU_TIMER, small=False)
    results = []
    for tile, warps, stages in candidates(grid):
        entry = {"tile": tile, "num_warps": warps, "num_stages": stages}
        try:
            fn = db.package_kernel(w, tile=tile, num_warps=warps, num_stages=stages)
            problem = db.check_output(w, fn)
        except Exception as error:  # noqa: BLE001 - e.g. out of shared memory for this candidate
            problem = f"{type(error).__name__}: {str(error)[:120]}"
        if problem:
            results.append({**entry, "skipped": problem})
            continue
        ms = db.median_ms([fn], timing, rep_ms=50)
        resources = observed_resources(w.q, w.k_cache)(tile, warps, stages if native else 1)
        results.append(
            {
                **entry,
                "ms": ms,
                "gbps": w.bytes_moved() / (ms * 1e-3) / 1e9,
                "registers": resources.registers if resources else 0,
                "shared_bytes": resources.shared_bytes if resources else 0,
                "num_splits": fn.details["num_splits"],
            }
        )
        print(
            f"  tile {tile:3d} warps {warps} stages {stages}: {ms:8.4f} ms {results[-1]['gbps']:8.0f} GB/s", flush=True
        )
    return results


def winner(
    results: Sequence[dict],
    *,
    gpu: str,
    triton_version: str,
    date: str,
    block_size: int,
    head_dim: int,
    group: int,
    workload: str,
) -> TunedLaunch:
    """The fastest timed candidate as a table entry; refuses a sweep in which nothing was timed."""
    timed = [r for r in results if "ms" in r]
    if not timed:
        raise RuntimeError(f"no candidate could be timed for block size {block_size}: {results}")
    best = min(timed, key=lambda r: r["ms"])
    return TunedLaunch(
        gpu=gpu,
        triton=triton_version,
        date=date,
        block_size=block_size,
        head_dim=head_dim,
        group=group,
        tile=best["tile"],
        num_warps=best["num_warps"],
        num_stages=best["num_stages"],
        registers=best["registers"],
        shared_bytes=best["shared_bytes"],
        ms=round(best["ms"], 5),
        gbps=round(best["gbps"], 1),
        workload=workload,
    )


def run(out_dir: Path, *, quick: bool, dry: bool, write: bool, table: Path) -> dict:
    import triton

    native = MODE.native and not dry
    if write and dry and Path(table).resolve() == TABLE_PATH.resolve():
        raise SystemExit("a dry run never writes the package's launch table: pass --table PATH")
    device = "cuda" if native else "cpu"
    gpu = torch.cuda.get_device_name() if native else "CPU (dry run)"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if native else 0
    grid = DRY if dry or not native else (QUICK if quick else FULL)
    date = datetime.date.today().isoformat()
    report = {
        "gpu": gpu,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "date": date,
        "dry_run": not native,
        "grid": grid,
        "shapes": [],
        "winners": [],
    }
    winners = []
    for heads, block_size in shapes(quick, not native):
        batch, context = (32, 4096) if native else (2, 40)
        w = db.make_workload(
            batch,
            context,
            heads=heads,
            block_size=block_size,
            device=device,
            dtype=torch.bfloat16 if native else torch.float16,
            min_pool_bytes=8 * l2,
        )
        print(f"{w.label}: {len(candidates(grid))} candidates", flush=True)
        results = sweep(w, grid, native=native)
        best = winner(
            results,
            gpu=gpu,
            triton_version=triton.__version__,
            date=date,
            block_size=block_size,
            head_dim=heads[2],
            group=heads[0] // heads[1],
            workload=w.label,
        )
        winners.append(best)
        report["shapes"].append({"workload": w.label, "results": results})
        report["winners"].append(best.__dict__)
        print(f"  winner: tile {best.tile}, {best.num_warps} warps, {best.num_stages} stages ({best.gbps} GB/s)")
        del w
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tune_results.json").write_text(json.dumps(report, indent=2))
    if write:
        write_table(winners, table)
        print(f"merged {len(winners)} winners into {table}")
    print(f"wrote {out_dir / 'tune_results.json'}")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--quick", action="store_true", help="a short sweep (12 candidates, 2 shapes)")
    parser.add_argument("--write", action="store_true", help="merge the winners into the launch table")
    parser.add_argument("--table", type=Path, default=TABLE_PATH, help="the launch table to write")
    parser.add_argument("--dry-run", action="store_true", help="two candidates on a tiny shape in the interpreter")
    args = parser.parse_args(argv)
    if not MODE.native and not args.dry_run:
        print(f"No CUDA GPU that Triton supports ({MODE.reason}): a dry run of the sweep in the interpreter.")
    run(args.out, quick=args.quick, dry=args.dry_run or not MODE.native, write=args.write, table=args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
