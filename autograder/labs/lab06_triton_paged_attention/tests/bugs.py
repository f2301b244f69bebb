"""Lab 06 kernels as students write them: realistic bugs (each must lose points on its step) and
correct kernels written differently (each must keep full marks).

Every kernel keeps the stub's parameter list. Bugs are named after the mistake.
"""

from paged_kv.kernels.triton_mode import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from paged_kv.kernels import triton_kernels  # noqa: E402


def _define(source: str, name: str, names: dict = None):
    """The @triton.jit function ``name`` that ``source`` defines, with this module's globals and ``names`` in scope."""
    import linecache

    filename = f"<lab06 catalogue {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {**globals(), **(names or {})}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def blocks_grid(seq_len, block_size):
    return (triton.cdiv(seq_len, block_size),)


def decode_grid(num_seqs, num_kv_heads):
    return (num_seqs, num_kv_heads)


# ----------------------------------------------------------------------------- step 1: gather


@triton.jit
def _gather(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BUG: tl.constexpr,
):
    """Step 1 with one mistake: 1 block index off by one, 2 unmasked tail, 3 int32 offsets, 4 Python int()."""
    i = tl.program_id(0)
    if BUG == 1:
        block = tl.load(block_table_ptr + i + 1).to(tl.int64)  # skips the first table entry
    elif BUG == 3:
        block = tl.load(block_table_ptr + i)  # int32: block * stride_kb wraps past 2**31
    elif BUG == 4:
        block = int(tl.load(block_table_ptr + i))  # the interpreter accepts int(), a GPU compiler does not
    else:
        block = tl.load(block_table_ptr + i).to(tl.int64)
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    tokens = i * BLOCK_SIZE + slots
    live = tokens < seq_len
    if BUG == 2:
        live = tokens >= 0  # writes the tail past the end of out
    keys = tl.load(
        k_cache_ptr + block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
        mask=live[:, None],
        other=0.0,
    )
    tl.store(out_ptr + tokens[:, None] * HEAD_DIM + dims[None, :], keys, mask=live[:, None])


