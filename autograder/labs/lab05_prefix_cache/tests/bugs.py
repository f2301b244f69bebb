"""Lab 05: realistic student bugs (each must lose the points of its own part, and only those) and correct
variants written differently (each must keep full marks). Every class is written as a student's notebook
writes it: on the starter, one TODO method changed from a correct answer. The parts are the grader's
``PARTS``: hash, release, register, admit."""

from __future__ import annotations

import array
import struct

import numpy as np
import xxhash

from paged_kv.lab.starters import BlockManagerWithoutPrefixCache


class Correct(BlockManagerWithoutPrefixCache):
    """A correct answer to all four parts, the base that each bug below changes in one method."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        if prefix != -1:
            h.update(prefix.to_bytes(8, "little"))
        h.update(np.array(token_ids, dtype=np.int64).tobytes())
        return h.intdigest()

    def _hits(self, seq, verify=True, upto=None):
        """(block ids hit, chain hash) walking full blocks from the start, never the last block."""
        h, hits = -1, []
        for i in range(seq.num_blocks - 1 if upto is None else upto):
            token_ids = seq.block(i)
            h = self.compute_hash(token_ids, h)
            block_id = self.hash_to_block_id.get(h, -1)
            if block_id == -1 or (verify and self.blocks[block_id].token_ids != token_ids):
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq):
        self._check_seq(seq)
        hits = self._hits(seq)
        new = seq.num_blocks - sum(1 for b in hits if b in self.used_block_ids)
        return -1 if new > len(self.free_block_ids) else len(hits)

    def allocate(self, seq, num_cached_blocks):
        self._check_seq(seq)
        h = -1
        for i in range(num_cached_blocks):
            h = self.compute_hash(seq.block(i), h)
            block_id = self.hash_to_block_id[h]
            block = self.blocks[block_id]
            if block_id in self.used_block_ids:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size

    def deallocate(self, seq):
        self._check_seq(seq)
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()

    def _allocate_block(self):
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
        block.reset()
        self.used_block_ids.add(block_id)
        return block_id

    def hash_blocks(self, seq):
        self._check_seq(seq)
        start = seq.num_cached_tokens // self.block_size
        end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            h = self.compute_hash(seq.block(i), h)
            block.update(h, seq.block(i))
            self.hash_to_block_id[h] = block.block_id


# ---- part 1, hash: compute_hash --------------------------------------------------------------------------
class HashIgnoresPrefix(Correct):
    """A content-only hash: the same block after different prefixes gets the same name."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        return xxhash.xxh64(np.array(token_ids, dtype=np.int64).tobytes()).intdigest()


class HashTruthyPrefix(Correct):
    """``if prefix:`` treats a previous hash of 0 as "no prefix"."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        if prefix and prefix != -1:
            h.update(prefix.to_bytes(8, "little"))
        h.update(np.array(token_ids, dtype=np.int64).tobytes())
        return h.intdigest()


class HashInt32Ids(Correct):
    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        if prefix != -1:
            h.update(prefix.to_bytes(8, "little"))
        h.update(np.array(token_ids, dtype=np.int32).tobytes())
        return h.intdigest()


class HashBigEndianPrefix(Correct):
    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        if prefix != -1:
            h.update(prefix.to_bytes(8, "big"))
        h.update(np.array(token_ids, dtype=np.int64).tobytes())
        return h.intdigest()


class HashTokensBeforePrefix(Correct):
    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        h.update(np.array(token_ids, dtype=np.int64).tobytes())
        if prefix != -1:
            h.update(prefix.to_bytes(8, "little"))
        return h.intdigest()


class HashBuiltin(Correct):
    """Python's ``hash`` of a tuple: a chain, but not the contract's values (and salted per process for str)."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        return hash((prefix, tuple(token_ids))) % 2**64


