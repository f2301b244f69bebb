"""paged_kv: the reference package of the paged-kv-course, one folder per layer.

- ``paged_kv.cache``: the mechanisms labs 01-05 rebuild (ledger, block managers, free queue, steps, audits);
- ``paged_kv.kernels``: lab 06's paged decode attention (torch reference, Triton kernels, GPU/interpreter mode);
- ``paged_kv.engine``: lab 07's serving engine (tiny model, KV contexts, runner, scheduler, ``LLMEngine``);
- ``paged_kv.lab``: what only notebooks, graders and benchmarks use (feedback, starters, pictures, widgets,
  workloads, kernel-lab launchers).

A layer imports only the layers listed above it (``tests/test_layers.py`` reads every import). The names
below are the short public API: what a student or instructor imports by name.
"""
from paged_kv.cache.free_queue import FreeBlockQueue
from paged_kv.cache.invariants import check_block_manager, check_kv_manager
from paged_kv.cache.ledger import (GPU_MEMORY_BYTES, MODEL_PRESETS, ModelPreset, blocks_per_request, blocks_that_fit,
                                   capacity_plan, estimate_kv_cache_bytes, get_preset, kv_budget_bytes,
                                   max_concurrent_requests)
from paged_kv.cache.manager import KVCacheManager, KVCacheManagerBase, Request
from paged_kv.cache.prefix_cache import Block, BlockManager, BlockManagerBase, Sequence
from paged_kv.cache.steps import decode_step, prefill
from paged_kv.kernels.attention import gather_kv, paged_decode_attention_ref
from paged_kv.kernels.triton_attention import paged_decode_attention

__version__ = "0.1.0"

__all__ = [
    "Block", "BlockManager", "BlockManagerBase", "FreeBlockQueue", "GPU_MEMORY_BYTES", "KVCacheManager",
    "KVCacheManagerBase", "MODEL_PRESETS",
    "ModelPreset", "Request", "Sequence", "blocks_per_request", "blocks_that_fit", "capacity_plan",
    "check_block_manager", "check_kv_manager", "decode_step", "estimate_kv_cache_bytes", "gather_kv",
    "get_preset", "kv_budget_bytes", "max_concurrent_requests", "paged_decode_attention", "paged_decode_attention_ref",
    "prefill",
]
