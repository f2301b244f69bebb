"""Time per allocate+free cycle of ``BlockManager`` as the pool grows from 1e3 to 1e6 blocks.

Workload: every request is a shared 4-block prefix plus 4 blocks of its own (block size 16). After
the first cycle the prefix blocks sit free-but-cached at the back of the free queue, so each
admission pulls them out of the queue's far end. With nano-vllm's ``deque.remove`` that costs
O(pool size); with ``FreeBlockQueue`` it is O(1), and the time per cycle stays flat.

Writes a JSON file (default ``bench/results/block_manager.json``) and prints a table.
Usage: ``python bench/bench_block_manager.py [--sizes 1000 10000 ...] [--out PATH]``.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import deque
from pathlib import Path

from paged_kv import BlockManager, Sequence, prefill

BLOCK_SIZE = 16
PREFIX_BLOCKS = 4
OWN_BLOCKS = 4


class DequeBlockManager(BlockManager):
    """The same manager over nano-vllm's free ``deque`` (O(n) ``remove``), for comparison."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.free_block_ids = deque(range(num_blocks))


def make_requests(count: int):
    prefix = list(range(PREFIX_BLOCKS * BLOCK_SIZE))
    own = OWN_BLOCKS * BLOCK_SIZE
    return [Sequence(prefix + [10_000 + i] + [0] * (own - 1), block_size=BLOCK_SIZE) for i in range(count)]


def time_cycles(manager_cls, num_blocks: int, cycles: int, repeats: int = 5) -> dict:
    manager = manager_cls(num_blocks, BLOCK_SIZE)
    requests = make_requests(cycles * repeats + 2)  # every request has its own suffix: no stray hits
    prefill(manager, requests[-1])                  # warm-up: caches the shared prefix
    manager.deallocate(requests[-1])
    per_cycle = []
    for r in range(repeats):
        batch = requests[r * cycles:(r + 1) * cycles]
        start = time.perf_counter()
        for seq in batch:
            prefill(manager, seq)
            manager.deallocate(seq)
        per_cycle.append((time.perf_counter() - start) / cycles)
    hits = prefill(manager, requests[-2])
    assert hits == PREFIX_BLOCKS, f"the workload should hit {PREFIX_BLOCKS} cached blocks, got {hits}"
    return {"median_us": statistics.median(per_cycle) * 1e6, "min_us": min(per_cycle) * 1e6, "cycles": cycles,
            "repeats": repeats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--deque-cycles", type=int, default=50, help="cycles for the O(n) deque comparison")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "block_manager.json")
    args = parser.parse_args()

    rows = []
    print(f"{'blocks':>10} {'FreeBlockQueue us/cycle':>24} {'deque (nano-vllm) us/cycle':>28}")
    for size in args.sizes:
        ours = time_cycles(BlockManager, size, args.cycles)
        theirs = time_cycles(DequeBlockManager, size, args.deque_cycles, repeats=3)
        rows.append({"num_blocks": size, "free_block_queue": ours, "deque": theirs})
        print(f"{size:>10} {ours['median_us']:>24.1f} {theirs['median_us']:>28.1f}", flush=True)
    times = [row["free_block_queue"]["median_us"] for row in rows]
    growth = max(times) / min(times)
    verdict = "flat (O(1))" if growth < 2.0 else "GROWS with pool size"
    print(f"largest/smallest time per cycle: {growth:.2f}x -> {verdict}")
    result = {"benchmark": "BlockManager allocate+free cycle", "block_size": BLOCK_SIZE,
              "prefix_blocks": PREFIX_BLOCKS, "own_blocks": OWN_BLOCKS, "rows": rows,
              "growth_largest_over_smallest": growth, "o1": growth < 2.0,
              "python": platform.python_version(), "machine": platform.machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
