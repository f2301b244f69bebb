"""paged_decode_attention_ref equals SDPA on the gathered contiguous cache."""

import pytest
import torch
import torch.nn.functional as F

from paged_kv import gather_kv, paged_decode_attention_ref


def make_case(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim=16, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n in seq_lens) + 1  # one padding column
    num_blocks = sum(-(-n // block_size) for n in seq_lens) + 3
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype)
    perm = torch.randperm(num_blocks, generator=gen)  # scattered, non-monotonic tables
    tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)  # -1 padding is never read
    used = 0
    for s, n in enumerate(seq_lens):
        k = -(-n // block_size)
        tables[s, :k] = perm[used : used + k].to(torch.int32)
        used += k
    q = torch.randn(len(seq_lens), num_q_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, torch.tensor(seq_lens, dtype=torch.int32)


def sdpa_expected(q, k_cache, v_cache, tables, seq_lens):
    group = q.shape[1] // k_cache.shape[2]
    outs = []
    for s, n in enumerate(seq_lens.tolist()):
        k = gather_kv(k_cache, tables[s : s + 1], seq_lens[s : s + 1])[0, :n].float()  # [n, Hkv, D]
        v = gather_kv(v_cache, tables[s : s + 1], seq_lens[s : s + 1])[0, :n].float()
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, n, D]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(q[s].float()[:, None, :], k, v)[:, 0, :])
    return torch.stack(outs).to(q.dtype)


@pytest.mark.parametrize("block_size", [1, 16, 17])
@pytest.mark.parametrize("num_q_heads, num_kv_heads", [(4, 4), (8, 2), (6, 1)])
def test_reference_matches_sdpa_on_ragged_batches(block_size, num_q_heads, num_kv_heads):
    case = make_case([1, 5, 16, 17, 40], block_size, num_q_heads, num_kv_heads, seed=block_size)
    out = paged_decode_attention_ref(*case)
    assert out.shape == case[0].shape and out.dtype == case[0].dtype
    torch.testing.assert_close(out, sdpa_expected(*case), rtol=1e-5, atol=1e-5)


def test_reference_keeps_half_precision_dtype():
    case = make_case([7, 3], 4, 4, 2, dtype=torch.float16)
    out = paged_decode_attention_ref(*case)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, sdpa_expected(*case), rtol=2e-3, atol=2e-3)


def test_gather_kv_follows_block_table_and_zero_pads():
    cache = torch.arange(4 * 2 * 1 * 1, dtype=torch.float32).reshape(4, 2, 1, 1)
    tables = torch.tensor([[3, 0], [1, -1]], dtype=torch.int32)
    out = gather_kv(cache, tables, torch.tensor([3, 1], dtype=torch.int32))
    assert out[:, :, 0, 0].tolist() == [[6, 7, 0], [2, 0, 0]]


def test_custom_scale_is_used():
    case = make_case([9], 4, 2, 2)
    a = paged_decode_attention_ref(*case, scale=0.01)
    b = paged_decode_attention_ref(*case)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda c: (c[0][..., :8],) + c[1:], ValueError, "head_dim"),
        (lambda c: (c[0][:, :3],) + c[1:], ValueError, "multiple"),
        (lambda c: c[:3] + (c[3].float(), c[4]), TypeError, "int32"),
        (lambda c: c[:4] + (torch.tensor([0, 3], dtype=torch.int32),), ValueError, "seq_len"),
        (lambda c: c[:4] + (torch.tensor([99, 3], dtype=torch.int32),), ValueError, "seq_len"),
        (lambda c: c[:3] + (torch.full_like(c[3], 999), c[4]), ValueError, "outside"),
        (lambda c: (c[0].half(),) + c[1:], TypeError, "dtype"),
        (lambda c: (c[0].tolist(),) + c[1:], TypeError, "torch.Tensor"),
    ],
)
def test_reference_rejects_bad_inputs(mutate, error, match):
    case = make_case([5, 3], 4, 4, 2)
    with pytest.raises(error, match=match):
        paged_decode_attention_ref(*mutate(case))


def test_gather_kv_rejects_bad_tables():
    cache = torch.zeros(4, 2, 1, 1)
    with pytest.raises(ValueError, match="outside"):
        gather_kv(cache, torch.tensor([[9]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32))
    with pytest.raises(TypeError, match="int32"):
        gather_kv(cache, torch.tensor([[0.0]]), torch.tensor([1], dtype=torch.int32))
    with pytest.raises(ValueError, match="dimensions"):
        gather_kv(cache[0], torch.tensor([[0]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32))
