"""Step 1 of lab 06's catalogue (``bugs.py`` says what ``BUGS`` and ``VARIANTS`` hold): gathering one
sequence's keys through its block table."""

from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import blocks_grid, define_kernel, tl, triton


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
    return define_kernel(
        f'''
@triton.jit
def {name}(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, stride_kb, stride_ks, stride_kh,
           BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    _gather(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, stride_kb, stride_ks, stride_kh,
            BLOCK_SIZE, HEAD_DIM, {bug})
''',
        name,
        globals(),
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


# The step's bugs with the checks each must fail, and its correct variants.
BUGS = [
    (gather_block_index_off_by_one, blocks_grid, {"check_step1_gather"}),
    (gather_unmasked_tail, blocks_grid, {"check_step1_gather"}),
    (gather_int32_offsets, blocks_grid, {"check_step1_gather"}),
    (gather_python_in_kernel, blocks_grid, {"check_step1_gather"}),
]
VARIANTS = [(gather_one_program_per_token, token_grid)]
