"""What each of lab 06's kernels is passed: its arguments for one case, in the order of the stub's parameters.

Each step's kernel takes its arguments in the stub's order; they are passed positionally (constexprs included), so
a renamed parameter changes nothing. ``paged_kv.lab.kernel_lab`` launches the student's kernels with these; a
notebook builds a kernel for a GPU with them (``require_gpu_build(kernel, gather_args(...), name)``).
"""

from __future__ import annotations

import torch

from paged_kv.lab.kernel_cases import PagedCase


def gather_args(case: PagedCase, out: torch.Tensor, seq: int, kv_head: int) -> list:
    """Step 1's arguments: the keys of sequence ``seq``, KV head ``kv_head``, gathered into ``out``."""
    k = case.k_cache
    return [
        k,
        case.block_tables[seq],
        out,
        case.seq_len(seq),
        kv_head,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def scores_args(case: PagedCase, scores: torch.Tensor, seq: int, q_head: int) -> list:
    """Step 2's arguments: the scores of query head ``q_head`` of sequence ``seq``, written into ``scores``."""
    k = case.k_cache
    return [
        case.q[seq, q_head],
        k,
        case.block_tables[seq],
        scores,
        case.seq_len(seq),
        q_head // case.group,
        case.scale,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def attend_args(case: PagedCase, out: torch.Tensor, seq: int, q_head: int) -> list:
    """Step 3's arguments: the attention output of query head ``q_head`` of sequence ``seq``, into ``out``."""
    k = case.k_cache
    return [
        case.q[seq, q_head],
        k,
        case.v_cache,
        case.block_tables[seq],
        out,
        case.seq_len(seq),
        q_head // case.group,
        case.scale,
        k.stride(0),
        k.stride(1),
        k.stride(2),
        case.block_size,
        case.head_dim,
    ]


def decode_args(case: PagedCase, out: torch.Tensor) -> list:
    """Step 4's arguments: the whole batch into ``out``; ``GROUP_PAD`` is the group rounded up to a power of two."""
    q, k, tables = case.q, case.k_cache, case.block_tables
    group = case.group
    return [
        q,
        k,
        case.v_cache,
        tables,
        case.seq_lens,
        out,
        case.scale,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        tables.stride(0),
        out.stride(0),
        out.stride(1),
        group,
        1 << (group - 1).bit_length(),
        case.block_size,
        case.head_dim,
    ]


def fast_decode_args(case: PagedCase, out: torch.Tensor, tile: int = 64) -> list:
    """Step 5's arguments: step 4's, with ``GROUP_PAD`` at least 16 (``tl.dot``'s smallest M) and ``TILE`` last."""
    if not isinstance(tile, int) or isinstance(tile, bool) or tile < 16 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 16 (tl.dot's smallest size), got {tile!r}")
    args = decode_args(case, out)
    args[-3] = max(16, args[-3])
    return args + [tile]


def split_args(case: PagedCase, part_out: torch.Tensor, part_lse: torch.Tensor, tokens_per_split: int) -> list:
    """The split-KV stretch's first kernel's arguments: partial outputs and log-sum-exps of ``tokens_per_split``
    tokens each, into ``part_out`` and ``part_lse``."""
    q, k, tables = case.q, case.k_cache, case.block_tables
    return (
        decode_args(case, q)[:5]
        + [
            part_out,
            part_lse,
            case.scale,
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            tables.stride(0),
            tokens_per_split,
            part_out.shape[2],
        ]
        + decode_args(case, q)[-4:]
    )
