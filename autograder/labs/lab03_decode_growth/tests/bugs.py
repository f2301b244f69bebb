"""Lab 03's catalogue: realistic student bugs (each must lose points) and correct variants written differently (each
must keep full marks). Every class starts from its lab's starter and writes only the method the lab
asks for, exactly as a student's notebook does."""

from __future__ import annotations

from paged_kv.lab.starters import KVCacheManagerWithoutDecode


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


BUGS = [
    DecodeTutorialFormula,
    DecodeUpdatesLengthFirst,
    DecodeOffByOne,
    DecodeAlwaysNeedsAFreeBlock,
    DecodeForgetsLength,
]


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


VARIANTS = [DecodeByCeil, DecodeByModulo]
