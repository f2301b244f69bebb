"""Lab 05 grader: the prefix cache's four parts, each graded on its own points.

The parts, in the notebook's order (``PARTS``, named as the lab's declaration, ``LAB`` in this folder's
``__init__.py``, names them):
1. ``hash``: ``compute_hash``, exact xxh64 chain values; 2. ``release``: ``deallocate`` + ``_allocate_block``,
ref-counted release and block reuse; 3. ``register``: ``hash_blocks``; 4. ``admit``: ``can_allocate`` +
``allocate``, prefix hits.

A check of part k runs the student's class with paged_kv's version of every OTHER part's TODOs
(``with_reference_todos``; a part whose checks need them is graded in a box whose edition has them), so a
bug in one part costs that part's points only, and a part not written yet does not stop the others from
being graded. ``@grades`` names only part k's reference functions: the student's part k calling them
earns nothing, while their calls to the substituted other parts are allowed. The allocation policy is
the lab's contract, so traces compare block tables, ref counts, the free queue's order and the hash map
exactly with ``paged_kv.BlockManager``.
"""

from __future__ import annotations


from paged_kv import BlockManager as Reference, Sequence as LocalSequence
from paged_kv.cache.prefix_cache import NO_HASH, _chain_hash

from autograder.labs.checking import (
    N_,
    _,
    call,
    check,
    expect_equal,
    grades,
    materialize,
    plain_int,
    student_side,
    with_reference_todos,
)
from autograder.labs.lab05_prefix_cache.twins import (
    admit_and_compute,
    compute_tokens,
    expect_same_state,
    manager_pair,
    run_trace,
    same_ops,
    seq_for,
)

# The visible tests make sequences, mix in the reference's other TODOs and run prefills where the student's
# manager lives.
BOX_NAMES = ("Sequence", "with_reference_todos", "prefill", "decode_step")


HASH = ("compute_hash",)
RELEASE = ("deallocate", "_allocate_block")
REGISTER = ("hash_blocks",)
ADMIT = ("can_allocate", "allocate")
#: part name -> its TODO methods, in the notebook's order
PARTS = {"hash": HASH, "release": RELEASE, "register": REGISTER, "admit": ADMIT}

# Where the lab teaches what a hint is about, where it is not the part's own section (the insight report's
# "taught in"): a fragment of the hint, as the visible tests and these checks give it, and its section. The
# chain is § 1's idea, the token check § 7's; every other hint is taught where its part's task is.
TEACHES = {
    "the previous block's hash goes in first": "§ 1",
    "feed the prefix into the digest": "§ 1",
    "feed each block's hash into the next": "§ 1",
    "compare the block's token_ids with": "§ 7",
}


# -- part 1, hash: compute_hash -------------------------------------------------------------------------
HASH_CASES = [
    ([1, 2, 3, 4], NO_HASH),
    ([1, 2, 3, 4], 12345),
    ([7], NO_HASH),
    ([0, 0], NO_HASH),
    ([5, 6], 0),
    ([2**31 + 5, 3], NO_HASH),
    ([9, 8, 7], 2**64 - 1),
    (list(range(16)), 2**40 + 7),
]


@grades(Reference.compute_hash, _chain_hash)
def check_hash_values(cls) -> None:
    """Exact xxh64 chain values: prefix bytes, int64 ids, prefix 0 and the largest prefix, big ids."""
    tested = with_reference_todos(cls, *HASH)
    make_list = student_side(cls, "builtins.list")
    for tokens, prefix in HASH_CASES:
        case = _(f"compute_hash({tokens}, prefix={prefix})")
        expected = Reference.compute_hash(tokens, prefix)
        given = make_list(tokens)  # a list on the student's side, to see whether compute_hash changes it
        got = call(case, tested.compute_hash, given, prefix)
        expect_equal(
            case,
            got,
            expected,
            _(
                "xxh64 of the prefix as 8 little-endian bytes (only when prefix != -1, so 0 counts), "
                "then the ids as int64 bytes; return h.intdigest()"
            ),
        )
        check(materialize(given) == tokens, case, _("compute_hash must not change the list it is given"))
    manager = tested(4, 2)
    case = _("compute_hash on an instance, default prefix")
    expect_equal(
        case,
        call(case, manager.compute_hash, [3, 4]),
        Reference.compute_hash([3, 4]),
        _("the default prefix is -1 (no previous block)"),
    )
    case = _("a three-block chain")
    h = NO_HASH
    expected = NO_HASH
    for block in ([1, 2], [3, 4], [5, 6]):
        h = call(case, tested.compute_hash, block, h)
        expected = Reference.compute_hash(block, expected)
        expect_equal(_(f"{case}: hash of block {block}"), h, expected, _("feed each block's hash into the next"))


