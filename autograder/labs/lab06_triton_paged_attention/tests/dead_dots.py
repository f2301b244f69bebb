"""Step 5 kernels whose build holds tl.dot that the graded launches do not take their products from (issue 47):
each computes the right answer with broadcast products and tl.sum (``DEAD_DOTS``, each must earn no more than that
executed path alone, ``broadcast_only``), and correct kernels whose dots sit where a rule about the text could
mistake them for dead ones (``LIVE_VARIANTS``, each must keep full marks).

Every kernel keeps the stub's parameter list; ``_step5`` runs one program with the dots placed by ``HOW``.
"""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import define_kernel, tl, triton

# HOW: where the kernel's dots are (0: none at all, the executed path alone).
HOWS = {
    "broadcast_only": 0,
    "dots_behind_a_branch_never_taken": 1,  # the kernel: both dots under `if seq_len < 0`
    "dots_in_a_loop_that_runs_no_time": 2,
    "dots_discarded_by_where": 3,
    "dots_on_zeros_multiplied_by_zero": 4,
    "dots_never_stored": 5,
    "dots_that_cancel_each_other": 6,
    "dots_weighted_to_nothing": 7,
    "q_k_by_dot_p_v_behind_a_branch_never_taken": 8,
    "dots_on_long_sequences_only": 9,
    "dots_on_the_first_kv_head_only": 10,
    "dots_where_a_nan_cast_to_int_is_not_negative": 11,  # the interpreter's int32 of NaN is -2**31: never taken
    "dots_where_a_nan_cast_to_int_is_negative": 12,  # taken in the interpreter only: the compile box refuses it
}


