"""The model runner: owns the paged KV cache and turns a scheduled batch into one forward pass.

For each scheduled sequence it lays out the tokens to compute (prefill: positions
``num_cached_tokens .. num_cached_tokens + num_scheduled_tokens - 1``, i.e. only what the prefix cache did
not serve, all of it or one chunk of it (lab 09); decode: the newest token), their *slots* in the pool, the block tables and the lengths, then runs the model with
a ``PagedKV`` context and returns the logits of each sequence's last computed position (a chunk that
stops short of the end gives logits nobody samples).
"""

from __future__ import annotations

from typing import List, Sequence as SequenceType, Tuple

import torch

from paged_kv.kernels.attention import paged_decode_attention_ref
from paged_kv.engine.cache_ops import copy_blocks, slots_for
from paged_kv.cache.checks import check_instance, check_positive_int
from paged_kv.engine.kv_context import DecodeAttention, PagedKV
from paged_kv.engine.model import TinyLlama
from paged_kv.cache.prefix_cache import Sequence


class ModelRunner:
    """``k_caches[layer]``/``v_caches[layer]``: ``[num_blocks, block_size, num_kv_heads, head_dim]``.

    ``copy_blocks(k_caches, v_caches, copies)`` performs copy-on-write's block copies (``cache_ops``'s by default).

    ``num_computed_tokens`` counts every token that went through the model: prefix-cache hits do not.
    """

    def __init__(
        self,
        model: TinyLlama,
        num_blocks: int,
        block_size: int,
        decode_attention: DecodeAttention = paged_decode_attention_ref,
        copy_blocks=copy_blocks,
    ):
        check_instance("model", model, TinyLlama)
        if not callable(copy_blocks):
            raise TypeError(
                f"copy_blocks must be callable like paged_kv.engine.cache_ops.copy_blocks, got "
                f"{type(copy_blocks).__name__}"
            )
        self.copy_blocks = copy_blocks
        if not callable(decode_attention):
            raise TypeError(
                f"decode_attention must be callable like paged_decode_attention_ref, got "
                f"{type(decode_attention).__name__}"
            )
        self.model = model
        self.num_blocks = check_positive_int("num_blocks", num_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        self.decode_attention = decode_attention
        c, weight = model.config, model.embed.weight
        shape = (self.num_blocks, self.block_size, c.num_kv_heads, c.head_dim)
        self.k_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(c.num_layers)]
        self.v_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(c.num_layers)]
        self.num_computed_tokens = 0

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    def _layout(self, seqs: List[Sequence], is_prefill: bool):
        ids: List[int] = []
        positions, slots, seq_lens, query_lens = [], [], [], []
        for seq in seqs:
            start, count = seq.num_cached_tokens, seq.num_scheduled_tokens
            end = start + count
            if is_prefill and (count < 1 or end > len(seq)):
                raise ValueError(
                    f"prefill of sequence {seq.seq_id}: cached {start} + scheduled {count} tokens must "
                    f"stay within its {len(seq)} tokens, with at least one scheduled"
                )
            if not is_prefill and (count != 1 or end != len(seq)):
                raise ValueError(
                    f"decode of sequence {seq.seq_id}: expected 1 scheduled token after "
                    f"{len(seq) - 1} cached, got {count} scheduled after {start} cached"
                )
            if -(-end // self.block_size) > len(seq.block_table) or (
                seq.block_table and max(seq.block_table) >= self.num_blocks
            ):
                raise ValueError(
                    f"sequence {seq.seq_id} computes up to {end} tokens but block table {seq.block_table} "
                    f"(pool of {self.num_blocks}); was may_append/allocate called?"
                )
            ids.extend(seq.token_ids[start:end])
            positions.append(torch.arange(start, end))
            slots.append(slots_for(seq.block_table, start, end, self.block_size))
            seq_lens.append(end)
            query_lens.append(count)
        width = max(len(seq.block_table) for seq in seqs)
        tables = [seq.block_table + [0] * (width - len(seq.block_table)) for seq in seqs]  # padding never read
        dev = self.device
        return (
            torch.tensor(ids, device=dev),
            torch.cat(positions).to(dev),
            torch.cat(slots).to(dev),
            torch.tensor(tables, dtype=torch.int32, device=dev),
            torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            torch.tensor(query_lens, dtype=torch.int32, device=dev),
        )

    @torch.inference_mode()
    def run(self, seqs: List[Sequence], is_prefill: bool, copies: SequenceType[Tuple[int, int]] = ()) -> torch.Tensor:
        """Compute the scheduled tokens of ``seqs``, write their K/V, return last-position logits ``[S, vocab]``.

        ``copies``: copy-on-write's ``(src, dst)`` block copies of this step, done first (every layer), before
        the step writes any new key or value (the last holder of a source block writes into it this step).
        They are done on the runner's own cache tensors, in place: ``copy_blocks`` gets new lists of them.
        """
        if not seqs:
            raise ValueError("run() needs at least one scheduled sequence")
        for seq in seqs:
            check_instance("seq", seq, Sequence)
        ids, positions, slots, tables, seq_lens, query_lens = self._layout(seqs, is_prefill)
        if copies:
            self.copy_blocks(list(self.k_caches), list(self.v_caches), list(copies))
        context = PagedKV(
            self.k_caches,
            self.v_caches,
            slots,
            tables,
            seq_lens,
            query_lens if is_prefill else None,
            self.decode_attention,
        )
        hidden = self.model(ids, positions, context)
        self.num_computed_tokens += ids.numel()
        last = torch.cumsum(query_lens.long(), 0) - 1
        return self.model.logits(hidden[last])