# -- part 4, admit: can_allocate + allocate -------------------------------------------------------------
ALLOCATE_HINT = N_(
    "walk full blocks from the start (never the last one), chain the hash, stop at the first "
    "miss or token mismatch; a hit on a used block costs no free block, a cached-free hit does"
)


@grades(Reference.can_allocate, Reference.allocate)
def check_prefix_hits(cls) -> None:
    """Hits on live and cached-free blocks, the last block never served, token verification, OOM counts."""
    tested = with_reference_todos(cls, *ADMIT)
    # A live shared prefix: two blocks shared, ref counts 2, only the tail is new.
    same_ops(
        _("live prefix shared"),
        *manager_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6, 7])],
        ALLOCATE_HINT,
    )
    # The last block is never served from the cache, even when the whole prompt is cached.
    same_ops(
        _("prompt fully cached"),
        *manager_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4]), ("prefill", [1, 2, 3, 4])],
        N_("the last block must be computed: loop over range(seq.num_blocks - 1)"),
    )
    same_ops(
        _("block_size=1, same prompt twice"),
        *manager_pair(tested, 8, 1),
        [("prefill", [4, 5, 6]), ("prefill", [4, 5, 6])],
        N_("with block_size 1 the last token is still computed"),
    )
    # Stop at the first miss: a later block that matches must not be reused after a gap.
    same_ops(
        _("a miss in the middle"),
        *manager_pair(tested, 10, 2),
        [("prefill", [1, 2, 3, 4, 5, 6, 7]), ("prefill", [1, 2, 9, 9, 5, 6, 7])],
        ALLOCATE_HINT,
    )
    # Stop at the first miss even when a later block is still cached (so the hits form a prefix):
    # two copies of a prefix filled in one step, the map's copy of block 1 reused, block 2 still cached.
    same_ops(
        _("a later block cached after a miss"),
        *manager_pair(tested, 7, 1),
        [
            ("batch", [[1, 2, 3, 6], [1, 2, 5]]),
            ("free", 1),
            ("free", 0),
            ("prefill", [9, 9]),
            ("prefill", [1, 2, 3, 7]),
        ],
        N_("stop at the first miss: cached blocks must be a prefix of the sequence"),
    )
    # Cached-free blocks are revived (taken out of the free queue) and still cost a free block.
    same_ops(
        _("revive a freed prefix"),
        *manager_pair(tested, 6, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("free", 0), ("prefill", [1, 2, 3, 4, 8])],
        ALLOCATE_HINT,
    )
    for num_blocks, second in ((4, [1, 2, 3, 4, 6, 7]), (4, [1, 2, 3, 4, 6, 7, 8])):
        student, reference = manager_pair(tested, num_blocks, 2)
        same_ops(
            _("pool nearly full"),
            student,
            reference,
            [("prefill", [1, 2, 3, 4, 5]), ("free", 0), ("prefill", [9, 9])],
            ALLOCATE_HINT,
        )
        case = _(f"{num_blocks} blocks, 1 live, prefix cached-free, admitting a {len(second)}-token prompt")
        expected = reference.can_allocate(LocalSequence(second, 2))
        got = plain_int(
            case, call(case, student.can_allocate, seq_for(student, second, 2)), N_("can_allocate's result")
        )
        expect_equal(
            case,
            got,
            expected,
            _(
                "a hit on a free (cached) block still takes that block out of the "
                "free pool: only hits on used blocks lower the count of new blocks"
            ),
        )
    student, reference = manager_pair(tested, 4, 2)
    same_ops(
        _("exact fit with a live hit"),
        student,
        reference,
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6])],
        ALLOCATE_HINT,
    )
    # Token verification: the cache maps a prompt's hash to a block holding other tokens (a collision).
    for block_size in (2, 3):
        student, reference = manager_pair(tested, 8, block_size)
        planted = []
        for manager in (student, reference):
            seq = seq_for(manager, [7] * block_size + [1], block_size)
            admit_and_compute(manager, seq)
            victim = manager.blocks[seq.block_table[0]]
            colliding = Reference.compute_hash(list(range(1, block_size + 1)))
            del manager.hash_to_block_id[victim.hash]
            victim.hash = colliding
            manager.hash_to_block_id[colliding] = victim.block_id
            planted.append(seq)
        case = _(
            f"hash collision (block_size={block_size}): the cache says block {planted[1].block_table[0]} holds "
            f"{list(range(1, block_size + 1))} but it holds {[7] * block_size}"
        )
        prompt = list(range(1, block_size + 1)) + [5]
        got = plain_int(
            case, call(case, student.can_allocate, seq_for(student, prompt, block_size)), N_("can_allocate's result")
        )
        expect_equal(
            case, got, 0, _("on a hash hit compare the block's token_ids with the sequence's; a mismatch is a miss")
        )


