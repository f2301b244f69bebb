"""Lab 02's catalogue: realistic student bugs (each must lose points) and correct variants written differently (each
must keep full marks). Every class starts from its lab's starter and writes only the method the lab
asks for, exactly as a student's notebook does."""

from __future__ import annotations

from paged_kv.lab.starters import KVCacheManagerWithoutPrefill


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


BUGS = [
    PrefillFloorDivision,
    PrefillNotAtomic,
    PrefillForgetsToRemoveFromFreeList,
    PrefillOffByOneOom,
    PrefillWrongError,
    PrefillExtraBlockOnMultiples,
]


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


VARIANTS = [PrefillFromTheBack, PrefillRandomBlocks]
