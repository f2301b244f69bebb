"""Torch reference for paged decode attention (one new query token per sequence).

Shapes: ``q [num_seqs, num_q_heads, head_dim]``; ``k_cache``/``v_cache``
``[num_blocks, block_size, num_kv_heads, head_dim]``; ``block_tables`` int ``[num_seqs, max_blocks]``
(entries past a sequence's last block are padding and never read); ``seq_lens`` int ``[num_seqs]``.
Query head ``h`` reads KV head ``h // (num_q_heads // num_kv_heads)`` (grouped-query attention).
Token ``pos`` of sequence ``s`` lives at ``k_cache[block_tables[s, pos // block_size], pos % block_size]``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

_INDEX_DTYPES = (torch.int32, torch.int64)


def _check_tensor(name: str, value, ndim: int) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")


def check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens) -> Tuple[int, int, int, int, int]:
    """Validate shapes, dtypes and ranges; return ``(num_seqs, num_q_heads, num_kv_heads, head_dim, block_size)``."""
    _check_tensor("q", q, 3)
    _check_tensor("k_cache", k_cache, 4)
    _check_tensor("v_cache", v_cache, 4)
    _check_tensor("block_tables", block_tables, 2)
    _check_tensor("seq_lens", seq_lens, 1)
    num_seqs, num_q_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, kv_dim = k_cache.shape
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache shape {tuple(k_cache.shape)}")
    if kv_dim != head_dim:
        raise ValueError(f"q has head_dim {head_dim} but the cache has head_dim {kv_dim}")
    if not q.is_floating_point() or q.dtype != k_cache.dtype or q.dtype != v_cache.dtype:
        raise TypeError(
            f"q, k_cache, v_cache must share one float dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}"
        )
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads={num_q_heads} must be a multiple of num_kv_heads={num_kv_heads}")
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(
            f"q has {num_seqs} sequences but block_tables has {block_tables.shape[0]} rows and seq_lens "
            f"{seq_lens.shape[0]} entries"
        )
    _check_tables(block_tables, seq_lens, num_blocks, block_size)
    return num_seqs, num_q_heads, num_kv_heads, head_dim, block_size


def _check_tables(block_tables, seq_lens, num_blocks: int, block_size: int) -> None:
    if block_tables.dtype not in _INDEX_DTYPES or seq_lens.dtype not in _INDEX_DTYPES:
        raise TypeError(f"block_tables and seq_lens must be int32/int64, got {block_tables.dtype}, {seq_lens.dtype}")
    if block_tables.shape[0] != seq_lens.shape[0] or seq_lens.shape[0] == 0:
        raise ValueError(
            f"block_tables has {block_tables.shape[0]} rows but seq_lens has {seq_lens.shape[0]} entries "
            "(need the same number, at least one)"
        )
    max_len = block_tables.shape[1] * block_size
    if int(seq_lens.min()) < 1 or int(seq_lens.max()) > max_len:
        raise ValueError(f"every seq_len must be in 1..{max_len} (max_blocks * block_size), got {seq_lens.tolist()}")
    used = torch.arange(block_tables.shape[1], device=block_tables.device)[None, :] * block_size < seq_lens[:, None]
    live = block_tables[used]
    if live.numel() and (int(live.min()) < 0 or int(live.max()) >= num_blocks):
        raise ValueError(f"block_tables has ids outside 0..{num_blocks - 1} within the sequences' lengths")


def gather_kv(cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """Copy each sequence's tokens into logical order: ``[num_seqs, max_len, num_kv_heads, head_dim]``.

    ``cache`` is ``[num_blocks, block_size, num_kv_heads, head_dim]``; ``max_len = seq_lens.max()``;
    slots past a sequence's length hold zeros. Padding entries of ``block_tables`` are never read.
    """
    _check_tensor("cache", cache, 4)
    _check_tensor("block_tables", block_tables, 2)
    _check_tensor("seq_lens", seq_lens, 1)
    _check_tables(block_tables, seq_lens, cache.shape[0], cache.shape[1])
    block_size = cache.shape[1]
    max_len = int(seq_lens.max())
    pos = torch.arange(max_len, device=cache.device)
    valid = pos[None, :] < seq_lens[:, None].long()  # [S, L]
    logical_block = (pos // block_size).expand(len(seq_lens), -1)
    physical = torch.gather(block_tables.long(), 1, logical_block)  # [S, L]
    physical = torch.where(valid, physical, torch.zeros_like(physical))  # padding entries never read
    out = cache[physical, (pos % block_size)[None, :].expand_as(physical)]
    return out * valid[..., None, None].to(out.dtype)


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """Softmax attention of each sequence's query over its cached keys; returns ``[num_seqs, num_q_heads, head_dim]``.

    Computed in float32 and returned in ``q.dtype``; ``scale`` defaults to ``head_dim ** -0.5``.
    """
    num_seqs, num_q_heads, num_kv_heads, head_dim, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    if scale is None:
        scale = head_dim**-0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float, got {scale!r}")
    group = num_q_heads // num_kv_heads
    k = gather_kv(k_cache, block_tables, seq_lens).float()  # [S, L, Hkv, D]
    v = gather_kv(v_cache, block_tables, seq_lens).float()
    qg = q.float().reshape(num_seqs, num_kv_heads, group, head_dim)  # [S, Hkv, G, D]
    scores = torch.einsum("skgd,slkd->skgl", qg, k) * scale
    valid = torch.arange(k.shape[1], device=q.device)[None, :] < seq_lens[:, None].long()
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("skgl,slkd->skgd", probs, v)
    return out.reshape(num_seqs, num_q_heads, head_dim).to(q.dtype)
