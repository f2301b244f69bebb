"""A slow, obviously-faithful model of nano-vllm's allocation policy, used only as a test oracle.

Plain ``deque`` (with its O(n) ``remove``), dicts and lists; written independently of paged_kv so
that a shared mistake is unlikely. Block size 1 follows the corrected rule (one block per token).
"""

from collections import deque

import numpy as np
import xxhash


def chain_hash(tokens, prefix):
    digest = xxhash.xxh64()
    if prefix != -1:
        digest.update(int(prefix).to_bytes(8, "little"))
    digest.update(np.array(tokens, dtype=np.int64).tobytes())
    return digest.intdigest()


class OraclePool:
    def __init__(self, num_blocks, block_size):
        self.bs = block_size
        self.free = deque(range(num_blocks))
        self.refs = [0] * num_blocks
        self.content = [None] * num_blocks  # (hash, tokens) of a full block, kept after freeing
        self.index = {}  # hash -> block id

    def _take_fresh(self):
        block = self.free.popleft()
        if self.content[block] is not None and self.index.get(self.content[block][0]) == block:
            del self.index[self.content[block][0]]
        self.content[block] = None
        self.refs[block] = 1
        return block

    def admit(self, tokens):
        """Prefill ``tokens``; return (block table, cached tokens) or None when it does not fit."""
        bs, n = self.bs, -(-len(tokens) // self.bs)
        hits, prefix = [], -1
        for i in range(n - 1):
            piece = tokens[i * bs : (i + 1) * bs]
            prefix = chain_hash(piece, prefix)
            block = self.index.get(prefix)
            if block is None or self.content[block][1] != piece:
                break
            hits.append(block)
        if len(self.free) < n - sum(1 for b in hits if self.refs[b] > 0):
            return None
        table = []
        for block in hits:
            if self.refs[block] == 0:
                self.free.remove(block)
            self.refs[block] += 1
            table.append(block)
        table += [self._take_fresh() for _ in range(n - len(hits))]
        self._register(tokens, table, len(hits), len(tokens))
        return table

    def _register(self, tokens, table, first_block, upto_tokens):
        bs = self.bs
        prefix = self.content[table[first_block - 1]][0] if first_block else -1
        for i in range(first_block, upto_tokens // bs):
            piece = tokens[i * bs : (i + 1) * bs]
            prefix = chain_hash(piece, prefix)
            self.content[table[i]] = (prefix, list(piece))
            self.index[prefix] = table[i]

    def grow(self, tokens, table):
        """``tokens`` already holds the new token; add a block if it starts one, hash if it fills one."""
        if len(tokens) > len(table) * self.bs:
            if not self.free:
                return False
            table.append(self._take_fresh())
        if len(tokens) % self.bs == 0:
            self._register(tokens, table, len(tokens) // self.bs - 1, len(tokens))
        return True

    def release(self, table):
        for block in reversed(table):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.append(block)
        table.clear()