def _gather_kernel_with(bug: int, name: str):
    return _define(
        f'''
@triton.jit
def {name}(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, stride_kb, stride_ks, stride_kh,
           BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _gather(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, stride_kb, stride_ks, stride_kh,
            BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
    )


gather_block_index_off_by_one = _gather_kernel_with(1, "gather_block_index_off_by_one")
gather_unmasked_tail = _gather_kernel_with(2, "gather_unmasked_tail")
gather_int32_offsets = _gather_kernel_with(3, "gather_int32_offsets")
gather_python_in_kernel = _gather_kernel_with(4, "gather_python_in_kernel")


@triton.jit
def gather_one_program_per_token(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    token = tl.program_id(0)
    block = tl.load(block_table_ptr + token // BLOCK_SIZE).to(tl.int64)
    dims = tl.arange(0, HEAD_DIM)
    row = tl.load(k_cache_ptr + block * stride_kb + (token % BLOCK_SIZE) * stride_ks + kv_head * stride_kh + dims)
    tl.store(out_ptr + token * HEAD_DIM + dims, row)


def token_grid(seq_len, block_size):
    return (seq_len,)


# ----------------------------------------------------------------------------- step 2: scores


@triton.jit
def _scores(
    q_ptr,
    k_cache_ptr,
    block_table_ptr,
    scores_ptr,
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
    """Step 2 with one mistake: 1 unmasked tail, 2 block index off by one, 3 scale forgotten, 4 int32 offsets."""
    i = tl.program_id(0)
    index = i
    if BUG == 2:
        index = tl.maximum(i - 1, 0)
    if BUG == 4:
        block = tl.load(block_table_ptr + index)  # int32: block * stride_kb wraps past 2**31
    else:
        block = tl.load(block_table_ptr + index).to(tl.int64)
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    tokens = i * BLOCK_SIZE + slots
    live = tokens < seq_len
    q = tl.load(q_ptr + dims).to(tl.float32)
    k = tl.load(
        k_cache_ptr + block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
        mask=live[:, None],
        other=0.0,
    ).to(tl.float32)
    scores = tl.sum(k * q[None, :], axis=1)
    if BUG != 3:
        scores = scores * scale
    if BUG != 1:
        scores = tl.where(live, scores, float("-inf"))
    tl.store(scores_ptr + tokens, scores)


def _scores_kernel_with(bug: int, name: str):
    return _define(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, block_table_ptr, scores_ptr, seq_len, kv_head, scale, stride_kb, stride_ks, stride_kh,
           BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _scores(q_ptr, k_cache_ptr, block_table_ptr, scores_ptr, seq_len, kv_head, scale, stride_kb, stride_ks,
            stride_kh, BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
    )


scores_unmasked_tail = _scores_kernel_with(1, "scores_unmasked_tail")
scores_block_index_off_by_one = _scores_kernel_with(2, "scores_block_index_off_by_one")
scores_forgets_scale = _scores_kernel_with(3, "scores_forgets_scale")
scores_int32_offsets = _scores_kernel_with(4, "scores_int32_offsets")


@triton.jit
def scores_one_program_loops(
    q_ptr,
    k_cache_ptr,
    block_table_ptr,
    scores_ptr,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + dims).to(tl.float32) * scale
    for i in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_table_ptr + i).to(tl.int64)
        tokens = i * BLOCK_SIZE + slots
        live = tokens < seq_len
        k = tl.load(
            k_cache_ptr + block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
            mask=live[:, None],
            other=0.0,
        ).to(tl.float32)
        scores = tl.sum(k * q[None, :], axis=1)
        tl.store(scores_ptr + tokens, tl.where(live, scores, -float("inf")))


def one_program_grid(seq_len, block_size):
    return (1,)


# ----------------------------------------------------------------------------- step 3: online softmax


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
    return _define(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, scale,
           stride_kb, stride_ks, stride_kh, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _attend(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, scale,
            stride_kb, stride_ks, stride_kh, BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
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


# ----------------------------------------------------------------------------- step 4: the decode kernel


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
    return _define(source, name)


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


# ----------------------------------------------------------------------------- step 5: make it fast


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
    return _define(
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
STEP_BUGS = {
    "step1": [
        (gather_block_index_off_by_one, blocks_grid, {"check_step1_gather"}),
        (gather_unmasked_tail, blocks_grid, {"check_step1_gather"}),
        (gather_int32_offsets, blocks_grid, {"check_step1_gather"}),
        (gather_python_in_kernel, blocks_grid, {"check_step1_gather"}),
    ],
    "step2": [
        (scores_unmasked_tail, blocks_grid, {"check_step2_scores"}),
        (scores_block_index_off_by_one, blocks_grid, {"check_step2_scores"}),
        (scores_forgets_scale, blocks_grid, {"check_step2_scores"}),
        (scores_int32_offsets, blocks_grid, {"check_step2_scores"}),
    ],
    "step3": [
        (attend_no_max_subtraction, None, {"check_step3_online_softmax"}),
        (attend_unmasked_tail, None, {"check_step3_online_softmax"}),
        (attend_forgets_to_rescale, None, {"check_step3_online_softmax"}),
        (attend_int32_offsets, None, {"check_step3_online_softmax"}),
        (attend_fp16_dot, None, {"check_step3_online_softmax"}),
        (attend_max_starts_at_zero, None, {"check_step3_online_softmax"}),
        (attend_fp16_products, None, {"check_step3_online_softmax"}),
    ],
    "step4": [
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
    ],
    "step5": [
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
    ],
}
STEP_VARIANTS = {
    "step1": [(gather_one_program_per_token, token_grid)],
    "step2": [(scores_one_program_loops, one_program_grid)],
    "step3": [(attend_reverse_order_base2, None)],
    "step4": [(decode_swapped_grid_one_head_at_a_time, swapped_grid), (decode_helper_correct, decode_grid)],
    "step5": [(fast_last_tile_first_base2, None), (fast_helper_correct, None)],
}

# Pitfalls that only the hidden checks catch: the visible cells stay short and cheap, and these need a case they
# do not run (why, for each). test_the_visible_tests_catch_every_pitfall leaves them out.
HIDDEN_ONLY = {
    decode_fp16_products: "the visible fp16 case has GROUP 2 and small logits, where an fp16 q . k stays within "
    "the tolerance; the hidden GROUP 8 case with large logits catches it",
    fast_fp16_running_sum: "l passes fp16's 65504 only past about 80k tokens: the hidden 128k-token case",
    fast_fp16_accumulator: "acc passes fp16's 65504 only with values around 1 past about 65k tokens: the hidden "
    "128k-token case",
    attend_max_starts_at_zero: "needs a row whose every score is below about -88: the hidden large negative logits",
    fast_max_starts_at_zero: "needs a row whose every score is very negative: the hidden large negative logits",
}