@triton.jit
def _step5(
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
    HOW: tl.constexpr,
):
    """Step 5's program; the products come from per-row broadcasts and tl.sum unless ``HOW`` makes dots carry them."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    if HOW >= 11:  # NaN made from a loaded value: the compiler cannot fold it
        flag = (tl.load(q_ptr + seq * stride_qs).to(tl.float32) * 0.0 + float("nan")).to(tl.int32)
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(0, seq_len, TILE):
        pos = start + tl.arange(0, TILE)
        live = pos < seq_len
        block = tl.load(table + pos // BLOCK_SIZE, mask=live, other=0).to(tl.int64)
        offsets = block[:, None] * stride_kb + (pos % BLOCK_SIZE)[:, None] * stride_ks + kv_head * stride_kh
        k = tl.load(k_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
        qk = tl.zeros([GROUP_PAD, TILE], dtype=tl.float32)
        k32 = k.to(tl.float32)
        for r in range(GROUP):  # one query row at a time: a [TILE, HEAD_DIM] broadcast fits in registers
            q_r = tl.load(q_ptr + seq * stride_qs + (kv_head * GROUP + r) * stride_qh + dims).to(tl.float32)
            qk = tl.where(rows[:, None] == r, tl.sum(k32 * q_r[None, :], axis=1)[None, :], qk)
        if HOW == 1:
            if seq_len < 0:
                qk = tl.dot(q, tl.trans(k))
        elif HOW == 8:
            qk = tl.dot(q, tl.trans(k))
        elif HOW == 2:
            for _ in range(seq_len, seq_len):
                qk = tl.dot(q, tl.trans(k))
        elif HOW == 3:
            qk = tl.where(seq_len < 0, tl.dot(q, tl.trans(k)), qk)
        elif HOW == 4:
            qk = qk + tl.dot(q * 0.0, tl.trans(k)) * 0.0
        elif HOW == 5:
            unused = tl.dot(q, tl.trans(k))  # noqa: F841
        elif HOW == 6:
            qk = qk + tl.dot(q, tl.trans(k)) - tl.dot(q, tl.trans(k))
        elif HOW == 7:
            qk = qk * 0.999 + tl.dot(q, tl.trans(k)) * 0.001
        elif HOW == 9:
            if seq_len > 100:
                qk = tl.dot(q, tl.trans(k))
        elif HOW == 10:
            if kv_head == 0:
                qk = tl.dot(q, tl.trans(k))
        elif HOW == 11:
            if flag >= 0:
                qk = tl.dot(q, tl.trans(k))
        elif HOW == 12:
            if flag < 0:
                qk = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], qk * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        pv = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
        v32 = v.to(tl.float32)
        for r in range(GROUP):
            p_r = tl.sum(tl.where(rows[:, None] == r, p, 0.0), axis=0)
            pv = tl.where(rows[:, None] == r, tl.sum(p_r[:, None] * v32, axis=0)[None, :], pv)
        if HOW == 1:
            if seq_len < 0:
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 2:
            for _ in range(seq_len, seq_len):
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 3:
            pv = tl.where(seq_len < 0, tl.dot(p.to(v.dtype), v), pv)
        elif HOW == 4:
            pv = pv + tl.dot(p.to(v.dtype) * 0.0, v) * 0.0
        elif HOW == 5:
            unused = tl.dot(p.to(v.dtype), v)  # noqa: F841
        elif HOW == 6:
            pv = pv + tl.dot(p.to(v.dtype), v) - tl.dot(p.to(v.dtype), v)
        elif HOW == 7:
            pv = pv * 0.999 + tl.dot(p.to(v.dtype), v) * 0.001
        elif HOW == 8:
            if seq_len < 0:
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 9:
            if seq_len > 100:
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 10:
            if kv_head == 0:
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 11:
            if flag >= 0:
                pv = tl.dot(p.to(v.dtype), v)
        elif HOW == 12:
            if flag < 0:
                pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m = m_new
    out = (acc / l[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :], out, mask=row_ok[:, None])


def _kernel(how: str):
    """A @triton.jit step 5 kernel named ``fast_<how>`` whose program is ``_step5`` with ``HOWS[how]``."""
    name = f"fast_{how}"
    return define_kernel(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale,
           stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh,
           GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
           TILE: tl.constexpr):
    _step5(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale, stride_qs, stride_qh,
           stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh, GROUP, GROUP_PAD, BLOCK_SIZE, HEAD_DIM,
           TILE, {HOWS[how]})
''',
        name,
        {"_step5": _step5},
    )


DEAD_DOTS = {how: _kernel(how) for how in HOWS}


@triton.jit
def _live_step5(
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
    HOW: tl.constexpr,
):
    """Correct step 5 programs written differently: 1 both products transposed (K . q^T, V^T . p^T); 2 p . V
    accumulated by tl.dot's own acc argument; 3 the full tiles unmasked in a loop, then the last partial tile under
    a runtime ``if`` (its dots at other lines, and behind a branch some launches do not take)."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    full = seq_len // TILE * TILE if HOW == 3 else seq_len
    for start in range(0, full, TILE):
        pos = start + tl.arange(0, TILE)
        live = pos < seq_len
        block = tl.load(table + pos // BLOCK_SIZE, mask=live, other=0).to(tl.int64)
        offsets = block[:, None] * stride_kb + (pos % BLOCK_SIZE)[:, None] * stride_ks + kv_head * stride_kh
        k = tl.load(k_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
        if HOW == 1:
            s = tl.trans(tl.dot(k, tl.trans(q))) * scale
        else:
            s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        if HOW == 1:
            acc = acc * alpha[:, None] + tl.trans(tl.dot(tl.trans(v), tl.trans(p.to(v.dtype))))
        elif HOW == 2:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    if HOW == 3:
        if full < seq_len:
            pos = full + tl.arange(0, TILE)
            live = pos < seq_len
            block = tl.load(table + pos // BLOCK_SIZE, mask=live, other=0).to(tl.int64)
            offsets = block[:, None] * stride_kb + (pos % BLOCK_SIZE)[:, None] * stride_ks + kv_head * stride_kh
            k = tl.load(k_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
            v = tl.load(v_cache_ptr + offsets + dims[None, :], mask=live[:, None], other=0.0)
            s = tl.where(live[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
    out = (acc / l[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :], out, mask=row_ok[:, None])


def _live(name: str, how: int):
    return define_kernel(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale,
           stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh,
           GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
           TILE: tl.constexpr):
    _live_step5(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, scale, stride_qs,
                stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_os, stride_oh, GROUP, GROUP_PAD,
                BLOCK_SIZE, HEAD_DIM, TILE, {how})
''',
        name,
        {"_live_step5": _live_step5},
    )


LIVE_VARIANTS = [
    _live("fast_transposed_products", 1),
    _live("fast_dot_accumulates_in_place", 2),
    _live("fast_full_tiles_then_the_tail", 3),
]
