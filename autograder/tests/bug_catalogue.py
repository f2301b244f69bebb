"""Realistic student bugs (each must lose points) and correct variants written differently (each
must keep full marks). Every class starts from its lab's starter and writes only the method the lab
asks for, exactly as a student's notebook does."""
from __future__ import annotations

import torch

from paged_kv.lab.starters import (KVCacheManagerWithoutDecode, KVCacheManagerWithoutPrefill,
                               KVCacheManagerWithoutReconstruction)


# ---- lab 01: estimate_kv_cache_bytes --------------------------------------------------------
# Plain functions (no closures), so that the class simulation can put each one in a notebook.
def _pool(token, num_blocks, block_size, num_layers, num_kv_heads, head_dim):
    """The whole answer from a per-token size (right or wrong)."""
    return {"kv_bytes_per_token": token, "kv_bytes_per_block": block_size * token,
            "total_cache_bytes": num_blocks * block_size * token,
            "layout_shape": [num_layers, 2, num_kv_heads, block_size, head_dim]}


def forgets_v(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(num_layers * num_kv_heads * head_dim * dtype_bytes, num_blocks, block_size, num_layers,
                 num_kv_heads, head_dim)


def forgets_layers(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2 * num_kv_heads * head_dim * dtype_bytes, num_blocks, block_size, num_layers, num_kv_heads,
                 head_dim)


def forgets_dtype_bytes(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2 * num_layers * num_kv_heads * head_dim, num_blocks, block_size, num_layers, num_kv_heads,
                 head_dim)


def float_result(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2.0 * num_layers * num_kv_heads * head_dim * dtype_bytes, num_blocks, block_size, num_layers,
                 num_kv_heads, head_dim)


def uses_bits(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(2 * num_layers * num_kv_heads * head_dim * dtype_bytes * 8, num_blocks, block_size, num_layers,
                 num_kv_heads, head_dim)


def ledger_block_bug(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    """Per-token right, per-block forgets the block size."""
    token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    return {"kv_bytes_per_token": token, "kv_bytes_per_block": token, "total_cache_bytes": num_blocks * token,
            "layout_shape": [num_layers, 2, num_kv_heads, block_size, head_dim]}


LEDGER_BUGS = {
    "forgets V (only K)": forgets_v,
    "forgets layers": forgets_layers,
    "forgets dtype bytes": forgets_dtype_bytes,
    "float result": float_result,
    "uses bits": uses_bits,
    "per block forgets block_size": ledger_block_bug,
}


def products_in_another_order(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    return _pool(dtype_bytes * head_dim * num_kv_heads * num_layers * 2, num_blocks, block_size, num_layers,
                 num_kv_heads, head_dim)


def k_and_v_summed(num_blocks, block_size, num_layers, num_kv_heads, head_dim, dtype_bytes=2):
    one = num_layers * num_kv_heads * head_dim * dtype_bytes
    return _pool(one + one, num_blocks, block_size, num_layers, num_kv_heads, head_dim)


LEDGER_VARIANTS = {
    "products in another order": products_in_another_order,
    "k and v summed": k_and_v_summed,
}


# ---- lab 02: allocate_for_prefill -------------------------------------------------------------
class PrefillFloorDivision(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = max(1, req.seq_len // self.block_size)
        if needed > len(self.free_blocks):
            raise RuntimeError("OOM")
        req.block_table.extend(self.free_blocks[:needed])
        del self.free_blocks[:needed]


class PrefillNotAtomic(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = -(-req.seq_len // self.block_size)
        for _ in range(needed):
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))


class PrefillForgetsToRemoveFromFreeList(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = -(-req.seq_len // self.block_size)
        if needed > len(self.free_blocks):
            raise RuntimeError("OOM")
        req.block_table.extend(self.free_blocks[:needed])


class PrefillOffByOneOom(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = -(-req.seq_len // self.block_size)
        if needed >= len(self.free_blocks):
            raise RuntimeError("OOM")
        req.block_table.extend(self.free_blocks[:needed])
        del self.free_blocks[:needed]


class PrefillWrongError(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = -(-req.seq_len // self.block_size)
        if needed > len(self.free_blocks):
            raise ValueError("not enough memory")
        req.block_table.extend(self.free_blocks[:needed])
        del self.free_blocks[:needed]


class PrefillExtraBlockOnMultiples(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        needed = req.seq_len // self.block_size + 1
        if needed > len(self.free_blocks):
            raise RuntimeError("OOM")
        req.block_table.extend(self.free_blocks[:needed])
        del self.free_blocks[:needed]


PREFILL_BUGS = [PrefillFloorDivision, PrefillNotAtomic, PrefillForgetsToRemoveFromFreeList, PrefillOffByOneOom,
                PrefillWrongError, PrefillExtraBlockOnMultiples]


class PrefillFromTheBack(KVCacheManagerWithoutPrefill):
    """Takes the highest free ids, with math.ceil: correct, just a different choice of blocks."""

    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        import math
        needed = math.ceil(req.seq_len / self.block_size)
        if len(self.free_blocks) < needed:
            raise RuntimeError(f"OOM: need {needed}, have {len(self.free_blocks)}")
        chosen = [self.free_blocks.pop() for _ in range(needed)]
        req.block_table += chosen


class PrefillRandomBlocks(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        self._check_prefill(req)
        import random
        needed = (req.seq_len - 1) // self.block_size + 1
        if len(self.free_blocks) < needed:
            raise RuntimeError("OOM")
        chosen = random.Random(req.seq_len).sample(self.free_blocks, needed)
        self.free_blocks[:] = [b for b in self.free_blocks if b not in chosen]
        req.block_table.extend(chosen)


PREFILL_VARIANTS = [PrefillFromTheBack, PrefillRandomBlocks]


# ---- lab 03: allocate_for_decode --------------------------------------------------------------
class DecodeTutorialFormula(KVCacheManagerWithoutDecode):
    """The tutorial's ``new_seq_len % block_size == 1``: never true when block_size == 1."""

    def allocate_for_decode(self, req):
        self._check_decode(req)
        new_len = req.seq_len + 1
        if new_len % self.block_size == 1:
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len


class DecodeUpdatesLengthFirst(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        req.seq_len += 1
        if (req.seq_len - 1) % self.block_size == 0:
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))


class DecodeOffByOne(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        new_len = req.seq_len + 1
        if new_len % self.block_size == 0:
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len


class DecodeAlwaysNeedsAFreeBlock(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        if not self.free_blocks:
            raise RuntimeError("OOM")
        new_len = req.seq_len + 1
        if -(-new_len // self.block_size) > len(req.block_table):
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len


class DecodeForgetsLength(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        if req.seq_len % self.block_size == 0:
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))


DECODE_BUGS = [DecodeTutorialFormula, DecodeUpdatesLengthFirst, DecodeOffByOne, DecodeAlwaysNeedsAFreeBlock,
               DecodeForgetsLength]


class DecodeByCeil(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        import math
        new_len = req.seq_len + 1
        if math.ceil(new_len / self.block_size) > len(req.block_table):
            if len(self.free_blocks) == 0:
                raise RuntimeError("OOM while decoding")
            req.block_table.append(self.free_blocks.pop())
        req.seq_len = new_len


class DecodeByModulo(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self._check_decode(req)
        if req.seq_len % self.block_size == 0:
            if not self.free_blocks:
                raise RuntimeError("OOM")
            block = self.free_blocks[len(self.free_blocks) // 2]
            self.free_blocks.remove(block)
            req.block_table.append(block)
        req.seq_len += 1


DECODE_VARIANTS = [DecodeByCeil, DecodeByModulo]


# ---- lab 04: get_physical_cache ---------------------------------------------------------------
class ReadsSortedOrder(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        blocks = [self.physical_kv_cache[b] for b in sorted(req.block_table)]
        return torch.cat(blocks)[:req.seq_len]


class ForgetsTruncation(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])


class ReadsPhysicalPrefix(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return self.physical_kv_cache[:len(req.block_table)].reshape(-1, self.head_dim)[:req.seq_len]


class ReturnsAView(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        first = req.block_table[0]
        if len(req.block_table) == 1:
            return self.physical_kv_cache[first][:req.seq_len]
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])[:req.seq_len]


class TruncatesTooMuch(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])[:req.seq_len - 1]


RECONSTRUCTION_BUGS = [ReadsSortedOrder, ForgetsTruncation, ReadsPhysicalPrefix, ReturnsAView, TruncatesTooMuch]


class ReconstructWithLoop(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        out = torch.empty(req.seq_len, self.head_dim, dtype=self.physical_kv_cache.dtype)
        for pos in range(req.seq_len):
            out[pos] = self.physical_kv_cache[req.block_table[pos // self.block_size], pos % self.block_size]
        return out


class ReconstructWithIndexing(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        index = torch.tensor(req.block_table)
        return self.physical_kv_cache[index].flatten(0, 1)[:req.seq_len].clone()


RECONSTRUCTION_VARIANTS = [ReconstructWithLoop, ReconstructWithIndexing]
