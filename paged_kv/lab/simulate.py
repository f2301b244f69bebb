"""Small seeded workloads for the labs' pictures: request lengths and block-size sweeps."""

from __future__ import annotations

import random
from typing import Dict, List, Sequence, Tuple

from paged_kv.cache.checks import check_int, check_positive_int


def random_request_lengths(
    count: int = 64, seed: int = 0, max_prompt: int = 512, max_output: int = 256
) -> List[Tuple[int, int]]:
    """``count`` pairs ``(prompt_len, output_len)``, uniform in ``[1, max_prompt]`` and ``[1, max_output]``."""
    count = check_positive_int("count", count)
    max_prompt = check_positive_int("max_prompt", max_prompt)
    max_output = check_positive_int("max_output", max_output)
    rng = random.Random(check_int("seed", seed))
    return [(rng.randint(1, max_prompt), rng.randint(1, max_output)) for _ in range(count)]


def fragmentation_by_block_size(
    manager_cls, block_sizes: Sequence[int], lengths: Sequence[Tuple[int, int]]
) -> Dict[str, List[float]]:
    """Run every request (prefill, then decode ``output_len`` tokens) at each block size.

    Uses ``manager_cls(num_blocks, block_size, head_dim)`` with the lab's ``allocate_for_prefill`` and
    ``allocate_for_decode``. Returns per block size: ``tail_waste_tokens`` (total unused slots at the
    end), ``utilization`` (logical tokens / allocated slots), ``allocations`` (decode steps that took a
    new block) and ``table_entries`` (block-table entries held at the end, all requests together).
    """
    from paged_kv.cache.manager import Request

    result: Dict[str, List[float]] = {
        "block_size": [],
        "tail_waste_tokens": [],
        "utilization": [],
        "allocations": [],
        "table_entries": [],
    }
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
        entries = sum(len(r.block_table) for r in requests)
        allocated = entries * block_size
        result["block_size"].append(block_size)
        result["tail_waste_tokens"].append(allocated - logical)
        result["utilization"].append(logical / allocated)
        result["allocations"].append(allocations)
        result["table_entries"].append(entries)
    return result


#: Mean prompt and output lengths (tokens) of the two traces in the vLLM paper (Kwon et al., SOSP 2023,
#: §6.1, Figure 11). ``synthetic_lengths`` draws lengths with these means; it never reads the datasets.
TRACE_MEANS: Dict[str, Tuple[float, float]] = {
    "sharegpt": (161.31, 337.99),
    "alpaca": (19.31, 58.45),
}


def synthetic_lengths(
    kind: str, count: int, seed: int = 0, max_len: int = 2048, sigma: float = 0.9
) -> List[Tuple[int, int]]:
    """``count`` seeded ``(prompt_len, output_len)`` pairs shaped like the paper's ShareGPT or Alpaca trace.

    Each length is log-normal with the trace's mean (``TRACE_MEANS``) and spread ``sigma``, at least
    1, and a pair is redrawn until ``prompt_len + output_len <= max_len`` (OPT's 2,048-token context
    in the paper). Synthetic: the real traces are not downloaded, so only the means are matched.
    """
    import math

    if kind not in TRACE_MEANS:
        raise ValueError(f"kind must be one of {sorted(TRACE_MEANS)}, got {kind!r}")
    count = check_positive_int("count", count)
    max_len = check_int("max_len", max_len, minimum=2)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 < sigma <= 3:
        raise ValueError(f"sigma must be a float in (0, 3], got {sigma!r}")
    rng = random.Random(check_int("seed", seed))
    prompt_mean, output_mean = TRACE_MEANS[kind]

    def draw(mean: float) -> int:  # a log-normal with this mean: mu = ln(mean) - sigma^2 / 2
        return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))

    pairs = []
    while len(pairs) < count:
        prompt_len, output_len = draw(prompt_mean), draw(output_mean)
        if prompt_len + output_len <= max_len:
            pairs.append((prompt_len, output_len))
    return pairs
