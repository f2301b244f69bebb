"""Time per request life (``Sequence`` creation, prefix lookup, allocation, hashing, release) as the
pool grows from 1e3 to 1e6 blocks, next to nano-vllm's ``BlockManager`` when a checkout is given.

Workload: every request is a shared 4-block prefix plus 4 blocks of its own (block size 16). After
the first request the prefix blocks sit free-but-cached at the back of the free queue, so each
admission pulls them out of the queue's far end. With a ``deque`` (nano-vllm) ``remove`` costs
O(pool size); with ``FreeBlockQueue`` it is O(1), and the time per request stays flat.

The timed cycle is what an engine does per request: build the ``Sequence`` from a token list, admit
it (``can_allocate`` + ``allocate``), hash the computed blocks (``hash_blocks``), release it
(``deallocate``). ``--nanovllm PATH`` (a folder holding nano-vllm's ``nanovllm/`` package) times
nano-vllm's own classes on the same cycle; only ``nanovllm/engine/{block_manager,sequence}.py`` and
``nanovllm/sampling_params.py`` are imported (no torch, no model).

Writes a JSON file (default ``bench/results/block_manager.json``) and prints a table.
Usage: ``python bench/bench_block_manager.py [--sizes 1000 10000 ...] [--nanovllm PATH] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
import types
from collections import deque
from pathlib import Path
from typing import Callable, List

from paged_kv import BlockManager, Sequence, prefill

BLOCK_SIZE = 16
PREFIX_BLOCKS = 4
OWN_BLOCKS = 4


class DequeBlockManager(BlockManager):
    """The same manager over nano-vllm's free ``deque`` (O(n) ``remove``), for comparison."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.free_block_ids = deque(range(num_blocks))


def token_lists(count: int) -> List[List[int]]:
    """``count`` prompts: the shared prefix, then a suffix of their own (no stray hits between them)."""
    prefix = list(range(PREFIX_BLOCKS * BLOCK_SIZE))
    own = OWN_BLOCKS * BLOCK_SIZE
    return [prefix + [10_000 + i] + [0] * (own - 1) for i in range(count)]


def paged_kv_life(manager_cls) -> Callable[[int], Callable[[List[int]], int]]:
    """A factory: pool size -> one request's whole life on ``manager_cls``, returning its prefix hits."""

    def make(num_blocks: int):
        manager = manager_cls(num_blocks, BLOCK_SIZE)

        def life(tokens: List[int]) -> int:
            seq = Sequence(tokens, block_size=BLOCK_SIZE)
            hits = prefill(manager, seq)
            manager.deallocate(seq)
            return hits

        return life

    return make


def load_nanovllm(checkout: Path):
    """nano-vllm's ``BlockManager`` and ``Sequence`` from a checkout, without running its ``__init__``."""
    package = checkout / "nanovllm"
    if not (package / "engine" / "block_manager.py").exists():
        raise SystemExit(f"--nanovllm {checkout}: no nanovllm/engine/block_manager.py there")
    for name, path in (("nanovllm", package), ("nanovllm.engine", package / "engine")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    block_manager = importlib.import_module("nanovllm.engine.block_manager")
    sequence = importlib.import_module("nanovllm.engine.sequence")
    return block_manager.BlockManager, sequence.Sequence


def nanovllm_life(checkout: Path):
    manager_cls, sequence_cls = load_nanovllm(checkout)
    seq_cls = type("Sequence16", (sequence_cls,), {"block_size": BLOCK_SIZE})

    def make(num_blocks: int):
        manager = manager_cls(num_blocks, BLOCK_SIZE)

        def life(tokens: List[int]) -> int:  # what nano-vllm's scheduler does around one prefill
            seq = seq_cls(tokens)
            hits = manager.can_allocate(seq)
            manager.allocate(seq, hits)
            seq.num_scheduled_tokens = seq.num_tokens - seq.num_cached_tokens
            manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            manager.deallocate(seq)
            return hits

        return life

    return make


def time_lives(make, num_blocks: int, cycles: int, repeats: int = 5) -> dict:
    life = make(num_blocks)
    prompts = token_lists(cycles * repeats + 2)
    life(prompts[-1])  # warm-up: caches the shared prefix
    per_cycle = []
    for r in range(repeats):
        batch = prompts[r * cycles : (r + 1) * cycles]
        start = time.perf_counter()
        for tokens in batch:
            life(tokens)
        per_cycle.append((time.perf_counter() - start) / cycles)
    hits = life(prompts[-2])
    assert hits == PREFIX_BLOCKS, f"the workload should hit {PREFIX_BLOCKS} cached blocks, got {hits}"
    return {
        "median_us": statistics.median(per_cycle) * 1e6,
        "min_us": min(per_cycle) * 1e6,
        "cycles": cycles,
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--deque-cycles", type=int, default=50, help="requests timed on O(n) deque managers")
    parser.add_argument("--nanovllm", type=Path, help="a nano-vllm checkout (the folder that holds nanovllm/)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "block_manager.json")
    args = parser.parse_args()

    contenders = {
        "paged_kv": (paged_kv_life(BlockManager), args.cycles),
        "paged_kv_over_deque": (paged_kv_life(DequeBlockManager), args.deque_cycles),
    }
    if args.nanovllm:
        contenders["nanovllm"] = (nanovllm_life(args.nanovllm), args.deque_cycles)
    print("microseconds per request life (Sequence + admit + hash + release), median of 5 runs")
    print(f"{'blocks':>10}" + "".join(f"{name:>22}" for name in contenders))
    rows = []
    for size in args.sizes:
        row = {"num_blocks": size}
        for name, (make, cycles) in contenders.items():
            # a deque costs O(pool) per request: above 1e4 blocks time only --deque-cycles requests there
            row[name] = time_lives(make, size, args.cycles if size <= 10_000 else cycles)
        rows.append(row)
        print(f"{size:>10}" + "".join(f"{row[name]['median_us']:>22.1f}" for name in contenders), flush=True)
    times = [row["paged_kv"]["median_us"] for row in rows]
    growth = max(times) / min(times)
    print(
        f"paged_kv largest/smallest time per request: {growth:.2f}x -> "
        f"{'flat (O(1))' if growth < 2.0 else 'GROWS with pool size'}"
    )
    if args.nanovllm:
        ratio = rows[0]["paged_kv"]["median_us"] / rows[0]["nanovllm"]["median_us"]
        print(f"at {rows[0]['num_blocks']} blocks paged_kv takes {ratio:.2f}x nano-vllm's time per request")
    result = {
        "benchmark": "BlockManager request life",
        "block_size": BLOCK_SIZE,
        "prefix_blocks": PREFIX_BLOCKS,
        "own_blocks": OWN_BLOCKS,
        "rows": rows,
        "growth_largest_over_smallest": growth,
        "o1": growth < 2.0,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
