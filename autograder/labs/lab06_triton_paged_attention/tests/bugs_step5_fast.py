"""Step 5 of lab 06's catalogue: the fast decode kernel, ``tl.dot`` on ``TILE`` tokens at a time
whatever the block size."""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import define_kernel, tl, triton


@triton.jit
def _fast(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    scale,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_bt,
    stride_os,
    stride_oh,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TILE: tl.constexpr,
    BUG: tl.constexpr,
):
    """A step 5 program with one mistake switched on by ``BUG`` (0: none)."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    if BUG == 10:  # everything in fp32, as in step 4: tl.dot on fp32 tiles
        q = q.to(tl.float32)
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    if BUG == 8:  # running max started at 0: p = exp(s - 0) underflows (in fp16, for tl.dot) for very negative scores
        m = tl.zeros([GROUP_PAD], dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    if BUG == 7:  # the running sum kept in the inputs' dtype: fp16's largest value is 65504
        l = tl.zeros([GROUP_PAD], dtype=q.dtype)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    if BUG == 11:  # the accumulator kept in the inputs' dtype, each tile's fp32 tl.dot cast back into it
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=q.dtype)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    STEP: tl.constexpr = BLOCK_SIZE if BUG == 1 else TILE  # 1: the tile is a block (step 4's shape, with tl.dot)
    for start in range(0, seq_len, STEP):
        pos = start + tl.arange(0, STEP)
        live = pos < seq_len
        if BUG == 2:  # one table lookup per tile: wrong once a tile spans two blocks
            block = tl.load(table + start // BLOCK_SIZE).to(tl.int64) + tl.zeros([STEP], dtype=tl.int64)
        else:
            block = tl.load(table + pos // BLOCK_SIZE, mask=live, other=0).to(tl.int64)
        if BUG == 3:  # slot from the tile, not from the block
            slot = pos % STEP
        else:
            slot = pos % BLOCK_SIZE
        offsets = block[:, None] * stride_kb + slot[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
        k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0)
        if BUG == 10:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        if BUG == 4:  # broadcast products and tl.sum: right numbers, no tensor cores
            s = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
        elif BUG == 5:  # tl.dot accumulating in fp16
            s = tl.dot(q, tl.trans(k), out_dtype=tl.float16).to(tl.float32)
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        if BUG == 7:
            l = (l * alpha + tl.sum(p, axis=1)).to(l.dtype)
        else:
            l = l * alpha + tl.sum(p, axis=1)
        if BUG == 4:
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        elif BUG == 5:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, out_dtype=tl.float16).to(tl.float32)
        elif BUG == 9:  # p . V on fp32 tiles: V converted to match p, instead of p to V's dtype
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
        elif BUG == 10:
            acc = acc * alpha[:, None] + tl.dot(p, v)
        elif BUG == 11:
            acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(acc.dtype)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out_ptrs = out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :]
    out = (acc / l[:, None]).to(out_ptr.dtype.element_ty)
    if BUG == 6:  # padding rows stored: GROUP_PAD - GROUP rows of garbage over the next KV head's output
        tl.store(out_ptrs, out)
    else:
        tl.store(out_ptrs, out, mask=row_ok[:, None])


def _fast_kernel_with(bug: int, name: str):
    """A @triton.jit step 5 kernel whose program runs ``_fast`` with mistake ``bug``."""
    return define_kernel(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale,
           stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh,
           GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
           TILE: tl.constexpr):
    _fast(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale, stride_qs, stride_qh,
          stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh, GROUP, GROUP_PAD, BLOCK_SIZE, HEAD_DIM,
          TILE, {bug})
''',
        name,
        globals(),
    )


fast_tiles_follow_block_size = _fast_kernel_with(1, "fast_tiles_follow_block_size")
fast_one_block_per_tile = _fast_kernel_with(2, "fast_one_block_per_tile")
fast_slot_from_tile = _fast_kernel_with(3, "fast_slot_from_tile")
fast_broadcast_sums = _fast_kernel_with(4, "fast_broadcast_sums")
fast_fp16_accumulation = _fast_kernel_with(5, "fast_fp16_accumulation")
fast_padding_rows_stored = _fast_kernel_with(6, "fast_padding_rows_stored")
fast_fp16_running_sum = _fast_kernel_with(7, "fast_fp16_running_sum")
fast_max_starts_at_zero = _fast_kernel_with(8, "fast_max_starts_at_zero")
fast_fp32_tiles_into_second_dot = _fast_kernel_with(9, "fast_fp32_tiles_into_second_dot")
fast_fp32_tiles_throughout = _fast_kernel_with(10, "fast_fp32_tiles_throughout")
fast_fp16_accumulator = _fast_kernel_with(11, "fast_fp16_accumulator")
fast_helper_correct = _fast_kernel_with(0, "fast_helper_correct")


@triton.jit
def fast_last_tile_first_base2(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    scale,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_bt,
    stride_os,
    stride_oh,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TILE: tl.constexpr,
):
    """Correct, written differently: tiles from the last to the first, exp2 with log2(e) folded into the
    scale, V loaded after the softmax update, int64 addresses from the sequence on."""
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + rows
    q = tl.load(
        q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=(rows < GROUP)[:, None], other=0.0
    )
    qk_scale = scale * 1.4426950408889634
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    last = tl.cdiv(seq_len, TILE) - 1
    for j in range(0, last + 1):
        pos = (last - j) * TILE + tl.arange(0, TILE)
        live = pos < seq_len
        block = tl.load(block_tables_ptr + seq * stride_bt + pos // BLOCK_SIZE, mask=live, other=0).to(tl.int64)
        base = (
            block[:, None] * stride_kb + (pos % BLOCK_SIZE)[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
        )
        k = tl.load(k_cache_ptr + base, mask=live[:, None], other=0.0)
        s = tl.where(live[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        v = tl.load(v_cache_ptr + base, mask=live[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l = l * alpha + tl.sum(p, axis=1)
        m = m_new
    tl.store(
        out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :],
        (acc / l[:, None]).to(out_ptr.dtype.element_ty),
        mask=(rows < GROUP)[:, None],
    )


# (kernel, grid) pairs: bugs with the checks that must fail, and correct variants per step.


# The step's bugs with the checks each must fail, and its correct variants.
BUGS = [
    (fast_tiles_follow_block_size, None, {"check_step5_fast_build"}),
    (fast_one_block_per_tile, None, {"check_step5_correct"}),
    (fast_slot_from_tile, None, {"check_step5_correct"}),
    (fast_broadcast_sums, None, {"check_step5_fast_build"}),
    (fast_fp16_accumulation, None, {"check_step5_fast_build"}),
    (fast_padding_rows_stored, None, {"check_step5_correct"}),
    (fast_fp16_running_sum, None, {"check_step5_correct"}),
    (fast_max_starts_at_zero, None, {"check_step5_correct"}),
    (fast_fp32_tiles_into_second_dot, None, {"check_step5_fast_build"}),
    (fast_fp32_tiles_throughout, None, {"check_step5_fast_build"}),
    (fast_fp16_accumulator, None, {"check_step5_correct"}),
]
VARIANTS = [(fast_last_tile_first_base2, None), (fast_helper_correct, None)]

# Pitfalls that only the hidden checks catch: the visible cell stays short and cheap, and these need a case
# it does not run (why, for each).
HIDDEN_ONLY = {
    fast_fp16_running_sum: "l passes fp16's 65504 only past about 80k tokens: the hidden 128k-token case",
    fast_fp16_accumulator: "acc passes fp16's 65504 only with values around 1 past about 65k tokens: the hidden "
    "128k-token case",
    fast_max_starts_at_zero: "needs a row whose every score is very negative: the hidden large negative logits",
}
