"""Writing K/V into slots and paged prefill attention (cached prefix + causal suffix) against dense math."""

import pytest
import torch

from paged_kv.kernels.attention import paged_decode_attention_ref
from paged_kv.engine.cache_ops import masked_attention, paged_prefill_attention_ref, slots_for, store_kv


def scattered_layout(seq_lens, block_size, num_kv_heads=2, head_dim=8, seed=0):
    """Random K/V per sequence, written into a shuffled pool; returns caches, tables and the dense K/V."""
    gen = torch.Generator().manual_seed(seed)
    blocks_each = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_each) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)  # garbage everywhere
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    tables, dense = [], []
    for n, count in zip(seq_lens, blocks_each):
        table, order = order[:count], order[count:]
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen)
        store_kv(k, v, k_cache, v_cache, slots_for(table, 0, n, block_size))
        tables.append(table)
        dense.append((k, v))
    width = max(map(len, tables))
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    return k_cache, v_cache, block_tables, dense


def dense_causal(q, k, v, start):
    """Queries at positions start.. over keys 0..; GQA by repetition; float64 for a trustworthy answer."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / q.shape[-1] ** 0.5
    q_pos = torch.arange(start, start + q.shape[0])[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[0])[None, :] > q_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).float()


def test_slots_follow_the_block_table():
    assert slots_for([7, 2], 0, 6, 4).tolist() == [28, 29, 30, 31, 8, 9]
    assert slots_for([7, 2], 5, 6, 4).tolist() == [9]
    with pytest.raises(ValueError, match="logical block 2"):
        slots_for([7, 2], 6, 9, 4)


def test_store_kv_writes_only_the_given_slots():
    k_cache, v_cache = torch.zeros(3, 2, 1, 4), torch.zeros(3, 2, 1, 4)
    k, v = torch.ones(2, 1, 4), 2 * torch.ones(2, 1, 4)
    store_kv(k, v, k_cache, v_cache, torch.tensor([5, 0]))
    assert k_cache[2, 1].eq(1).all() and k_cache[0, 0].eq(1).all() and v_cache[2, 1].eq(2).all()
    assert k_cache.sum() == 8 and v_cache.sum() == 16


@pytest.mark.parametrize("slots, match", [([6, 0], "slots must lie"), ([-1, 0], "slots must lie"), ([0], "entries")])
def test_store_kv_rejects_bad_slots_and_changes_nothing(slots, match):
    k_cache, v_cache = torch.zeros(3, 2, 1, 4), torch.zeros(3, 2, 1, 4)
    with pytest.raises(ValueError, match=match):
        store_kv(torch.ones(2, 1, 4), torch.ones(2, 1, 4), k_cache, v_cache, torch.tensor(slots))
    assert k_cache.abs().sum() == 0


def test_store_kv_rejects_wrong_head_shape():
    with pytest.raises(ValueError, match="must be"):
        store_kv(
            torch.ones(2, 2, 4),
            torch.ones(2, 2, 4),
            torch.zeros(3, 2, 1, 4),
            torch.zeros(3, 2, 1, 4),
            torch.tensor([0, 1]),
        )


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_prefill_over_cached_prefix_matches_dense_causal_attention(block_size):
    seq_lens, query_lens = [9, 1, 17, 5], [4, 1, 17, 2]  # some tokens cached, some new
    k_cache, v_cache, tables, dense = scattered_layout(seq_lens, block_size, seed=block_size)
    gen = torch.Generator().manual_seed(1)
    qs = [torch.randn(n, 4, 8, generator=gen) for n in query_lens]
    out = paged_prefill_attention_ref(
        torch.cat(qs), k_cache, v_cache, tables, torch.tensor(seq_lens), torch.tensor(query_lens)
    )
    expected = torch.cat([dense_causal(q, k, v, n - len(q)) for q, (k, v), n in zip(qs, dense, seq_lens)])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_prefill_with_one_query_each_equals_paged_decode():
    seq_lens = [5, 12, 1]
    k_cache, v_cache, tables, _ = scattered_layout(seq_lens, 4, seed=3)
    q = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(2))
    lens = torch.tensor(seq_lens)
    prefill = paged_prefill_attention_ref(q, k_cache, v_cache, tables, lens, torch.ones(3, dtype=torch.long))
    torch.testing.assert_close(prefill, paged_decode_attention_ref(q, k_cache, v_cache, tables, lens))


@pytest.mark.parametrize(
    "query_lens, match", [([3, 2], "query_lens <= seq_lens"), ([0, 1], "query_lens"), ([1, 1, 1], "shaped like")]
)
def test_prefill_rejects_inconsistent_lengths(query_lens, match):
    k_cache, v_cache, tables, _ = scattered_layout([2, 3], 2)
    with pytest.raises(ValueError, match=match):
        paged_prefill_attention_ref(
            torch.zeros(sum(query_lens), 4, 8), k_cache, v_cache, tables, torch.tensor([2, 3]), torch.tensor(query_lens)
        )


def test_masked_attention_ignores_masked_keys_entirely():
    q = torch.randn(1, 1, 2, 4)
    k, v = torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4)
    allowed = torch.tensor([[[True, False, False]]])
    out = masked_attention(q, k, v, allowed, 0.5)
    torch.testing.assert_close(out[0, 0], v[0, 0].expand(2, 4))