# ---- part 4, admit: can_allocate + allocate --------------------------------------------------------------
class ServesTheLastBlock(Correct):
    """nano-vllm #144: a fully cached prompt leaves nothing to compute."""

    def can_allocate(self, seq):
        self._check_seq(seq)
        hits = self._hits(seq, upto=seq.num_blocks)
        new = seq.num_blocks - sum(1 for b in hits if b in self.used_block_ids)
        return -1 if new > len(self.free_block_ids) else len(hits)


class NoTokenCheck(Correct):
    def can_allocate(self, seq):
        self._check_seq(seq)
        hits = self._hits(seq, verify=False)
        new = seq.num_blocks - sum(1 for b in hits if b in self.used_block_ids)
        return -1 if new > len(self.free_block_ids) else len(hits)


class EveryHitIsFree(Correct):
    """Counts a hit on a cached-free block as costing nothing, as if it were live."""

    def can_allocate(self, seq):
        self._check_seq(seq)
        hits = self._hits(seq)
        return -1 if seq.num_blocks - len(hits) > len(self.free_block_ids) else len(hits)


class NoHitIsFree(Correct):
    """Asks for a free block even for hits on live blocks."""

    def can_allocate(self, seq):
        self._check_seq(seq)
        hits = self._hits(seq)
        return -1 if seq.num_blocks > len(self.free_block_ids) else len(hits)


class SkipsPastAMiss(Correct):
    def can_allocate(self, seq):
        self._check_seq(seq)
        h, hits = -1, 0
        new = seq.num_blocks
        for i in range(seq.num_blocks - 1):
            h = self.compute_hash(seq.block(i), h)
            block_id = self.hash_to_block_id.get(h, -1)
            if block_id == -1 or self.blocks[block_id].token_ids != seq.block(i):
                continue
            hits += 1
            new -= block_id in self.used_block_ids
        return -1 if new > len(self.free_block_ids) else hits


class SeedListingAllocate(Correct):
    """The seed listing's ``allocate``: the chain variable ``h`` is never set before the loop."""

    def allocate(self, seq, num_cached_blocks):
        self._check_seq(seq)
        for i in range(num_cached_blocks):
            h = self.compute_hash(seq.block(i), h)  # noqa: F821 - the bug
            block_id = self.hash_to_block_id[h]
            block = self.blocks[block_id]
            if block_id in self.used_block_ids:
                block.ref_count += 1
            else:
                block.ref_count = 1
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size


class ReviveLeavesItInTheFreeQueue(Correct):
    def allocate(self, seq, num_cached_blocks):
        self._check_seq(seq)
        h = -1
        for i in range(num_cached_blocks):
            h = self.compute_hash(seq.block(i), h)
            block_id = self.hash_to_block_id[h]
            self.blocks[block_id].ref_count += 1
            self.used_block_ids.add(block_id)
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size


class ReviveThroughAllocateBlock(Correct):
    """Takes a cached-free hit with ``_allocate_block``: that pops the queue's front and wipes the hash."""

    def allocate(self, seq, num_cached_blocks):
        self._check_seq(seq)
        h = -1
        for i in range(num_cached_blocks):
            h = self.compute_hash(seq.block(i), h)
            block_id = self.hash_to_block_id[h]
            if block_id in self.used_block_ids:
                self.blocks[block_id].ref_count += 1
            else:
                block_id = self._allocate_block()
            seq.block_table.append(block_id)
        for _ in range(num_cached_blocks, seq.num_blocks):
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = num_cached_blocks * self.block_size


class ForgetsCachedTokens(Correct):
    def allocate(self, seq, num_cached_blocks):
        super().allocate(seq, num_cached_blocks)
        seq.num_cached_tokens = 0


# ---- part 2, release: deallocate + _allocate_block -------------------------------------------------------
class FreesFirstBlockFirst(Correct):
    def deallocate(self, seq):
        self._check_seq(seq)
        for block_id in seq.block_table:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()


class ForgetsToClearTheTable(Correct):
    def deallocate(self, seq):
        self._check_seq(seq)
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0


