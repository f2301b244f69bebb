"""paged_kv: the reference package of the paged-kv-course.

One module per mechanism: ``ledger`` (capacity arithmetic, model presets), ``manager`` (the
tutorial's ``KVCacheManager``), ``prefix_cache`` (nano-vllm's ``BlockManager`` with prefix
caching), ``steps`` (engine-loop helpers), ``attention`` (torch paged decode reference),
``invariants`` (state audits), ``starters`` (the classes a lab's TODO class inherits from),
``feedback`` (readable checks) and ``viz`` (pictures).
"""
from .attention import gather_kv, paged_decode_attention_ref
from .free_queue import FreeBlockQueue
from .invariants import check_block_manager, check_kv_manager
from .ledger import (GPU_MEMORY_BYTES, MODEL_PRESETS, ModelPreset, blocks_per_request, blocks_that_fit,
                     capacity_plan, estimate_kv_cache_bytes, get_preset, kv_budget_bytes,
                     max_concurrent_requests)
from .manager import KVCacheManager, KVCacheManagerBase, Request
from .prefix_cache import Block, BlockManager, BlockManagerBase, Sequence
from .steps import decode_step, prefill

__version__ = "0.1.0"

__all__ = [
    "Block", "BlockManager", "BlockManagerBase", "FreeBlockQueue", "GPU_MEMORY_BYTES", "KVCacheManager",
    "KVCacheManagerBase", "MODEL_PRESETS",
    "ModelPreset", "Request", "Sequence", "blocks_per_request", "blocks_that_fit", "capacity_plan",
    "check_block_manager", "check_kv_manager", "decode_step", "estimate_kv_cache_bytes", "gather_kv",
    "get_preset", "kv_budget_bytes", "max_concurrent_requests", "paged_decode_attention_ref", "prefill",
]
