"""Three places for keys and values, one model: each class here is a ``KVContext`` for ``TinyLlama``.

- ``NoCache``: every forward pass sees whole sequences and recomputes all their K/V (training,
  and the "full recompute" oracle);
- ``ContiguousKVCache``: one sequence, one preallocated ``[max_len]`` buffer per layer (the
  textbook KV cache);
- ``PagedKV``: many sequences in a shared pool of blocks; new K/V go to their slots, attention reads
  through block tables (what the engine uses).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence as SequenceType

import torch
import torch.nn.functional as F

from paged_kv.kernels.attention import paged_decode_attention_ref
from paged_kv.engine.cache_ops import masked_attention, paged_prefill_attention_ref, store_kv

DecodeAttention = Callable[..., torch.Tensor]
"""``(q, k_cache, v_cache, block_tables, seq_lens, scale=None) -> out``: the contract of
``paged_decode_attention_ref`` (and of the Triton kernel of lab 06)."""


class NoCache:
    """Causal attention within each of the sequences laid side by side, nothing kept between calls."""

    def __init__(self, seq_lens: SequenceType[int]):
        lens = [int(n) for n in seq_lens]
        if not lens or min(lens) < 1:
            raise ValueError(f"seq_lens must be a non-empty list of positive ints, got {list(seq_lens)}")
        self.seq_lens = lens

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.shape[0] != sum(self.seq_lens):
            raise ValueError(f"got {q.shape[0]} tokens but seq_lens add up to {sum(self.seq_lens)}")
        group = q.shape[1] // k.shape[1]
        if len(set(self.seq_lens)) == 1:  # equal lengths (training batches): one fused call
            chunks = [(q, k, v)]
            shape = (len(self.seq_lens), self.seq_lens[0])
        else:
            chunks = list(zip(q.split(self.seq_lens), k.split(self.seq_lens), v.split(self.seq_lens)))
            shape = None
        outs = []
        for cq, ck, cv in chunks:
            b, t = shape if shape else (1, cq.shape[0])
            qh = cq.reshape(b, t, *cq.shape[1:]).transpose(1, 2)  # [B, Hq, T, D]
            kh = ck.reshape(b, t, *ck.shape[1:]).transpose(1, 2).repeat_interleave(group, dim=1)
            vh = cv.reshape(b, t, *cv.shape[1:]).transpose(1, 2).repeat_interleave(group, dim=1)
            out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
            outs.append(out.transpose(1, 2).reshape(b * t, *cq.shape[1:]))
        return torch.cat(outs) if len(outs) > 1 else outs[0]


class ContiguousKVCache:
    """One sequence's K/V in ``[num_layers, max_len, num_kv_heads, head_dim]`` buffers (textbook cache).

    A forward pass over ``n`` new tokens stores them at positions ``length .. length + n - 1`` in every
    layer; the caller then calls ``advance(n)``.
    """

    def __init__(
        self,
        num_layers: int,
        max_len: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        shape = (num_layers, max_len, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        start, n = self.length, q.shape[0]
        end = start + n
        if end > self.k.shape[1]:
            raise ValueError(f"the contiguous cache holds {self.k.shape[1]} tokens, cannot store up to {end}")
        self.k[layer, start:end] = k
        self.v[layer, start:end] = v
        q_pos = torch.arange(start, end, device=q.device)
        allowed = torch.arange(end, device=q.device)[None, :] <= q_pos[:, None]
        out = masked_attention(
            q[None], self.k[layer, :end][None], self.v[layer, :end][None], allowed[None], q.shape[-1] ** -0.5
        )
        return out[0]

    def advance(self, n: int) -> None:
        self.length += n


class PagedKV:
    """One engine step over a pool of blocks: per layer, ``k_caches[layer]`` is
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` (the same for ``v_caches``).

    New K/V are written at ``slot_mapping [N]``. Decode (``query_lens is None``: one new token per
    sequence) calls ``decode_attention``; prefill (``query_lens [S]``: each sequence's uncached suffix)
    calls ``paged_prefill_attention_ref``, whose queries also see the cached prefix.
    """

    def __init__(
        self,
        k_caches: List[torch.Tensor],
        v_caches: List[torch.Tensor],
        slot_mapping: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        query_lens: Optional[torch.Tensor] = None,
        decode_attention: DecodeAttention = paged_decode_attention_ref,
    ):
        if query_lens is None and slot_mapping.shape[0] != seq_lens.shape[0]:
            raise ValueError("a decode step has exactly one new token per sequence")
        self.k_caches, self.v_caches = k_caches, v_caches
        self.slot_mapping, self.block_tables, self.seq_lens = slot_mapping, block_tables, seq_lens
        self.query_lens = query_lens
        self.decode_attention = decode_attention

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_cache, v_cache = self.k_caches[layer], self.v_caches[layer]
        store_kv(k, v, k_cache, v_cache, self.slot_mapping)
        if self.query_lens is None:
            return self.decode_attention(q, k_cache, v_cache, self.block_tables, self.seq_lens)
        return paged_prefill_attention_ref(q, k_cache, v_cache, self.block_tables, self.seq_lens, self.query_lens)
