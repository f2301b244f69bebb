"""Triton kernels of the package's paged decode attention (importing this module needs ``triton``).

``paged_decode_kernel``: one program per (sequence, KV head, split). It loads the query heads of its
group as the M rows of a ``tl.dot`` (padded to ``GROUP_PAD >= 16``), walks its token range in tiles
of ``TILE`` tokens, looks each token's physical block up in the block table, and keeps a running
max and sum (online softmax, base 2). With one split it writes the output; with several it writes a
normalised partial output and its log-sum-exp, and ``merge_splits_kernel`` combines them.
Addresses are computed in int64 from the block id on (an H200-sized pool passes 2**31 elements).

Use ``paged_kv.kernels.triton_attention.paged_decode_attention``: it checks inputs and picks the launch.
"""

from paged_kv.kernels.triton_mode import configure, require_triton

require_triton()
MODE = configure()  # sets TRITON_INTERPRET=1 on CPU before any kernel below is decorated

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def paged_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    tables_ptr,
    lens_ptr,
    out_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    stride_qs,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_vd,
    stride_ts,
    stride_tb,
    stride_os,
    stride_oh,
    stride_od,
    tokens_per_split,
    num_splits,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    SPLIT: tl.constexpr,
    FP32_DOT: tl.constexpr,
):
    """``qk_scale`` is ``scale * log2(e)``; outputs ``[S, Hq, D]`` or, with ``SPLIT``, partials
    ``[S, Hq, num_splits, D]`` (fp32, normalised) and their base-2 log-sum-exp ``[S, Hq, num_splits]``."""
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + seq)
    start = split * tokens_per_split
    end = tl.minimum(seq_len, start + tokens_per_split)

    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, DIM_PAD)
    row_ok = rows < GROUP
    dim_ok = dims < HEAD_DIM
    q_heads = (kv_head * GROUP + rows).to(tl.int64)
    q = tl.load(
        q_ptr + seq * stride_qs + q_heads[:, None] * stride_qh + dims[None, :] * stride_qd,
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    table_row = tables_ptr + seq * stride_ts
    k_head = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_head = v_ptr + kv_head.to(tl.int64) * stride_vh
    for tile_start in range(start, end, TILE):
        pos = tile_start + tl.arange(0, TILE)
        live = pos < end
        block = tl.load(table_row + (pos // BLOCK_SIZE) * stride_tb, mask=live, other=0).to(tl.int64)
        slot = (pos % BLOCK_SIZE).to(tl.int64)
        kv_mask = live[:, None] & dim_ok[None, :]
        k = tl.load(
            k_head + block[:, None] * stride_kb + slot[:, None] * stride_ks + dims[None, :] * stride_kd,
            mask=kv_mask,
            other=0.0,
        )
        if FP32_DOT:
            scores = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            scores = tl.dot(q, tl.trans(k))
        scores = tl.where(live[None, :], scores * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(
            v_head + block[:, None] * stride_vb + slot[:, None] * stride_vs + dims[None, :] * stride_vd,
            mask=kv_mask,
            other=0.0,
        )
        if FP32_DOT:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new

    has_tokens = l > 0
    out = acc / tl.where(has_tokens, l, 1.0)[:, None]
    out_mask = row_ok[:, None] & dim_ok[None, :]
    if SPLIT:
        base = (seq * tl.num_programs(1) * GROUP + q_heads) * num_splits + split
        tl.store(part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :], out, mask=out_mask)
        lse = tl.where(has_tokens, m + tl.log2(tl.where(has_tokens, l, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + base, lse, mask=row_ok)
    else:
        tl.store(
            out_ptr + seq * stride_os + q_heads[:, None] * stride_oh + dims[None, :] * stride_od,
            out.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )


@triton.jit
def merge_splits_kernel(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    num_splits,
    stride_os,
    stride_oh,
    stride_od,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
    """One program per (sequence, query head): weight each split's output by ``2**(lse - max lse)``."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    num_heads = tl.num_programs(1)
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, DIM_PAD)
    split_ok = splits < num_splits
    base = (seq * num_heads + head) * num_splits + splits
    lse = tl.load(part_lse_ptr + base, mask=split_ok, other=float("-inf"))
    weight = tl.exp2(lse - tl.max(lse, 0))
    parts = tl.load(
        part_out_ptr + base[:, None] * HEAD_DIM + dims[None, :],
        mask=split_ok[:, None] & (dims < HEAD_DIM)[None, :],
        other=0.0,
    )
    out = tl.sum(weight[:, None] * parts, 0) / tl.sum(weight, 0)
    tl.store(
        out_ptr + seq * stride_os + head * stride_oh + dims * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=dims < HEAD_DIM,
    )
