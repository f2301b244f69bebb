"""Capacity ledger: how many bytes the KV cache takes, and how much of it fits on a GPU.

All sizes are in bytes and all counts are Python ints, so the arithmetic is exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Union

from .checks import ceil_div, check_int, check_positive_int

GIB = 2**30

# Marketing memory sizes, read as GiB. Real cards expose a little less, and engines keep some memory
# for activations and the CUDA context; ``memory_utilization`` (vLLM's default is 0.9) models that.
GPU_MEMORY_BYTES: Dict[str, int] = {
    "24 GB (RTX 4090, L4)": 24 * GIB,
    "80 GB (A100, H100)": 80 * GIB,
    "141 GB (H200)": 141 * GIB,
}


def estimate_kv_cache_bytes(
    num_blocks: int,
    block_size: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int = 2,
) -> Dict[str, Union[int, List[int]]]:
    """Theoretical size of a paged KV cache pool (not an allocator's measured peak).

    Returns ``kv_bytes_per_token`` (K and V, every layer and KV head), ``kv_bytes_per_block``
    (``block_size`` tokens), ``total_cache_bytes`` (``num_blocks`` blocks) and ``layout_shape``,
    the per-block tensor shape ``[num_layers, 2, num_kv_heads, block_size, head_dim]``.
    """
    num_blocks = check_positive_int("num_blocks", num_blocks)
    block_size = check_positive_int("block_size", block_size)
    num_layers = check_positive_int("num_layers", num_layers)
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    head_dim = check_positive_int("head_dim", head_dim)
    dtype_bytes = check_positive_int("dtype_bytes", dtype_bytes)
    kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    kv_bytes_per_block = block_size * kv_bytes_per_token
    total_cache_bytes = num_blocks * kv_bytes_per_block
    return {
        "kv_bytes_per_token": kv_bytes_per_token,
        "kv_bytes_per_block": kv_bytes_per_block,
        "total_cache_bytes": total_cache_bytes,
        "layout_shape": [num_layers, 2, num_kv_heads, block_size, head_dim],
    }


@dataclass(frozen=True)
class ModelPreset:
    """The attention shape of a published model, copied from its ``config.json``.

    ``num_params`` is the total parameter count (for the weight footprint); ``max_context`` is the
    native ``max_position_embeddings``.
    """

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    num_params: int
    max_context: int

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of K and V that one token occupies across all layers."""
        ledger = estimate_kv_cache_bytes(1, 1, self.num_layers, self.num_kv_heads, self.head_dim, dtype_bytes)
        return ledger["kv_bytes_per_token"]

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes the weights take at ``dtype_bytes`` per parameter (2 for bf16/fp16)."""
        return self.num_params * check_positive_int("dtype_bytes", dtype_bytes)


MODEL_PRESETS: Dict[str, ModelPreset] = {
    preset.name: preset
    for preset in (
        ModelPreset("Llama-3.1-8B", 32, 32, 8, 128, 8_030_000_000, 131_072),
        ModelPreset("Llama-3.1-70B", 80, 64, 8, 128, 70_550_000_000, 131_072),
        ModelPreset("Qwen2.5-7B", 28, 28, 4, 128, 7_620_000_000, 32_768),
        ModelPreset("Mistral-7B-v0.3", 32, 32, 8, 128, 7_250_000_000, 32_768),
        # Llama-2-7B has no grouped-query attention (32 KV heads): the contrast shows what GQA saves.
        ModelPreset("Llama-2-7B", 32, 32, 32, 128, 6_740_000_000, 4_096),
    )
}


def get_preset(name: str) -> ModelPreset:
    """Look a model preset up by name, with the list of known names in the error."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r}")
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; known presets: {sorted(MODEL_PRESETS)}") from None


def blocks_that_fit(free_bytes: int, block_size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                    dtype_bytes: int = 2) -> int:
    """How many whole KV blocks fit in ``free_bytes`` of memory (0 when not even one does)."""
    free_bytes = check_int("free_bytes", free_bytes, minimum=0)
    per_block = estimate_kv_cache_bytes(1, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes)
    return free_bytes // per_block["kv_bytes_per_block"]


def blocks_per_request(request_len: int, block_size: int) -> int:
    """Blocks a request of ``request_len`` tokens holds: the ceiling of ``request_len / block_size``."""
    request_len = check_positive_int("request_len", request_len)
    block_size = check_positive_int("block_size", block_size)
    return ceil_div(request_len, block_size)


def max_concurrent_requests(num_blocks: int, block_size: int, request_len: int) -> int:
    """How many requests of ``request_len`` tokens a pool of ``num_blocks`` blocks can hold at once."""
    num_blocks = check_int("num_blocks", num_blocks, minimum=0)
    return num_blocks // blocks_per_request(request_len, block_size)


def kv_budget_bytes(gpu_bytes: int, weight_bytes: int, memory_utilization: float = 0.9) -> int:
    """Bytes left for the KV cache: ``gpu_bytes * memory_utilization - weight_bytes``, floored at 0."""
    gpu_bytes = check_positive_int("gpu_bytes", gpu_bytes)
    weight_bytes = check_int("weight_bytes", weight_bytes, minimum=0)
    if isinstance(memory_utilization, bool) or not isinstance(memory_utilization, (int, float)):
        raise TypeError(f"memory_utilization must be a float in (0, 1], got {memory_utilization!r}")
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    return max(0, int(gpu_bytes * memory_utilization) - weight_bytes)


def capacity_plan(model: Union[str, ModelPreset], gpu_bytes: int, *, block_size: int = 16,
                  kv_dtype_bytes: int = 2, weight_dtype_bytes: int = 2, request_len: int = 4096,
                  memory_utilization: float = 0.9) -> Dict[str, int]:
    """What one GPU holds for ``model``: KV budget after the weights, blocks, tokens and requests.

    Every value is an int: bytes for ``*_bytes`` keys, counts for the rest.
    """
    preset = get_preset(model) if isinstance(model, str) else model
    if not isinstance(preset, ModelPreset):
        raise TypeError(f"model must be a preset name or a ModelPreset, got {type(model).__name__}")
    weights = preset.weight_bytes(weight_dtype_bytes)
    budget = kv_budget_bytes(gpu_bytes, weights, memory_utilization)
    num_blocks = blocks_that_fit(budget, block_size, preset.num_layers, preset.num_kv_heads,
                                 preset.head_dim, kv_dtype_bytes)
    return {
        "weight_bytes": weights,
        "kv_budget_bytes": budget,
        "kv_bytes_per_token": preset.kv_bytes_per_token(kv_dtype_bytes),
        "num_blocks": num_blocks,
        "max_tokens": num_blocks * block_size,
        "max_requests": max_concurrent_requests(num_blocks, block_size, request_len),
    }
