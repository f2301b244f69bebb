"""Plain generation loops for one request, with no paging: the oracles the paged engine must match.

``generate_no_cache`` recomputes the whole sequence for every new token; ``generate_contiguous``
keeps the textbook contiguous KV cache. Both return the generated token ids.
"""

from __future__ import annotations

from typing import List, Sequence

import torch

from paged_kv.engine.kv_context import ContiguousKVCache, NoCache
from paged_kv.engine.model import TinyLlama
from paged_kv.engine.sampling import SamplingParams, sample_next


def _check(model: TinyLlama, prompt_ids: Sequence[int], params: SamplingParams) -> List[int]:
    if not isinstance(model, TinyLlama):
        raise TypeError(f"model must be a TinyLlama, got {type(model).__name__}")
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ValueError("the prompt must hold at least one token")
    if len(ids) + params.max_tokens - 1 > model.config.max_model_len:
        raise ValueError(
            f"prompt ({len(ids)}) + max_tokens ({params.max_tokens}) - 1 exceeds max_model_len "
            f"{model.config.max_model_len}"
        )
    return ids


@torch.inference_mode()
def generate_no_cache(
    model: TinyLlama, prompt_ids: Sequence[int], params: SamplingParams = SamplingParams()
) -> List[int]:
    """Every step runs the model over all tokens so far and keeps only the last position's logits."""
    ids = _check(model, prompt_ids, params)
    device = model.embed.weight.device
    gen, out = params.generator(), []
    for _ in range(params.max_tokens):
        tokens = torch.tensor(ids, device=device)
        hidden = model(tokens, torch.arange(len(ids), device=device), NoCache([len(ids)]))
        token = sample_next(model.logits(hidden[-1]), params.temperature, gen)
        ids.append(token)
        out.append(token)
    return out


@torch.inference_mode()
def generate_contiguous(
    model: TinyLlama, prompt_ids: Sequence[int], params: SamplingParams = SamplingParams()
) -> List[int]:
    """Prefill the prompt into a contiguous cache, then one token per step."""
    ids = _check(model, prompt_ids, params)
    c, device = model.config, model.embed.weight.device
    cache = ContiguousKVCache(
        c.num_layers,
        len(ids) + params.max_tokens,
        c.num_kv_heads,
        c.head_dim,
        dtype=model.embed.weight.dtype,
        device=device,
    )
    gen, out = params.generator(), []
    new = ids
    for _ in range(params.max_tokens):
        positions = torch.arange(cache.length, cache.length + len(new), device=device)
        hidden = model(torch.tensor(new, device=device), positions, cache)
        cache.advance(len(new))
        token = sample_next(model.logits(hidden[-1]), params.temperature, gen)
        out.append(token)
        new = [token]
    return out
