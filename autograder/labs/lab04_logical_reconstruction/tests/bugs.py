"""Lab 04's catalogue: realistic student bugs (each must lose points) and correct variants written differently (each
must keep full marks). Every class starts from its lab's starter and writes only the method the lab
asks for, exactly as a student's notebook does."""

from __future__ import annotations

import torch

from paged_kv.lab.starters import KVCacheManagerWithoutReconstruction


# ---- lab 04: get_physical_cache ---------------------------------------------------------------
class ReadsSortedOrder(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        blocks = [self.physical_kv_cache[b] for b in sorted(req.block_table)]
        return torch.cat(blocks)[: req.seq_len]


class ForgetsTruncation(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])


class ReadsPhysicalPrefix(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return self.physical_kv_cache[: len(req.block_table)].reshape(-1, self.head_dim)[: req.seq_len]


class ReturnsAView(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        first = req.block_table[0]
        if len(req.block_table) == 1:
            return self.physical_kv_cache[first][: req.seq_len]
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])[: req.seq_len]


class TruncatesTooMuch(KVCacheManagerWithoutReconstruction):
    def get_physical_cache(self, req):
        self._check_readable(req)
        return torch.cat([self.physical_kv_cache[b] for b in req.block_table])[: req.seq_len - 1]


BUGS = [ReadsSortedOrder, ForgetsTruncation, ReadsPhysicalPrefix, ReturnsAView, TruncatesTooMuch]


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
        return self.physical_kv_cache[index].flatten(0, 1)[: req.seq_len].clone()


VARIANTS = [ReconstructWithLoop, ReconstructWithIndexing]
