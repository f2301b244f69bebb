"""Step 4 of lab 06's catalogue: the decode kernel for the whole batch, one program per (sequence,
KV head) covering its query-head group."""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import decode_grid, define_kernel, tl, triton
from paged_kv.kernels import triton_kernels


@triton.jit
def _decode(
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
    seq,
    kv_head,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BUG: tl.constexpr,
):
    """A step 4 program with one mistake switched on by ``BUG`` (0: none)."""
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    if BUG != 10:  # 10: q, K and V kept in the cache's dtype (fp16 products and sums for fp16 inputs)
        q = q.to(tl.float32)
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    if BUG == 9:  # running max started at 0: exp(s - 0) underflows once a row's scores are all below about -88
        m = tl.zeros([GROUP_PAD], dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    if BUG == 11:  # the accumulator kept in the inputs' dtype, each tile's fp32 tl.dot cast back into it
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=q.dtype)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    kv = kv_head
    if BUG == 1:  # query head used as KV head
        kv = kv_head * GROUP
    num_blocks = tl.cdiv(seq_len, BLOCK_SIZE)
    if BUG == 2:  # walks one table entry too far, into padding, with unmasked loads
        num_blocks = num_blocks + 1
    for i in range(0, num_blocks):
        if BUG == 3:  # int32 offsets
            block = tl.load(table + i)
        elif BUG == 4:  # block index off by one
            block = tl.load(table + i + 1).to(tl.int64)
        else:
            block = tl.load(table + i).to(tl.int64)
        tokens = i * BLOCK_SIZE + slots
        live = tokens < seq_len
        offsets = block * stride_kb + slots[:, None] * stride_ks + kv * stride_kh + dims[None, :]
        if BUG == 2 or BUG == 6:  # loads not masked (scores still masked): 0 * NaN = NaN
            k = tl.load(k_cache_ptr + offsets).to(tl.float32)
            v = tl.load(v_cache_ptr + offsets).to(tl.float32)
        elif BUG == 10:
            k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0)
            v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0)
        else:
            k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
        if BUG == 8:  # q . k multiplied and summed in fp16
            s = tl.sum(q.to(tl.float16)[:, None, :] * k.to(tl.float16)[None, :, :], axis=2).to(tl.float32) * scale
        else:
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        if BUG != 7:  # 7: tail scores not masked
            s = tl.where(live[None, :], s, float("-inf"))
        if BUG == 5:  # no max subtraction
            p = tl.exp(s)
            l += tl.sum(p, axis=1)
            acc += tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        else:
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m = m_new
    tl.store(
        out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :],
        (acc / l[:, None]).to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )


def _decode_kernel_with(bug: int, name: str):
    """A @triton.jit step 4 kernel whose program (seq, kv_head) runs ``_decode`` with mistake ``bug``."""
    source = f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale,
           stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh,
           GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _decode(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale,
            stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh,
            tl.program_id(0), tl.program_id(1), GROUP, GROUP_PAD, BLOCK_SIZE, HEAD_DIM, {bug})
