"""A shared-system-prompt workload for lab 05: what prefix caching saves, request by request.

Requests are a few system prompts, each followed by the user's own tokens. ``replay`` admits them one
after another through any ``BlockManager``-like class (the student's in the lab), decodes their
answers, and releases each once ``concurrency`` newer requests have arrived, recording per request the
prompt tokens served from the cache, the prefill tokens actually computed and the blocks in use.
``prefix_caching=False`` replays the same requests with hashing switched off (nothing is ever
registered, so nothing can hit): the baseline.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Dict, List, Sequence as SequenceType, Tuple

from paged_kv.cache.checks import check_int, check_positive_int
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.cache.steps import decode_step, prefill

Request = Tuple[List[int], int]  # (prompt token ids, number of tokens to generate)


def system_prompt_requests(
    num_requests: int = 120,
    num_system_prompts: int = 3,
    system_len: int = 96,
    user_len: Tuple[int, int] = (8, 48),
    output_len: Tuple[int, int] = (4, 24),
    seed: int = 0,
) -> List[Request]:
    """``num_requests`` prompts: one of ``num_system_prompts`` shared prompts, then the user's own tokens."""
    num_requests = check_positive_int("num_requests", num_requests)
    num_system_prompts = check_positive_int("num_system_prompts", num_system_prompts)
    system_len = check_int("system_len", system_len, minimum=0)
    rng = random.Random(check_int("seed", seed))
    vocab = 32_000
    systems = [[rng.randrange(vocab) for _ in range(system_len)] for _ in range(num_system_prompts)]
    requests = []
    for _ in range(num_requests):
        own = [rng.randrange(vocab) for _ in range(rng.randint(*user_len))]
        requests.append((rng.choice(systems) + own or [0], rng.randint(*output_len)))
    return requests


def _without_prefix_caching(manager_cls) -> type:
    return type(f"{manager_cls.__name__}NoPrefixCache", (manager_cls,), {"hash_blocks": lambda self, seq: None})


def replay(
    manager_cls,
    requests: SequenceType[Request],
    *,
    num_blocks: int,
    block_size: int,
    concurrency: int = 8,
    prefix_caching: bool = True,
) -> Dict[str, List[int]]:
    """Run ``requests`` in order; per request: ``cached_tokens``, ``computed_tokens``, ``blocks_in_use``.

    At most ``concurrency`` requests are live; when a prompt does not fit, the oldest live request is
    released first (a simple stand-in for an engine's queueing). Raises ``ValueError`` if a single
    request cannot fit in an empty pool.
    """
    block_size = check_positive_int("block_size", block_size)
    concurrency = check_positive_int("concurrency", concurrency)
    cls = manager_cls if prefix_caching else _without_prefix_caching(manager_cls)
    manager = cls(check_positive_int("num_blocks", num_blocks), block_size)
    live: deque = deque()
    out: Dict[str, List[int]] = {"prompt_tokens": [], "cached_tokens": [], "computed_tokens": [], "blocks_in_use": []}
    for prompt, output_len in requests:
        seq = Sequence(prompt, block_size)
        while True:
            try:
                hits = prefill(manager, seq)
                break
            except NotImplementedError:  # a TODO not written yet (a RuntimeError subclass): not an OOM
                raise
            except RuntimeError:
                if not live:
                    raise ValueError(f"a {len(prompt)}-token request does not fit in {num_blocks} blocks") from None
                manager.deallocate(live.popleft())
        for step in range(output_len):
            while True:
                try:
                    decode_step(manager, seq, 1 + step)
                    break
                except NotImplementedError:
                    raise
                except RuntimeError:
                    if not live:
                        raise ValueError(
                            f"a request of {len(seq) + 1} tokens does not fit in {num_blocks} blocks"
                        ) from None
                    manager.deallocate(live.popleft())
        live.append(seq)
        if len(live) > concurrency:
            manager.deallocate(live.popleft())
        cached = hits * block_size
        out["prompt_tokens"].append(len(prompt))
        out["cached_tokens"].append(cached)
        out["computed_tokens"].append(len(prompt) - cached)
        out["blocks_in_use"].append(len(manager.used_block_ids))
    return out


def sweep(
    manager_cls,
    system_lens: SequenceType[int],
    block_sizes: SequenceType[int],
    *,
    num_requests: int = 60,
    seed: int = 0,
) -> Dict[int, List[float]]:
    """Fraction of prompt tokens served from the cache, per block size (key), per shared prefix length."""
    result: Dict[int, List[float]] = {}
    for block_size in block_sizes:
        fractions = []
        for system_len in system_lens:
            requests = system_prompt_requests(num_requests, system_len=system_len, seed=seed)
            longest = max(len(p) + o for p, o in requests)
            run = replay(manager_cls, requests, num_blocks=10 * (longest // block_size + 2), block_size=block_size)
            fractions.append(sum(run["cached_tokens"]) / sum(run["prompt_tokens"]))
        result[block_size] = fractions
    return result