@grades(Reference.can_allocate, Reference.allocate)
def check_allocation_traces(cls) -> None:
    """Seeded engine runs (admissions, decodes, preemptions, finishes) match the reference exactly."""
    tested = with_reference_todos(cls, *ADMIT)
    for seed in range(6):
        run_trace(tested, seed, ALLOCATE_HINT)


# -- part 2, release: deallocate + _allocate_block ------------------------------------------------------
RELEASE_HINT = N_(
    "deallocate: last block first, ref_count - 1, free only at 0 and keep its hash; "
    "_allocate_block: pop the front of the free queue, drop the block's old hash only if the map "
    "still points at this block, reset it"
)


@grades(Reference.deallocate, Reference._allocate_block)
def check_release_and_reuse(cls) -> None:
    """Ref counts, last-first release, free-but-cached hits, stale mappings dropped, the ``== block_id`` guard."""
    tested = with_reference_todos(cls, *RELEASE)
    same_ops(
        _("free a sequence alone"),
        *manager_pair(tested, 6, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("free", 0)],
        RELEASE_HINT,
    )
    same_ops(
        _("free one of two sharers"),
        *manager_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6]), ("free", 0), ("free", 0)],
        RELEASE_HINT,
    )
    same_ops(
        _("a freed prefix is still hit"),
        *manager_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("free", 0), ("prefill", [1, 2, 3, 4, 9])],
        N_("do not clear a block's hash (or its map entry) when it is freed: free but cached"),
    )
    # Reuse: the filler takes the freed prefix's blocks; their old hashes must leave the map.
    same_ops(
        _("reused blocks lose their old hash"),
        *manager_pair(tested, 3, 2),
        [
            ("prefill", [1, 2, 3, 4, 5]),
            ("free", 0),
            ("prefill", [7, 8, 9, 10, 11]),
            ("free", 0),
            ("prefill", [1, 2, 3, 4, 5]),
        ],
        RELEASE_HINT,
    )
    # nano-vllm #163: the same tokens under another prefix land in the reused block; the stale entry
    # would then pass the token check and serve KV computed after the wrong prefix.
    same_ops(
        _("stale mapping with equal tokens"),
        *manager_pair(tested, 4, 2),
        [
            ("prefill", [1, 2, 7]),
            ("prefill", [1, 2, 5, 6]),
            ("free", 1),
            ("prefill", [3, 4, 5, 6]),
            ("free", 1),
            ("prefill", [1, 2, 5, 6, 9]),
        ],
        N_(
            "when a block is handed out again, delete its old hash from hash_to_block_id (if the map still points at it)"
        ),
    )
    # nano-vllm #219: two sequences fill the same prefix in one step, so two blocks carry one hash and
    # the map points at the second. Reusing the first must not delete the second's entry.
    for block_size in (1, 2):
        student, reference = manager_pair(tested, 6, block_size)
        prompt = [1] * block_size + [2]
        managers = ((student, "mine"), (reference, "theirs"))
        seqs = {
            name: [seq_for(manager, prompt, block_size), seq_for(manager, prompt, block_size)]
            for manager, name in managers
        }
        for manager, name in managers:
            case = _(f"same-step duplicates (block_size={block_size})")
            for seq in seqs[name]:  # both admitted in one step: neither is hashed yet
                call(case, manager.allocate, seq, manager.can_allocate(seq))
            for seq in seqs[name]:
                compute_tokens(case, manager, seq)
            call(case, manager.deallocate, seqs[name].pop(0))
            filler = seq_for(manager, [9] * (4 * block_size), block_size)  # the unused blocks, then the first copy's
            call(case, admit_and_compute, manager, filler)
            call(case, manager.deallocate, filler)
        case = _(f"same-step duplicates (block_size={block_size}): the first copy's block was reused")
        expect_same_state(
            case,
            student,
            seqs["mine"],
            reference,
            seqs["theirs"],
            _(
                "delete the old hash only if hash_to_block_id[block.hash] == block_id: another block "
                "may hold the same prefix and still be live"
            ),
        )
        expected = reference.can_allocate(LocalSequence(prompt + [3], block_size))
        got = plain_int(case, call(case, student.can_allocate, seq_for(student, prompt + [3], block_size)), N_("hits"))
        expect_equal(_(f"{case}: hits for the same prefix"), got, expected, _("the live copy must still be found"))


