"""Small seeded workloads for the labs' pictures: request lengths and block-size sweeps."""
from __future__ import annotations

import random
from typing import Dict, List, Sequence, Tuple

from .checks import check_int, check_positive_int


def random_request_lengths(count: int = 64, seed: int = 0, max_prompt: int = 512,
                           max_output: int = 256) -> List[Tuple[int, int]]:
    """``count`` pairs ``(prompt_len, output_len)``, uniform in ``[1, max_prompt]`` and ``[1, max_output]``."""
    count = check_positive_int("count", count)
    max_prompt = check_positive_int("max_prompt", max_prompt)
    max_output = check_positive_int("max_output", max_output)
    rng = random.Random(check_int("seed", seed))
    return [(rng.randint(1, max_prompt), rng.randint(1, max_output)) for _ in range(count)]


def fragmentation_by_block_size(manager_cls, block_sizes: Sequence[int],
                                lengths: Sequence[Tuple[int, int]]) -> Dict[str, List[float]]:
    """Run every request (prefill, then decode ``output_len`` tokens) at each block size.

    Uses ``manager_cls(num_blocks, block_size, head_dim)`` with the lab's ``allocate_for_prefill`` and
    ``allocate_for_decode``. Returns per block size: ``tail_waste_tokens`` (total unused slots at the
    end), ``utilization`` (logical tokens / allocated slots) and ``allocations`` (decode steps that
    took a new block).
    """
    from .manager import Request

    result: Dict[str, List[float]] = {"block_size": [], "tail_waste_tokens": [], "utilization": [],
                                      "allocations": []}
    total_tokens = sum(p + o for p, o in lengths)
    for block_size in block_sizes:
        block_size = check_positive_int("block_size", block_size)
        manager = manager_cls(total_tokens + len(lengths), block_size, 1)
        requests, allocations = [], 0
        for i, (prompt_len, output_len) in enumerate(lengths):
            req = Request(i, prompt_len)
            manager.allocate_for_prefill(req)
            for _ in range(output_len):
                before = len(req.block_table)
                manager.allocate_for_decode(req)
                allocations += len(req.block_table) - before
            requests.append(req)
        logical = sum(r.seq_len for r in requests)
        allocated = sum(len(r.block_table) for r in requests) * block_size
        result["block_size"].append(block_size)
        result["tail_waste_tokens"].append(allocated - logical)
        result["utilization"].append(logical / allocated)
        result["allocations"].append(allocations)
    return result
