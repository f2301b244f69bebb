"""paged_kv: the reference package of the paged-kv-course, one folder per layer.

- ``paged_kv.cache``: the mechanisms labs 01-05 rebuild (ledger, block managers, free queue, steps, audits);
- ``paged_kv.kernels``: lab 06's paged decode attention (torch reference, Triton kernels, GPU/interpreter mode);
- ``paged_kv.engine``: lab 07's serving engine (tiny model, KV contexts, runner, scheduler, ``LLMEngine``);
- ``paged_kv.lab``: what only notebooks, graders and benchmarks use (feedback, starters, pictures, widgets,
  workloads, kernel-lab launchers).

A layer imports only the layers listed above it (``tests/test_layers.py`` reads every import). The names
below are the short public API: what a student or instructor imports by name.
"""

import importlib as _importlib

# Each public name and the module it comes from, imported on first use (PEP 562): a notebook that uses
# only the block manager (lab 05) or a grading kernel that has run nothing yet never imports torch.
_WHERE = {
    "FreeBlockQueue": "paged_kv.cache.free_queue",
    "check_block_manager": "paged_kv.cache.invariants",
    "check_kv_manager": "paged_kv.cache.invariants",
    **{
        name: "paged_kv.cache.ledger"
        for name in (
            "GPU_MEMORY_BYTES",
            "MODEL_PRESETS",
            "ModelPreset",
            "blocks_per_request",
            "blocks_that_fit",
            "capacity_plan",
            "estimate_kv_cache_bytes",
            "get_preset",
            "kv_budget_bytes",
            "max_concurrent_requests",
        )
    },
    "KVCacheManager": "paged_kv.cache.manager",
    "KVCacheManagerBase": "paged_kv.cache.manager",
    "Request": "paged_kv.cache.manager",
    **{name: "paged_kv.cache.prefix_cache" for name in ("Block", "BlockManager", "BlockManagerBase", "Sequence")},
    "decode_step": "paged_kv.cache.steps",
    "prefill": "paged_kv.cache.steps",
    "gather_kv": "paged_kv.kernels.attention",
    "paged_decode_attention_ref": "paged_kv.kernels.attention",
    "paged_decode_attention": "paged_kv.kernels.triton_attention",
}
_LAYERS = ("cache", "kernels", "engine", "lab")


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(_importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    if name in _LAYERS:
        return _importlib.import_module(f"paged_kv.{name}")
    raise AttributeError(f"module 'paged_kv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | set(_LAYERS))


__version__ = "0.1.0"

__all__ = [
    "Block",
    "BlockManager",
    "BlockManagerBase",
    "FreeBlockQueue",
    "GPU_MEMORY_BYTES",
    "KVCacheManager",
    "KVCacheManagerBase",
    "MODEL_PRESETS",
    "ModelPreset",
    "Request",
    "Sequence",
    "blocks_per_request",
    "blocks_that_fit",
    "capacity_plan",
    "check_block_manager",
    "check_kv_manager",
    "decode_step",
    "estimate_kv_cache_bytes",
    "gather_kv",
    "get_preset",
    "kv_budget_bytes",
    "max_concurrent_requests",
    "paged_decode_attention",
    "paged_decode_attention_ref",
    "prefill",
]
