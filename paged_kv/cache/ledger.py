"""Capacity ledger: how many bytes the KV cache takes, and how much of it fits on a GPU.

All sizes are in bytes and all counts are Python ints, so the arithmetic is exact.

How engines size the pool (the model this module follows): the engine may use
``gpu_memory_utilization`` of the *whole* card (0.9 by default in vLLM's ``CacheConfig`` up to
v0.20, 0.92 since v0.21, vllm-project/vllm PR #38284; 0.9 in nano-vllm at commit bb823b3).
Everything it needs besides the KV cache is taken out of that fraction: the weights, and what a
profiling forward pass measures at start-up (the activation peak and non-torch memory such as NCCL
buffers; since vLLM v0.21 also the captured CUDA graphs). nano-vllm writes it as
``total * utilization - used - peak + current``. ``runtime_bytes`` is that measured part; with
``runtime_bytes=0`` the budget is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple, Union

from paged_kv.cache.checks import ceil_div, check_int, check_positive_int

GIB = 2**30

# Nominal memory sizes, read as GiB. Real cards report a little less to the engine (the 80 GB card of
# vLLM's log quoted in VLLM_PROFILE_LOG below shows 79.22 GiB).
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
    the tutorial's per-block teaching layout ``[num_layers, 2, num_kv_heads, block_size, head_dim]``
    (engines lay the pool out differently: see ``KV_LAYOUTS``; the byte counts are the same).
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


#: Where the same bytes live in real code: (who, tensor shape, what it means). The byte count of a
#: pool is the same in every layout; only the order of the axes (what is contiguous) differs.
KV_LAYOUTS: List[Tuple[str, str, str]] = [
    (
        "the tutorial (lab 01's layout_shape)",
        "[num_layers, 2, num_kv_heads, block_size, head_dim]",
        "one tensor per block: a teaching layout, no engine stores it this way",
    ),
    (
        "nano-vllm (model_runner.py, commit bb823b3)",
        "[2, num_layers, num_blocks, block_size, num_kv_heads, head_dim]",
        "one tensor for the whole pool; layer i reads kv_cache[0, i] (K) and kv_cache[1, i] (V)",
    ),
    (
        "vLLM v0.10, V1 FlashAttention backend",
        "[2, num_blocks, block_size, num_kv_heads, head_size]",
        "one tensor per layer, K at index 0 and V at index 1 (get_kv_cache_shape)",
    ),
    (
        "this course from lab 04 on (paged_kv.kernels.attention, lab 06's kernel)",
        "[num_blocks, block_size, num_kv_heads, head_dim]",
        "per layer, one tensor for K and one for V: FlashAttention's paged layout",
    ),
]


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
        ModelPreset("Qwen2.5-7B", 28, 28, 4, 128, 7_620_000_000, 131_072),  # base model (Instruct: 32,768),
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


def blocks_that_fit(
    free_bytes: int, block_size: int, num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int = 2
) -> int:
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


def _check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in (0, 1], got {value!r}")
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return float(value)


def kv_budget_bytes(gpu_bytes: int, weight_bytes: int, memory_utilization: float = 0.9, runtime_bytes: int = 0) -> int:
    """Bytes left for the KV cache, floored at 0:
    ``int(gpu_bytes * memory_utilization) - weight_bytes - runtime_bytes``.

    ``runtime_bytes`` is what the engine measures inside the same fraction besides the weights
    (activation peak, non-torch memory, CUDA graphs); the default 0 gives an upper bound.
    """
    gpu_bytes = check_positive_int("gpu_bytes", gpu_bytes)
    weight_bytes = check_int("weight_bytes", weight_bytes, minimum=0)
    runtime_bytes = check_int("runtime_bytes", runtime_bytes, minimum=0)
    memory_utilization = _check_fraction("memory_utilization", memory_utilization)
    return max(0, int(gpu_bytes * memory_utilization) - weight_bytes - runtime_bytes)


#: A real start-up log of vLLM's memory profiling, quoted in vllm-project/vllm PR #10511 (December 2024,
#: V0 worker): ``vllm serve meta-llama/Meta-Llama-3-8B`` (the attention shape and parameter count of
#: Llama-3.1-8B) on an 80 GB card at gpu_memory_utilization 0.90. Sizes in GiB, as the log prints them.
VLLM_PROFILE_LOG: Dict[str, object] = {
    "source": "vllm-project/vllm PR #10511 (Dec 2024): vllm serve meta-llama/Meta-Llama-3-8B",
    "model": "Llama-3.1-8B",
    "total_gpu_memory_gib": 79.22,
    "gpu_memory_utilization": 0.90,
    "usable_gib": 71.29,
    "weights_gib": 14.96,
    "non_torch_gib": 1.79,
    "activation_peak_gib": 1.26,
    "kv_cache_gib": 53.29,
}


def capacity_plan(
    model: Union[str, ModelPreset],
    gpu_bytes: int,
    *,
    block_size: int = 16,
    kv_dtype_bytes: int = 2,
    weight_dtype_bytes: int = 2,
    request_len: int = 4096,
    memory_utilization: float = 0.9,
    runtime_bytes: int = 0,
) -> Dict[str, int]:
    """What one GPU holds for ``model``: KV budget after the weights (and ``runtime_bytes``), blocks,
    tokens and ``request_len``-token requests.

    Every value is an int: bytes for ``*_bytes`` keys, counts for the rest. ``request_len`` may not
    exceed the model's ``max_context``; with ``runtime_bytes=0`` the numbers are upper bounds.
    """
    preset = get_preset(model) if isinstance(model, str) else model
    if not isinstance(preset, ModelPreset):
        raise TypeError(f"model must be a preset name or a ModelPreset, got {type(model).__name__}")
    request_len = check_positive_int("request_len", request_len)
    if request_len > preset.max_context:
        raise ValueError(
            f"request_len={request_len} is longer than {preset.name}'s context of "
            f"{preset.max_context} tokens (its max_position_embeddings)"
        )
    weights = preset.weight_bytes(weight_dtype_bytes)
    budget = kv_budget_bytes(gpu_bytes, weights, memory_utilization, runtime_bytes)
    num_blocks = blocks_that_fit(
        budget, block_size, preset.num_layers, preset.num_kv_heads, preset.head_dim, kv_dtype_bytes
    )
    return {
        "weight_bytes": weights,
        "kv_budget_bytes": budget,
        "kv_bytes_per_token": preset.kv_bytes_per_token(kv_dtype_bytes),
        "num_blocks": num_blocks,
        "max_tokens": num_blocks * block_size,
        "max_requests": max_concurrent_requests(num_blocks, block_size, request_len),
    }
