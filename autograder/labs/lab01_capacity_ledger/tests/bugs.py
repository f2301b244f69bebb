"""Lab 01's catalogue: realistic student bugs (each must lose points) and correct variants written differently (each
must keep full marks). Every class starts from its lab's starter and writes only the method the lab
asks for, exactly as a student's notebook does."""

from __future__ import annotations


# ---- lab 01: estimate_kv_cache_bytes --------------------------------------------------------
# Plain functions (no closures), so that the class simulation can put each one in a notebook.
def _pool(token, num_blocks, block_size, num_layers, num_kv_heads, head_dim):
    """The whole answer from a per-token size (right or wrong)."""
    return {
        "kv_bytes_per_token": token,
        "kv_bytes_per_block": block_size * token,
        "total_cache_bytes": num_blocks * block_size * token,
        "layout_shape": [num_layers, 2, num_kv_heads, block_size, head_dim],
    }


def forgets_v(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(
        num_layers * num_kv_heads * head_dim * dtype_bytes, num_blocks, block_size, num_layers, num_kv_heads, head_dim
    )


def forgets_layers(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2 * num_kv_heads * head_dim * dtype_bytes, num_blocks, block_size, num_layers, num_kv_heads, head_dim)


def forgets_dtype_bytes(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2 * num_layers * num_kv_heads * head_dim, num_blocks, block_size, num_layers, num_kv_heads, head_dim)


def float_result(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(
        2.0 * num_layers * num_kv_heads * head_dim * dtype_bytes,
        num_blocks,
        block_size,
        num_layers,
        num_kv_heads,
        head_dim,
    )


def uses_bits(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(
        2 * num_layers * num_kv_heads * head_dim * dtype_bytes * 8,
        num_blocks,
        block_size,
        num_layers,
        num_kv_heads,
        head_dim,
    )


def ledger_block_bug(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    """Per-token right, per-block forgets the block size."""
    token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    return {
        "kv_bytes_per_token": token,
        "kv_bytes_per_block": token,
        "total_cache_bytes": num_blocks * token,
        "layout_shape": [num_layers, 2, num_kv_heads, block_size, head_dim],
    }


BUGS = {
    "forgets V (only K)": forgets_v,
    "forgets layers": forgets_layers,
    "forgets dtype bytes": forgets_dtype_bytes,
    "float result": float_result,
    "uses bits": uses_bits,
    "per block forgets block_size": ledger_block_bug,
}


def products_in_another_order(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(
        dtype_bytes * head_dim * num_kv_heads * num_layers * 2,
        num_blocks,
        block_size,
        num_layers,
        num_kv_heads,
        head_dim,
    )


def k_and_v_summed(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    one = num_layers * num_kv_heads * head_dim * dtype_bytes
    return _pool(one + one, num_blocks, block_size, num_layers, num_kv_heads, head_dim)


VARIANTS = {
    "products in another order": products_in_another_order,
    "k and v summed": k_and_v_summed,
}
