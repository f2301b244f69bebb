"""Step 3 of lab 06's catalogue: one query head's attention output by online softmax, in one
program, block after block."""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import define_kernel, tl, triton


@triton.jit
def _block_scores(
    q,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    i,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MASK_TAIL: tl.constexpr,
    INT64: tl.constexpr = True,
    FP16_DOT: tl.constexpr = False,
):
    """Helper shared by the step 3 kernels below: scores and value tile of logical block i."""
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    if INT64:
        block = tl.load(block_table_ptr + i).to(tl.int64)
    else:
        block = tl.load(block_table_ptr + i)  # int32: block * stride_kb wraps past 2**31
    live = i * BLOCK_SIZE + slots < seq_len
    offsets = block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
    if FP16_DOT:  # q . k multiplied and summed in fp16 (the cache's type), not fp32
        k16 = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float16)
        v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
        s = tl.where(live, tl.sum(k16 * q.to(tl.float16)[None, :], axis=1).to(tl.float32) * scale, float("-inf"))
    elif MASK_TAIL:
        k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0).to(tl.float32)
        s = tl.where(live, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
    else:
        k = tl.load(k_cache_ptr + offsets).to(tl.float32)
        v = tl.load(v_cache_ptr + offsets).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
    return s, v


@triton.jit
def _attend(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BUG: tl.constexpr,
):
    """Step 3 with one mistake switched on by ``BUG``: 1 no max subtraction, 2 unmasked tail, 3 no rescaling,
    4 int32 offsets, 5 q . k in fp16, 6 running max started at 0."""
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + dims).to(tl.float32)
    m = float("-inf")
    if BUG == 6:  # "scores are usually positive": exp(s - 0) underflows to 0 once every score is below about -88
        m = 0.0
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for i in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        s, v = _block_scores(
            q,
            k_cache_ptr,
            v_cache_ptr,
            block_table_ptr,
            i,
            seq_len,
            kv_head,
            scale,
            stride_kb,
            stride_ks,
            stride_kh,
            BLOCK_SIZE,
            HEAD_DIM,
            BUG != 2,
            BUG != 4,
            BUG == 5,
        )
        if BUG == 1:
            p = tl.exp(s)  # overflows for large scores
            l += tl.sum(p, axis=0)
            acc += tl.sum(p[:, None] * v, axis=0)
        elif BUG == 3:
            m = tl.maximum(m, tl.max(s, axis=0))
            p = tl.exp(s - m)  # earlier blocks were summed against an older, smaller max
            l += tl.sum(p, axis=0)
            acc += tl.sum(p[:, None] * v, axis=0)
        else:
            m_new = tl.maximum(m, tl.max(s, axis=0))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new)
            l = l * alpha + tl.sum(p, axis=0)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            m = m_new
    tl.store(out_ptr + dims, (acc / l).to(out_ptr.dtype.element_ty))


def _attend_kernel_with(bug: int, name: str):
    return define_kernel(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, scale,
           stride_kb, stride_ks, stride_kh, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _attend(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, scale,
            stride_kb, stride_ks, stride_kh, BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
        globals(),
    )


@triton.jit
def attend_reverse_order_base2(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """Correct, written differently: last block first, exp2 with log2(e) folded into the scale."""
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + dims).to(tl.float32) * 1.4426950408889634
    m = -float("inf")
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    n = tl.cdiv(seq_len, BLOCK_SIZE)
    for j in range(0, n):
        s, v = _block_scores(
            q,
            k_cache_ptr,
            v_cache_ptr,
            block_table_ptr,
            n - 1 - j,
            seq_len,
            kv_head,
            scale,
            stride_kb,
            stride_ks,
            stride_kh,
            BLOCK_SIZE,
            HEAD_DIM,
            True,
        )
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + dims, (acc / l).to(out_ptr.dtype.element_ty))


attend_no_max_subtraction = _attend_kernel_with(1, "attend_no_max_subtraction")
attend_unmasked_tail = _attend_kernel_with(2, "attend_unmasked_tail")
attend_forgets_to_rescale = _attend_kernel_with(3, "attend_forgets_to_rescale")
attend_int32_offsets = _attend_kernel_with(4, "attend_int32_offsets")
attend_fp16_dot = _attend_kernel_with(5, "attend_fp16_dot")
attend_max_starts_at_zero = _attend_kernel_with(6, "attend_max_starts_at_zero")


@triton.jit
def attend_fp16_products(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """Step 3 with q and K kept in the cache's dtype: right in fp32, q . k multiplied and summed in fp16 for fp16."""
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + dims)
    m = float("-inf")
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for i in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_table_ptr + i).to(tl.int64)
        live = i * BLOCK_SIZE + slots < seq_len
        offsets = block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
        k = tl.load(k_cache_ptr + offsets, mask=live[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offsets, mask=live[:, None], other=0.0)
        s = tl.where(live, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + dims, (acc / l).to(out_ptr.dtype.element_ty))


# The step's bugs with the checks each must fail, and its correct variants.
BUGS = [
    (attend_no_max_subtraction, None, {"check_step3_online_softmax"}),
    (attend_unmasked_tail, None, {"check_step3_online_softmax"}),
    (attend_forgets_to_rescale, None, {"check_step3_online_softmax"}),
    (attend_int32_offsets, None, {"check_step3_online_softmax"}),
    (attend_fp16_dot, None, {"check_step3_online_softmax"}),
    (attend_max_starts_at_zero, None, {"check_step3_online_softmax"}),
    (attend_fp16_products, None, {"check_step3_online_softmax"}),
]
VARIANTS = [(attend_reverse_order_base2, None)]

# Pitfalls that only the hidden checks catch: the visible cell stays short and cheap, and these need a case
# it does not run (why, for each).
HIDDEN_ONLY = {
    attend_max_starts_at_zero: "needs a row whose every score is below about -88: the hidden large negative logits",
}
