"""Test inputs for paged-attention kernels: scattered tables, poisoned memory, a pool past 2**31 elements.

Every tensor a kernel receives is a view into a larger buffer whose margins hold NaN (caches) or
garbage block ids (tables), so a stray read gives a visibly wrong answer instead of crashing the
interpreter. ``poison=True`` also fills what a correct kernel must never use with NaN: the unused
tail slots of each sequence's last block and the blocks no table lists; table padding always holds
garbage ids (-1, ids past the pool, ids of poisoned blocks). Expected outputs come from the torch
reference on a clean copy of the same data.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import torch

from paged_kv.kernels.attention import gather_kv, paged_decode_attention_ref
from paged_kv.lab.i18n import N_, _

GUARD_BLOCKS = 4  # NaN blocks before and after every pool
FAR_STRIDE = 2**27  # elements between two blocks of the far pool
FAR_FIRST = 32  # first block id of the far pool: 32 * 2**27 = 2**32 elements


def _device() -> str:
    """Where kernels run: ``cuda`` in native mode, else ``cpu`` (decided by ``paged_kv.kernels.triton_mode``)."""
    from paged_kv.kernels.triton_mode import configure

    return configure().device


def _on(view: torch.Tensor, device: str) -> torch.Tensor:
    """``view`` on ``device`` with the same storage offset and strides (its whole storage is moved)."""
    if view.device.type == device:
        return view
    storage = view.untyped_storage()
    flat = torch.empty(0, dtype=view.dtype).set_(storage, 0, (storage.nbytes() // view.element_size(),))
    return flat.to(device).as_strided(view.shape, view.stride(), view.storage_offset())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class PagedCase:
    """One paged decode problem. ``k_cache``/``v_cache``: ``[num_blocks, block_size, num_kv_heads, head_dim]``
    views (possibly with unusual strides); ``block_tables`` int32 ``[num_seqs, max_blocks]`` (a view, row
    stride larger than ``max_blocks``); ``seq_lens`` int32; ``q`` ``[num_seqs, num_q_heads, head_dim]``."""

    label: str
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    scale: float
    clean: Tuple[torch.Tensor, torch.Tensor, torch.Tensor] = field(repr=False)
    keep_alive: tuple = field(default=(), repr=False)
    # (function path, args, kwargs) that make this case again, on any device: how a grader hands the same
    # case to another process (the grading kernel) without copying its tensors.
    _pkv_recipe: tuple = field(default=(), repr=False, compare=False)

    @property
    def num_seqs(self) -> int:
        return self.q.shape[0]

    @property
    def num_q_heads(self) -> int:
        return self.q.shape[1]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    @property
    def num_kv_heads(self) -> int:
        return self.k_cache.shape[2]

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    @property
    def group(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    def seq_len(self, seq: int) -> int:
        return int(self.seq_lens[seq])

    def table(self, seq: int) -> list:
        return self.block_tables[seq, : _cdiv(self.seq_len(seq), self.block_size)].tolist()

    def expected(self) -> torch.Tensor:
        """``paged_decode_attention_ref`` on clean data: ``[num_seqs, num_q_heads, head_dim]`` in ``q.dtype``."""
        k, v, tables = self.clean
        return paged_decode_attention_ref(self.q.cpu(), k, v, tables, self.seq_lens.cpu(), scale=self.scale)

    def expected_keys(self, seq: int, kv_head: int) -> torch.Tensor:
        """Lab 04's reconstruction of one sequence's keys for one KV head: ``[seq_len, head_dim]``."""
        k, _, tables = self.clean
        n = self.seq_len(seq)
        return gather_kv(k, tables[seq : seq + 1], self.seq_lens[seq : seq + 1].cpu())[0, :n, kv_head].clone()

    def expected_scores(self, seq: int, q_head: int) -> torch.Tensor:
        """float32 ``scale * q . k_t`` for the slots of the sequence's blocks; ``-inf`` past its length."""
        n = self.seq_len(seq)
        keys = self.expected_keys(seq, q_head // self.group).float()
        scores = torch.full((_cdiv(n, self.block_size) * self.block_size,), float("-inf"))
        scores[:n] = keys @ self.q[seq, q_head].float().cpu() * self.scale
        return scores

    def expected_head(self, seq: int, q_head: int) -> torch.Tensor:
        """Attention output of one query head of one sequence, ``[head_dim]`` in ``q.dtype``."""
        return self.expected()[seq, q_head]

    def describe(self) -> str:
        lens, label, size, dim = self.seq_lens.tolist(), _(self.label), self.block_size, self.head_dim
        q_heads, kv_heads, dtype = self.num_q_heads, self.num_kv_heads, str(self.q.dtype).replace("torch.", "")
        return _(f"{label}: seq_lens={lens}, block_size={size}, heads {q_heads}q/{kv_heads}kv, head_dim={dim}, {dtype}")


def _guarded_pool(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, dtype) -> torch.Tensor:
    big = torch.full((num_blocks + 2 * GUARD_BLOCKS, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype)
    return big[GUARD_BLOCKS : GUARD_BLOCKS + num_blocks]


def _garbage_ids(num_blocks: int, unlisted: Sequence[int], gen: torch.Generator, count: int) -> torch.Tensor:
    """Padding ids a kernel must never follow: -1, ids past the pool (inside its NaN guard), unlisted blocks."""
    choices = [-1, -2, num_blocks, num_blocks + 1, num_blocks + GUARD_BLOCKS - 1] + list(unlisted)
    picks = torch.randint(0, len(choices), (count,), generator=gen)
    return torch.tensor(choices, dtype=torch.int32)[picks]


def paged_case(
    seq_lens: Sequence[int],
    *,
    block_size: int = 4,
    num_q_heads: int = 2,
    num_kv_heads: int = 1,
    head_dim: int = 16,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    poison: bool = False,
    logit_scale: float = 1.0,
    spare_blocks: int = 3,
    extra_columns: int = 1,
    label: Optional[str] = None,
    device: Optional[str] = None,
    value_offset: float = 0.0,
) -> PagedCase:
    """A ragged batch with scattered, non-monotonic block tables (a random permutation of the pool).

    ``logit_scale`` multiplies q (large values make softmax overflow without max subtraction); ``value_offset`` is
    added to every value (V's mean: with scores close together the unnormalised output sum grows to about the
    number of tokens times it);
    ``spare_blocks`` blocks are listed by no table; ``extra_columns`` padding columns follow the longest row;
    ``device`` defaults to where kernels run (``paged_kv.kernels.triton_mode``).
    """
    recipe = (
        "paged_kv.lab.kernel_cases.paged_case",
        (tuple(int(n) for n in seq_lens),),
        dict(
            block_size=block_size,
            num_q_heads=num_q_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            seed=seed,
            poison=poison,
            logit_scale=logit_scale,
            spare_blocks=spare_blocks,
            extra_columns=extra_columns,
            label=label,
            value_offset=value_offset,
        ),
    )
    gen = torch.Generator().manual_seed(seed)
    lens = [int(n) for n in seq_lens]
    used = [_cdiv(n, block_size) for n in lens]
    num_blocks = sum(used) + spare_blocks
    max_blocks = max(used) + extra_columns
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    listed, unlisted = perm[: sum(used)], perm[sum(used) :]

    k = _guarded_pool(num_blocks, block_size, num_kv_heads, head_dim, dtype)
    v = _guarded_pool(num_blocks, block_size, num_kv_heads, head_dim, dtype)
    k.copy_(torch.randn(k.shape, generator=gen).to(dtype))
    v.copy_((torch.randn(v.shape, generator=gen) + float(value_offset)).to(dtype))
    num_seqs = len(lens)
    table_buffer = _garbage_ids(num_blocks, unlisted if poison else [], gen, (num_seqs + 1) * (max_blocks + 2))
    table_buffer = table_buffer.reshape(num_seqs + 1, max_blocks + 2)
    tables = table_buffer[:num_seqs, :max_blocks]
    clean_tables = torch.zeros(num_seqs, max_blocks, dtype=torch.int32)
    start = 0
    for s, count in enumerate(used):
        ids = torch.tensor(listed[start : start + count], dtype=torch.int32)
        tables[s, :count] = ids
        clean_tables[s, :count] = ids
        start += count
    clean_k, clean_v = k.clone(), v.clone()
    if poison:
        for s, n in enumerate(lens):
            last = int(tables[s, used[s] - 1])
            k[last, n - (used[s] - 1) * block_size :] = float("nan")
            v[last, n - (used[s] - 1) * block_size :] = float("nan")
        for block in unlisted:
            k[block] = float("nan")
            v[block] = float("nan")
    q = (torch.randn(num_seqs, num_q_heads, head_dim, generator=gen) * logit_scale).to(dtype)
    text = label or (N_("poisoned memory") if poison else N_("scattered tables"))
    device = device or _device()
    return PagedCase(
        text,
        q.to(device),
        _on(k, device),
        _on(v, device),
        _on(tables, device),
        torch.tensor(lens, dtype=torch.int32, device=device),
        head_dim**-0.5,
        (clean_k, clean_v, clean_tables),
        _pkv_recipe=recipe,
    )


def far_pool_case(
    seq_lens: Sequence[int] = (21, 9),
    *,
    block_size: int = 8,
    num_q_heads: int = 2,
    num_kv_heads: int = 1,
    head_dim: int = 16,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    directory: Optional[str] = None,
    device: Optional[str] = None,
) -> PagedCase:
    """A pool whose listed blocks sit past 2**32 elements, with almost no memory used.

    The cache is a view with a block stride of ``2**27`` elements over a sparse memory-mapped file
    (only touched pages take memory or disk). Tables list blocks ``32..39``; their offsets
    ``block * stride`` exceed 2**32, so a kernel that multiplies an int32 block id by the stride wraps
    around to blocks ``0..7``, which hold decoys, and returns a wrong answer (vLLM #47671, #50427).
    On a GPU (native mode) the pool is real device memory: float16, about 11 GB.
    """
    recipe = (
        "paged_kv.lab.kernel_cases.far_pool_case",
        (tuple(int(n) for n in seq_lens),),
        dict(
            block_size=block_size,
            num_q_heads=num_q_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            seed=seed,
        ),
    )
    gen = torch.Generator().manual_seed(seed)
    used = [_cdiv(int(n), block_size) for n in seq_lens]
    if sum(used) > 8:
        raise ValueError(f"the far pool has 8 usable blocks, these lengths need {sum(used)}")
    per_block = block_size * num_kv_heads * head_dim
    num_blocks = FAR_FIRST + 8
    elements = num_blocks * FAR_STRIDE
    device = device or _device()
    if device == "cpu":
        handle, path = tempfile.mkstemp(prefix="paged_kv_far_pool_", dir=directory)
        try:
            os.ftruncate(handle, elements * torch.empty((), dtype=dtype).element_size())  # sparse: no disk used
            storage = torch.from_file(path, shared=True, size=elements, dtype=dtype)
        finally:
            os.close(handle)
            os.unlink(path)  # the mapping stays valid; nothing is left on disk
    else:
        dtype = torch.float16  # 2**32 elements of real GPU memory: keep it to about 11 GB
        need = elements * 2
        if torch.cuda.mem_get_info()[0] < need * 1.2:
            raise MemoryError(
                f"the int64 check needs {need / 2**30:.1f} GiB of free GPU memory for a pool past "
                "2**32 elements; run it on the CPU (interpreter), where a sparse file stands in"
            )
        storage = torch.empty(elements, dtype=dtype, device=device)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    strides = (FAR_STRIDE, num_kv_heads * head_dim, head_dim, 1)
    k = storage.as_strided(shape, strides, 0)
    v = storage.as_strided(shape, strides, per_block)
    ids = list(range(FAR_FIRST, FAR_FIRST + sum(used)))
    ids = ids[::2] + ids[1::2]  # non-monotonic
    tables = torch.full((len(used), max(used) + 1), -1, dtype=torch.int32)
    start = 0
    for s, count in enumerate(used):
        tables[s, :count] = torch.tensor(ids[start : start + count], dtype=torch.int32)
        start += count
    for block in ids:
        k[block] = torch.randn(shape[1:], generator=gen).to(dtype).to(device)
        v[block] = torch.randn(shape[1:], generator=gen).to(dtype).to(device)
    for decoy in range(8):  # where int32 offsets land after wrapping around
        k[decoy] = 3.0
        v[decoy] = 100.0
    compact_ids = {block: i for i, block in enumerate(ids)}
    clean_k = torch.stack([k[b] for b in ids])
    clean_v = torch.stack([v[b] for b in ids])
    clean_tables = torch.zeros_like(tables)
    for s, count in enumerate(used):
        clean_tables[s, :count] = torch.tensor([compact_ids[int(b)] for b in tables[s, :count]], dtype=torch.int32)
    q = torch.randn(len(used), num_q_heads, head_dim, generator=gen).to(dtype)
    return PagedCase(
        N_("pool past 2**32 elements (int64 offsets)"),
        q.to(device),
        k,
        v,
        tables.to(device),
        torch.tensor([int(n) for n in seq_lens], dtype=torch.int32, device=device),
        head_dim**-0.5,
        (clean_k.cpu(), clean_v.cpu(), clean_tables),
        keep_alive=(storage,),
        _pkv_recipe=recipe,
    )