@grades(Reference.deallocate, Reference._allocate_block)
def check_release_traces(cls) -> None:
    """Seeded engine runs with preemptions and finishes: free queue order and hash map match exactly."""
    tested = with_reference_todos(cls, *RELEASE)
    for seed in range(10, 16):
        run_trace(tested, seed, RELEASE_HINT)


# -- part 3, register: hash_blocks ----------------------------------------------------------------------
HASH_BLOCKS_HINT = N_(
    "register blocks start = num_cached_tokens // block_size up to end = (num_cached_tokens + "
    "num_scheduled_tokens) // block_size, chaining from block start - 1's hash"
)


def _hash_step(case: str, manager, seq, scheduled: int) -> None:
    compute_tokens(case, manager, seq, scheduled)


@grades(Reference.hash_blocks)
def check_hash_blocks(cls) -> None:
    """Only full, computed blocks; the chain continues across steps; chunks; block_size 1; traces."""
    tested = with_reference_todos(cls, *REGISTER)
    for block_size, prompt, chunks, decodes in [
        (2, [1, 2, 3, 4, 5], [5], 4),
        (3, list(range(10)), [4, 0, 5, 1], 3),
        (1, [4, 4, 4], [1, 2], 3),
        (4, [1, 2, 3], [3], 6),
        (2, [5, 6, 7, 8, 9, 10], [2, 2, 2], 2),
    ]:
        student, reference = manager_pair(tested, 12, block_size)
        mine, theirs = seq_for(student, prompt, block_size), LocalSequence(prompt, block_size)
        reference.allocate(theirs, 0)
        student.allocate(mine, 0)
        case = _(f"block_size={block_size}, prompt of {len(prompt)} computed in chunks {chunks}")
        for chunk in chunks:  # chunked prefill: only what was computed may be registered
            _hash_step(case, reference, theirs, chunk)
            _hash_step(case, student, mine, chunk)
            expect_same_state(
                _(f"{case}, after {theirs.num_cached_tokens} tokens"),
                student,
                [mine],
                reference,
                [theirs],
                HASH_BLOCKS_HINT,
            )
        for token in range(decodes):
            for manager, seq in ((reference, theirs), (student, mine)):
                seq.append_token(30 + token)
                manager.may_append(seq)
                _hash_step(case, manager, seq, 1)
            expect_same_state(
                _(f"{case}, after decoding to {len(theirs)} tokens"),
                student,
                [mine],
                reference,
                [theirs],
                HASH_BLOCKS_HINT,
            )
    for seed in range(20, 24):
        run_trace(tested, seed, HASH_BLOCKS_HINT)
