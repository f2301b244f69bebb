"""Step 2 of lab 06's catalogue: one query head's scores over its sequence's blocks, ``-inf`` past
the sequence's last token."""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import blocks_grid, define_kernel, tl, triton


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
    return define_kernel(
        f'''
@triton.jit
def {name}(q_ptr, k_cache_ptr, block_table_ptr, scores_ptr, seq_len, kv_head, scale, stride_kb, stride_ks, stride_kh,
           BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _scores(q_ptr, k_cache_ptr, block_table_ptr, scores_ptr, seq_len, kv_head, scale, stride_kb, stride_ks,
            stride_kh, BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
        globals(),
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


# The step's bugs with the checks each must fail, and its correct variants.
BUGS = [
    (scores_unmasked_tail, blocks_grid, {"check_step2_scores"}),
    (scores_block_index_off_by_one, blocks_grid, {"check_step2_scores"}),
    (scores_forgets_scale, blocks_grid, {"check_step2_scores"}),
    (scores_int32_offsets, blocks_grid, {"check_step2_scores"}),
]
VARIANTS = [(scores_one_program_loops, one_program_grid)]
