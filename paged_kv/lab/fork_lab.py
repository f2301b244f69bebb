"""Lab 08's test helpers: what sharing looks like as plain data, small caches to copy, one engine step.

``pool_shape`` names blocks by where they first appear (``b0`` is the first block of the first table,
and so on), so two managers that share the same logical blocks compare equal whatever physical ids
their free queues handed out.
"""
from __future__ import annotations

from typing import Dict, List, Sequence as SequenceType, Tuple

from paged_kv.cache.checks import check_instance, check_positive_int
from paged_kv.cache.prefix_cache import BlockManagerBase, Sequence
from paged_kv.cache.steps import compute


def canonical_names(tables: SequenceType[SequenceType[int]]) -> Dict[int, str]:
    """``{physical id: "b<k>"}``, ``k`` counting blocks in their order of first appearance in ``tables``."""
    names: Dict[int, str] = {}
    for table in tables:
        for block_id in table:
            names.setdefault(block_id, f"b{len(names)}")
    return names


def shape_of_state(tables: SequenceType[SequenceType[int]], ref_counts: SequenceType[int], num_free: int,
                   copies: SequenceType[Tuple[int, int]]) -> dict:
    """``pool_shape`` from plain values: tables, ``ref_counts`` indexed by block id, free count, copies."""
    names = canonical_names(tables)
    return {"tables": [[names[b] for b in table] for table in tables],
            "ref counts": {names[b]: ref_counts[b] for b in names},
            "free blocks": num_free,
            "copies": [(names.get(src, f"not held: {src}"), names.get(dst, f"not held: {dst}")) for src, dst in copies]}


def pool_shape(manager: BlockManagerBase, seqs: SequenceType[Sequence]) -> dict:
    """The sharing of ``seqs``' tables, independent of physical ids: ``{"tables": [["b0", "b1"], ["b0",
    "b2"]], "ref counts": {"b0": 2, ...}, "free blocks": n, "copies": [("b1", "b2")]}`` (copies: the
    manager's ``pending_copies``, if it has them)."""
    check_instance("manager", manager, BlockManagerBase)
    seqs = list(seqs)
    for seq in seqs:
        check_instance("seq", seq, Sequence)
    return shape_of_state([list(s.block_table) for s in seqs], [b.ref_count for b in manager.blocks],
                          manager.num_free_blocks, list(getattr(manager, "pending_copies", [])))


def step_computed(manager: BlockManagerBase, seqs: SequenceType[Sequence]) -> List[Tuple[int, int]]:
    """The engine's part of a decode step after ``may_append``: take the step's copies (the runner would
    perform them now), then each sequence's newest token is computed and cached. Returns the copies."""
    copies = manager.take_copies() if hasattr(manager, "take_copies") else []
    for seq in seqs:
        compute(manager, seq, len(seq) - seq.num_cached_tokens)
    return copies


def make_caches(num_layers: int, num_blocks: int, block_size: int = 2, num_kv_heads: int = 1,
                head_dim: int = 2) -> Tuple[List["torch.Tensor"], List["torch.Tensor"]]:
    """``(k_caches, v_caches)``: per layer ``[num_blocks, block_size, num_kv_heads, head_dim]`` float32
    tensors whose every value is different (K positive, V negative), so a copy shows where it came from."""
    import torch  # here, not at the top: the lab's other helpers run in boxes that never need torch

    shape = (check_positive_int("num_blocks", num_blocks), check_positive_int("block_size", block_size),
             check_positive_int("num_kv_heads", num_kv_heads), check_positive_int("head_dim", head_dim))
    per_layer = num_blocks * block_size * num_kv_heads * head_dim
    k = [torch.arange(per_layer, dtype=torch.float32).reshape(shape) + 1 + layer * per_layer
         for layer in range(check_positive_int("num_layers", num_layers))]
    return k, [-t for t in k]