'''
    return define_kernel(source, name, globals())


decode_query_head_as_kv_head = _decode_kernel_with(1, "decode_query_head_as_kv_head")
decode_reads_padding_entries = _decode_kernel_with(2, "decode_reads_padding_entries")
decode_int32_offsets = _decode_kernel_with(3, "decode_int32_offsets")
decode_block_index_off_by_one = _decode_kernel_with(4, "decode_block_index_off_by_one")
decode_no_max_subtraction = _decode_kernel_with(5, "decode_no_max_subtraction")
decode_unmasked_loads = _decode_kernel_with(6, "decode_unmasked_loads")
decode_unmasked_tail_scores = _decode_kernel_with(7, "decode_unmasked_tail_scores")
decode_fp16_dot = _decode_kernel_with(8, "decode_fp16_dot")
decode_max_starts_at_zero = _decode_kernel_with(9, "decode_max_starts_at_zero")
decode_fp16_products = _decode_kernel_with(10, "decode_fp16_products")
decode_helper_correct = _decode_kernel_with(0, "decode_helper_correct")


@triton.jit
def decode_swapped_grid_one_head_at_a_time(
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
):
    """Correct, written differently: grid (kv_heads, seqs), each block read once, the group unrolled."""
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for g in tl.static_range(GROUP):
        head = kv_head * GROUP + g
        q = tl.load(q_ptr + seq * stride_qs + head * stride_qh + dims).to(tl.float32)
        m = -float("inf")
        l = 0.0
        acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
        for i in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
            block = tl.load(table + i).to(tl.int64)
            live = i * BLOCK_SIZE + slots < seq_len
            offsets = block * stride_kb + slots[:, None] * stride_ks + kv_head.to(tl.int64) * stride_kh + dims[None, :]
            k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
            s = tl.where(live, tl.sum(k * q[None, :], axis=1) * scale, -float("inf"))
            m_new = tl.maximum(m, tl.max(s, axis=0))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m - m_new)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            l = l * alpha + tl.sum(p, axis=0)
            m = m_new
        tl.store(out_ptr + seq * stride_os + head * stride_oh + dims, (acc / l).to(out_ptr.dtype.element_ty))


def swapped_grid(num_seqs, num_kv_heads):
    return (num_kv_heads, num_seqs)


def per_query_head_grid(num_seqs, num_kv_heads):
    """Launches a program per query head: K and V read GROUP times (the lab asks for once)."""
    return (num_seqs, num_kv_heads * 4)


# A kernel that hands the work to the package's kernel (inlined as a device function).
@triton.jit
def decode_calls_the_package_kernel(
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
):
    triton_kernels.paged_decode_kernel(
        q_ptr,
        k_cache_ptr,
        v_cache_ptr,
        block_tables_ptr,
        seq_lens_ptr,
        out_ptr,
        out_ptr,
        out_ptr,
        scale * 1.4426950408889634,
        stride_qs,
        stride_qh,
        1,
        stride_kb,
        stride_ks,
        stride_kh,
        1,
        stride_kb,
        stride_ks,
        stride_kh,
        1,
        stride_bt,
        1,
        stride_os,
        stride_oh,
        1,
        1 << 30,
        1,
        GROUP,
        16,
        HEAD_DIM,
        16,
        BLOCK_SIZE,
        16,
        False,
        True,
    )


# The step's bugs with the checks each must fail, and its correct variants.
BUGS = [
    (decode_query_head_as_kv_head, decode_grid, {"check_step4_batch"}),
    (decode_reads_padding_entries, decode_grid, {"check_step4_poisoned_memory"}),
    (decode_int32_offsets, decode_grid, {"check_step4_int64_offsets"}),
    (decode_block_index_off_by_one, decode_grid, {"check_step4_batch"}),
    (decode_no_max_subtraction, decode_grid, {"check_step4_batch"}),
    (decode_unmasked_loads, decode_grid, {"check_step4_poisoned_memory"}),
    (decode_unmasked_tail_scores, decode_grid, {"check_step4_batch", "check_step4_poisoned_memory"}),
    (decode_fp16_dot, decode_grid, {"check_step4_batch"}),
    (decode_fp16_products, decode_grid, {"check_step4_batch"}),
    (decode_max_starts_at_zero, decode_grid, {"check_step4_batch"}),
    (
        decode_helper_correct,
        per_query_head_grid,
        {"check_step4_batch", "check_step4_poisoned_memory", "check_step4_int64_offsets"},
    ),
]
VARIANTS = [(decode_swapped_grid_one_head_at_a_time, swapped_grid), (decode_helper_correct, decode_grid)]

# Pitfalls that only the hidden checks catch: the visible cell stays short and cheap, and these need a case
# it does not run (why, for each).
HIDDEN_ONLY = {
    decode_fp16_products: "the visible fp16 case has GROUP 2 and small logits, where an fp16 q . k stays within "
    "the tolerance; the hidden GROUP 8 case with large logits catches it",
}