class ForgetsFromTheMapOnFree(Correct):
    """nano-vllm PR #153's proposal: drop the hash when the block is freed; no free-but-cached reuse."""

    def deallocate(self, seq):
        self._check_seq(seq)
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.hash_to_block_id.pop(block.hash, None)
                self._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()


class KeepsStaleMapping(Correct):
    """nano-vllm #163: the reused block's old hash still points at it."""

    def _allocate_block(self):
        block_id = self.free_block_ids.popleft()
        self.blocks[block_id].reset()
        self.used_block_ids.add(block_id)
        return block_id


class DropsMappingWithoutGuard(Correct):
    """Deletes the old hash even when the map points at another block (nano-vllm #219's duplicates)."""

    def _allocate_block(self):
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if block.hash != -1:
            self.hash_to_block_id.pop(block.hash, None)
        block.reset()
        self.used_block_ids.add(block_id)
        return block_id


class TakesTheNewestFreeBlock(Correct):
    """Takes the most recently freed block (the queue's back): evicts the freshest cached prefix first."""

    def _allocate_block(self):
        block_id = list(self.free_block_ids)[-1]
        self.free_block_ids.remove(block_id)
        block = self.blocks[block_id]
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
        block.reset()
        self.used_block_ids.add(block_id)
        return block_id


class ForgetsToMarkUsed(Correct):
    def _allocate_block(self):
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
        block.reset()
        return block_id


