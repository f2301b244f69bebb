"""paged_kv: the reference package of the paged-kv-course.

One module per mechanism: ``ledger`` (capacity arithmetic, model presets), ``manager`` (the
tutorial's ``KVCacheManager``), ``prefix_cache`` (nano-vllm's ``BlockManager`` with prefix
caching), ``steps`` (engine-loop helpers), ``prefix_workload`` (lab 05's shared-prompt workload),
``attention`` (torch paged decode reference), ``invariants`` (state audits), ``starters`` (the classes
a lab's TODO class inherits from), ``feedback`` (readable checks), ``simulate`` (seeded workloads),
``baselines`` (contiguous reservation, the vLLM paper's Orca baselines, against paging), ``viz``
(pictures) and ``widgets``. Triton (lab 06): ``triton_attention`` (the paged decode kernel's entry
point; imports triton lazily), ``triton_kernels`` (the kernels), ``triton_mode`` (GPU or interpreter),
``triton_compile`` (offline builds for sm_80/sm_90), ``kernel_cases`` and ``kernel_lab`` (test inputs
and safe launches of students' kernels) and ``decode_bench`` (GPU timing, effective bandwidth).
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
from .triton_attention import paged_decode_attention

__version__ = "0.1.0"

__all__ = [
    "Block", "BlockManager", "BlockManagerBase", "FreeBlockQueue", "GPU_MEMORY_BYTES", "KVCacheManager",
    "KVCacheManagerBase", "MODEL_PRESETS",
    "ModelPreset", "Request", "Sequence", "blocks_per_request", "blocks_that_fit", "capacity_plan",
    "check_block_manager", "check_kv_manager", "decode_step", "estimate_kv_cache_bytes", "gather_kv",
    "get_preset", "kv_budget_bytes", "max_concurrent_requests", "paged_decode_attention", "paged_decode_attention_ref",
    "prefill",
]
