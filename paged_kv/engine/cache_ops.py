"""Writing new keys/values into a paged cache, and the torch reference for paged *prefill* attention.

Cache layout per layer (as in ``paged_kv.kernels.attention``): ``[num_blocks, block_size, num_kv_heads, head_dim]``.
A *slot* is a flat token address in that cache: ``slot = block_id * block_size + offset``, so token
``pos`` of a sequence goes to ``slot = block_table[pos // block_size] * block_size + pos % block_size``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from paged_kv.kernels.attention import _check_tables, _check_tensor, gather_kv


def slots_for(block_table, start: int, end: int, block_size: int) -> torch.Tensor:
    """Slots of positions ``start .. end - 1`` of one sequence, as an int64 tensor ``[end - start]``."""
    pos = torch.arange(start, end)
    table = torch.as_tensor(block_table, dtype=torch.int64)
    if end > start and (end - 1) // block_size >= len(table):
        raise ValueError(
            f"position {end - 1} needs logical block {(end - 1) // block_size} but the block table "
            f"has only {len(table)} block(s)"
        )
    return table[pos // block_size] * block_size + pos % block_size


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write ``k``/``v [N, num_kv_heads, head_dim]`` into the caches at ``slot_mapping [N]`` (in place)."""
    _check_tensor("k", k, 3)
    _check_tensor("v", v, 3)
    _check_tensor("k_cache", k_cache, 4)
    _check_tensor("slot_mapping", slot_mapping, 1)
    num_blocks, block_size, heads, dim = k_cache.shape
    if v.shape != k.shape or v_cache.shape != k_cache.shape or k.shape[1:] != (heads, dim):
        raise ValueError(
            f"k {tuple(k.shape)}, v {tuple(v.shape)} must be [N, {heads}, {dim}] to fit caches "
            f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}"
        )
    if slot_mapping.shape[0] != k.shape[0] or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 with {k.shape[0]} entries, got {slot_mapping.dtype} "
            f"{tuple(slot_mapping.shape)}"
        )
    if k.shape[0] and (int(slot_mapping.min()) < 0 or int(slot_mapping.max()) >= num_blocks * block_size):
        raise ValueError(f"slots must lie in 0..{num_blocks * block_size - 1}, got {slot_mapping.tolist()}")
    index = slot_mapping.long()
    k_cache.view(-1, heads, dim).index_copy_(0, index, k.to(k_cache.dtype))
    v_cache.view(-1, heads, dim).index_copy_(0, index, v.to(v_cache.dtype))


def copy_blocks(k_caches: Sequence[torch.Tensor], v_caches: Sequence[torch.Tensor], copies) -> None:
    """Copy-on-write's copies, in every layer: block ``dst`` gets every slot of block ``src`` (in place).

    ``copies``: ``(src, dst)`` pairs, as ``ForkingBlockManager.take_copies()`` returns them. They are
    done at once (all sources read, then all destinations written), which equals doing them in order
    only when no destination is also a source: that is refused, like ids outside the pool.
    """
    pairs = [(int(s), int(d)) for s, d in copies]
    if not pairs:
        return
    if len(k_caches) != len(v_caches) or not k_caches:
        raise ValueError(f"need one K and one V cache per layer, got {len(k_caches)} and {len(v_caches)}")
    num_blocks = k_caches[0].shape[0]
    src, dst = zip(*pairs)
    outside = sorted({b for b in src + dst if not 0 <= b < num_blocks})
    if outside:
        raise ValueError(f"block id(s) {outside} lie outside the pool 0..{num_blocks - 1}")
    if len(set(dst)) != len(dst) or set(dst) & set(src):
        raise ValueError(
            f"copies {pairs}: a destination is written twice or is also a source; perform the "
            "copies of one step, taken right after its may_append calls"
        )
    src_index = torch.tensor(src, dtype=torch.long, device=k_caches[0].device)
    dst_index = torch.tensor(dst, dtype=torch.long, device=k_caches[0].device)
    for cache in list(k_caches) + list(v_caches):
        if cache.shape[0] != num_blocks:
            raise ValueError(f"every layer's cache must hold {num_blocks} blocks, got {tuple(cache.shape)}")
        cache.index_copy_(0, dst_index, cache.index_select(0, src_index))


def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """Softmax attention with a boolean mask, grouped-query, in float32.

    ``q [S, Lq, Hq, D]``, ``k``/``v [S, Lk, Hkv, D]``, ``allowed [S, Lq, Lk]`` (every row must allow at
    least one key) -> ``[S, Lq, Hq, D]`` in ``q.dtype``.
    """
    s, lq, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.float().reshape(s, lq, hkv, hq // hkv, d)
    scores = torch.einsum("sqkgd,slkd->skgql", qg, k.float()) * scale
    scores = scores.masked_fill(~allowed[:, None, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("skgql,slkd->sqkgd", probs, v.float())
    return out.reshape(s, lq, hq, d).to(q.dtype)


def paged_prefill_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_lens: torch.Tensor,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """Causal attention of each sequence's *last* ``query_lens[s]`` tokens over all its ``seq_lens[s]`` keys.

    ``q [sum(query_lens), num_q_heads, head_dim]`` holds the queries of sequence 0, then 1, ...; their
    K/V must already be in the cache. Query ``i`` of sequence ``s`` sits at position
    ``seq_lens[s] - query_lens[s] + i`` and sees keys ``0 ..`` that position: cached prefix tokens
    (prefix-cache hits, earlier steps) and the new tokens before it. Returns ``[sum(query_lens), Hq, D]``.
    """
    _check_tensor("q", q, 3)
    _check_tensor("query_lens", query_lens, 1)
    _check_tables(block_tables, seq_lens, k_cache.shape[0], k_cache.shape[1])
    if query_lens.shape != seq_lens.shape or query_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"query_lens must be an int tensor shaped like seq_lens {tuple(seq_lens.shape)}")
    if int(query_lens.min()) < 1 or bool((query_lens > seq_lens).any()) or int(query_lens.sum()) != q.shape[0]:
        raise ValueError(
            f"need 1 <= query_lens <= seq_lens and sum(query_lens) == q.shape[0] = {q.shape[0]}; "
            f"got query_lens {query_lens.tolist()}, seq_lens {seq_lens.tolist()}"
        )
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    if k_cache.shape[3] != head_dim or num_q_heads % k_cache.shape[2]:
        raise ValueError(f"q {tuple(q.shape)} does not match the cache {tuple(k_cache.shape)} (head_dim, GQA groups)")
    scale = head_dim**-0.5 if scale is None else scale
    k = gather_kv(k_cache, block_tables, seq_lens)  # [S, Lk, Hkv, D]
    v = gather_kv(v_cache, block_tables, seq_lens)
    seq_lens, query_lens = seq_lens.long(), query_lens.long()
    num_seqs, max_q = len(seq_lens), int(query_lens.max())
    row = torch.arange(max_q, device=q.device)
    q_valid = row[None, :] < query_lens[:, None]  # [S, Lq]
    starts = torch.cumsum(query_lens, 0) - query_lens
    flat_index = (starts[:, None] + row[None, :])[q_valid]
    padded = q.new_zeros(num_seqs, max_q, num_q_heads, head_dim)
    padded[q_valid] = q[flat_index]
    q_pos = seq_lens[:, None] - query_lens[:, None] + row[None, :]  # [S, Lq]
    k_pos = torch.arange(k.shape[1], device=q.device)
    allowed = k_pos[None, None, :] <= q_pos[:, :, None]  # causal, also hides padding keys
    out = masked_attention(padded, k, v, allowed, scale)
    return out[q_valid]