# ---- part 3, register: hash_blocks -----------------------------------------------------------------------
class RegistersThePartialBlock(Correct):
    def hash_blocks(self, seq):
        self._check_seq(seq)
        start = seq.num_cached_tokens // self.block_size
        end = -(-(seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size)
        h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            h = self.compute_hash(seq.block(i), h)
            block.update(h, seq.block(i))
            self.hash_to_block_id[h] = block.block_id


class RestartsTheChain(Correct):
    def hash_blocks(self, seq):
        self._check_seq(seq)
        start = seq.num_cached_tokens // self.block_size
        end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        h = -1
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            h = self.compute_hash(seq.block(i), h)
            block.update(h, seq.block(i))
            self.hash_to_block_id[h] = block.block_id


class HashesBeforeCompute(Correct):
    """nano-vllm #208 with chunked prefill: registers every full block, also those a later chunk computes."""

    def hash_blocks(self, seq):
        self._check_seq(seq)
        start = seq.num_cached_tokens // self.block_size
        end = len(seq) // self.block_size
        h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1
        for i in range(start, end):
            block = self.blocks[seq.block_table[i]]
            h = self.compute_hash(seq.block(i), h)
            block.update(h, seq.block(i))
            self.hash_to_block_id[h] = block.block_id


class ForgetsBlockUpdate(Correct):
    def hash_blocks(self, seq):
        self._check_seq(seq)
        start = seq.num_cached_tokens // self.block_size
        end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1
        for i in range(start, end):
            h = self.compute_hash(seq.block(i), h)
            self.hash_to_block_id[h] = seq.block_table[i]


# bug -> the part whose checks, and only whose checks, it must fail
BUGS = {
    HashIgnoresPrefix: "hash",
    HashTruthyPrefix: "hash",
    HashInt32Ids: "hash",
    HashBigEndianPrefix: "hash",
    HashTokensBeforePrefix: "hash",
    HashBuiltin: "hash",
    FreesFirstBlockFirst: "release",
    ForgetsToClearTheTable: "release",
    ForgetsFromTheMapOnFree: "release",
    KeepsStaleMapping: "release",
    DropsMappingWithoutGuard: "release",
    TakesTheNewestFreeBlock: "release",
    ForgetsToMarkUsed: "release",
    RegistersThePartialBlock: "register",
    RestartsTheChain: "register",
    HashesBeforeCompute: "register",
    ForgetsBlockUpdate: "register",
    ServesTheLastBlock: "admit",
    NoTokenCheck: "admit",
    EveryHitIsFree: "admit",
    NoHitIsFree: "admit",
    SkipsPastAMiss: "admit",
    SeedListingAllocate: "admit",
    ReviveLeavesItInTheFreeQueue: "admit",
    ReviveThroughAllocateBlock: "admit",
    ForgetsCachedTokens: "admit",
}


# ---- correct variants written differently ----------------------------------------------------------------
class StructPackedWhileLoops(BlockManagerWithoutPrefixCache):
    """Bytes by struct.pack, while loops, an index walk backwards, a dict-based lookup."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        data = b"" if prefix == -1 else struct.pack("<Q", prefix)
        return xxhash.xxh64_intdigest(data + struct.pack(f"<{len(token_ids)}q", *token_ids))

    def can_allocate(self, seq):
        self._check_seq(seq)
        i, h, hits, shared = 0, -1, 0, 0
        while i < seq.num_blocks - 1:
            h = self.compute_hash(seq.block(i), h)
            found = self.hash_to_block_id.get(h)
            if found is None or list(self.blocks[found].token_ids) != seq.block(i):
                break
            hits, shared, i = hits + 1, shared + (found in self.used_block_ids), i + 1
        return hits if seq.num_blocks - shared <= len(self.free_block_ids) else -1

    def allocate(self, seq, num_cached_blocks):
        self._check_seq(seq)
        chain = []
        for i in range(num_cached_blocks):
            chain.append(self.compute_hash(seq.block(i), chain[-1] if chain else -1))
        table = [self.hash_to_block_id[h] for h in chain]
        for block_id in table:
            if self.blocks[block_id].ref_count == 0:
                self.free_block_ids.remove(block_id)
                self.used_block_ids.add(block_id)
            self.blocks[block_id].ref_count += 1
        seq.block_table.extend(table)
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self._allocate_block())
        seq.num_cached_tokens = len(table) * self.block_size

    def deallocate(self, seq):
        self._check_seq(seq)
        i = len(seq.block_table) - 1
        while i >= 0:
            block_id = seq.block_table[i]
            self.blocks[block_id].ref_count -= 1
            if not self.blocks[block_id].ref_count:
                self._deallocate_block(block_id)
            i -= 1
        seq.block_table[:] = []
        seq.num_cached_tokens = 0

    def _allocate_block(self):
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if self.hash_to_block_id.get(block.hash, None) == block_id:
            self.hash_to_block_id.pop(block.hash)
        block.ref_count, block.hash, block.token_ids = 1, -1, []
        self.used_block_ids.add(block_id)
        return block_id

    def hash_blocks(self, seq):
        self._check_seq(seq)
        i = seq.num_cached_tokens // self.block_size
        stop = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        while i < stop:
            prefix = self.blocks[seq.block_table[i - 1]].hash if i else -1
            block = self.blocks[seq.block_table[i]]
            block.update(self.compute_hash(seq.block(i), prefix), seq.block(i))
            self.hash_to_block_id[block.hash] = block.block_id
            i += 1


class IntToBytesPerId(StructPackedWhileLoops):
    """Bytes built id by id with int.to_bytes (signed little-endian, 8 bytes), or an array('q')."""

    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        h = xxhash.xxh64()
        if prefix >= 0:
            h.update(int(prefix).to_bytes(8, byteorder="little", signed=False))
        for token in token_ids:
            h.update(int(token).to_bytes(8, "little", signed=True))
        return h.intdigest()

    def hash_blocks(self, seq):
        self._check_seq(seq)
        first = seq.num_cached_tokens // self.block_size
        last = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size
        for i in range(first, last):
            prefix = -1 if i == 0 else self.blocks[seq.block_table[i - 1]].hash
            digest = xxhash.xxh64(
                (b"" if prefix == -1 else prefix.to_bytes(8, "little")) + array.array("q", seq.block(i)).tobytes()
            ).intdigest()
            self.blocks[seq.block_table[i]].update(digest, list(seq.block(i)))
            self.hash_to_block_id[digest] = seq.block_table[i]


VARIANTS = [Correct, StructPackedWhileLoops, IntToBytesPerId]
