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

import random
from collections import deque
from typing import List, Tuple

from paged_kv import BlockManager as Reference, Sequence as LocalSequence
from paged_kv.cache.invariants import check_block_state
from paged_kv.cache.prefix_cache import NO_HASH, _chain_hash

from autograder.labs.checking import (
    N_,
    _,
    call,
    check,
    expect_equal,
    grades,
    joined,
    materialize,
    plain_int,
    plain_ints,
    student_side,
    with_reference_todos,
)

# The visible tests make sequences, mix in the reference's other TODOs and run prefills where the student's
# manager lives.
BOX_NAMES = ("Sequence", "with_reference_todos", "prefill", "decode_step")


def seq_for(manager, tokens, block_size: int):
    """A ``Sequence`` on the side where ``manager`` lives (the grading kernel's, or this process's)."""
    return student_side(manager, "paged_kv.Sequence")(list(tokens), block_size)


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


# -- state of a manager, as plain values ----------------------------------------------------------------
def state(case: str, manager, seqs, raw_out: list = None) -> dict:
    """Everything the policy fixes: tables, cached tokens, ref counts, hashes, free order, used set, map.

    Read in one go where the manager lives (``paged_kv.cache.invariants.block_manager_state``), then every
    value is checked to be a plain int here."""
    raw = materialize(call(case, student_side(manager, "paged_kv.cache.invariants.block_manager_state"), manager, seqs))
    check(type(raw) is dict, case, _("the manager's state could not be read"), got=raw)
    if raw_out is not None:
        raw_out.append(raw)
    ids = plain_ints(case, raw["block ids"], N_("the blocks' block_id"))
    mapping = {}
    for pair in raw["hash_to_block_id"]:
        h, block_id = pair if type(pair) is tuple and len(pair) == 2 else (pair, None)
        mapping[plain_int(case, h, N_("a hash_to_block_id key"))] = plain_int(
            case, block_id, N_("a hash_to_block_id value")
        )
    return {
        N_("block tables"): [
            plain_ints(case, t, N_(f"seq {i}'s block_table")) for i, t in enumerate(raw["block tables"])
        ],
        "num_cached_tokens": [plain_int(case, n, "num_cached_tokens") for n in raw["num_cached_tokens"]],
        N_("ref counts"): [plain_int(case, n, N_(f"block {b}'s ref_count")) for b, n in zip(ids, raw["ref counts"])],
        N_("block hashes"): [plain_int(case, h, N_(f"block {b}'s hash")) for b, h in zip(ids, raw["block hashes"])],
        N_("block token ids"): [
            plain_ints(case, t, N_(f"block {b}'s token_ids")) for b, t in zip(ids, raw["block token ids"])
        ],
        N_("free queue (in order)"): plain_ints(case, raw["free queue (in order)"], "free_block_ids"),
        N_("used blocks"): plain_ints(case, raw["used blocks"], "used_block_ids"),
        "hash_to_block_id": mapping,
    }


def expect_same_state(case: str, student, student_seqs, reference, reference_seqs, hint: str) -> None:
    """The student's manager's state (``state``) equals the reference's, key by key; ``hint`` marked ``N_``."""
    raw: list = []
    mine, theirs = state(case, student, student_seqs, raw), state(case, reference, reference_seqs)
    hint = _(hint)
    for key in theirs:
        expect_equal(joined(case, key), mine[key], theirs[key], hint)
    call(case, check_block_state, raw[0])


# -- nano-vllm's scheduler, on two managers at once -----------------------------------------------------
class Twin:
    """One request as a pair of ``Sequence`` objects: the student's manager's and the reference's."""

    def __init__(self, tokens: List[int], block_size: int, sequence):
        self.mine, self.theirs = sequence(tokens, block_size), LocalSequence(tokens, block_size)

    def append(self, token: int) -> None:
        self.mine.append_token(token)
        self.theirs.append_token(token)


def _compute(case: str, manager, seq, tokens: int = None) -> None:
    """The model computed ``tokens`` of ``seq`` (default: all not cached yet): the manager registers the
    blocks they filled, then they count as cached. Done where the manager lives (one request)."""
    if tokens is None:
        call(case, student_side(manager, "paged_kv.cache.steps.compute_rest"), manager, seq)
    else:
        call(case, student_side(manager, "paged_kv.cache.steps.compute"), manager, seq, tokens)


def run_trace(cls, seed: int, hint: str, *, steps: int = 60) -> None:
    """A seeded engine run on ``cls`` and on the reference, compared after every step.

    Like nano-vllm's scheduler: admit from the head of the waiting queue while ``can_allocate`` says
    it fits (several prompts can be admitted in one step, before any of them is hashed), then decode
    the running ones, preempting the newest when a block is missing; finished requests are released.
    Prompts share a few system prompts so that prefix hits, sharing and cached-free reuse all happen.
    ``hint`` is marked ``N_`` where it is written.
    """
    hint = _(hint)
    rng = random.Random(seed)
    Sequence = student_side(cls, "paged_kv.Sequence")  # the student's manager gets the kernel's sequences
    block_size = rng.choice([1, 2, 3, 4])
    num_blocks = rng.randint(6, 16)
    student, reference = (
        call(_(f"trace {seed}: creating the manager"), cls, num_blocks, block_size),
        Reference(num_blocks, block_size),
    )
    systems = [[rng.randrange(40) for _token in range(rng.randint(1, 3 * block_size))] for _system in range(3)]
    waiting: deque = deque()
    running: List[Twin] = []
    for step in range(steps):
        if rng.random() < 0.6:
            own = [rng.randrange(40) for _token in range(rng.randint(0, 2 * block_size))]
            waiting.append(Twin(rng.choice(systems) + own if rng.random() < 0.85 else own or [1], block_size, Sequence))
        case = _(f"trace {seed} (block_size={block_size}, {num_blocks} blocks), step {step}")
        admitted: List[Twin] = []
        while waiting:
            twin = waiting[0]
            expected = reference.can_allocate(twin.theirs)
            got = plain_int(case, call(case, student.can_allocate, twin.mine), N_("can_allocate's result"))
            expect_equal(_(f"{case}: can_allocate for a {len(twin.theirs)}-token prompt"), got, expected, hint)
            if expected == -1:
                break
            reference.allocate(twin.theirs, expected)
            call(case, student.allocate, twin.mine, expected)
            expect_equal(
                _(f"{case}: num_cached_tokens right after allocate"),
                twin.mine.num_cached_tokens,
                twin.theirs.num_cached_tokens,
                hint,
            )
            waiting.popleft()
            admitted.append(twin)
        for twin in admitted:  # the model computes the whole admitted batch, then every block is hashed
            for seq, manager in ((twin.theirs, reference), (twin.mine, student)):
                _compute(case, manager, seq)
        running.extend(admitted)
        if not admitted:
            for twin in list(running):
                if twin not in running:
                    continue
                twin.append(rng.randrange(40))  # the token sampled last step: this step computes its KV
                while not reference.can_append(twin.theirs):
                    victim = running.pop()  # preempt the newest running request
                    reference.deallocate(victim.theirs)
                    call(_(f"{case}: preempting a request"), student.deallocate, victim.mine)
                    waiting.appendleft(victim)
                    if victim is twin:
                        break
                else:
                    reference.may_append(twin.theirs)
                    call(case, student.may_append, twin.mine)
                    for seq, manager in ((twin.theirs, reference), (twin.mine, student)):
                        _compute(case, manager, seq, 1)
        for twin in [t for t in running if rng.random() < 0.15]:
            running.remove(twin)
            reference.deallocate(twin.theirs)
            call(_(f"{case}: releasing a finished request"), student.deallocate, twin.mine)
        expect_same_state(case, student, [t.mine for t in running], reference, [t.theirs for t in running], hint)


def _prefill(manager, seq) -> int:
    hits = plain_int(_("prefill"), manager.can_allocate(seq), N_("can_allocate's result"))
    if hits < 0:
        raise RuntimeError(_(f"OOM: can_allocate returned {hits}"))
    manager.allocate(seq, hits)
    _compute(_("prefill"), manager, seq)
    return hits


def _pair(cls, num_blocks: int, block_size: int) -> Tuple[object, Reference]:
    return cls(num_blocks, block_size), Reference(num_blocks, block_size)


OPS = {"prefill": N_("prefill"), "batch": N_("a batch admitted in one step"), "free": N_("free a sequence")}  # shown


def _same_ops(case: str, student, reference, ops, hint: str) -> None:
    """Run ``ops`` (``(kind, tokens or index)``) on both managers and compare the state after each; ``hint`` is
    marked ``N_`` where it is written."""
    hint = _(hint)
    mine: list = []
    theirs: list = []
    for i, (kind, arg) in enumerate(ops):
        step = _(f"{case}, op {i + 1} ({OPS[kind]})")
        if kind == "prefill":
            theirs.append(LocalSequence(arg, reference.block_size))
            mine.append(seq_for(student, arg, reference.block_size))
            expected = reference.can_allocate(theirs[-1])
            got = plain_int(step, call(step, student.can_allocate, mine[-1]), N_("can_allocate's result"))
            expect_equal(_(f"{step}: can_allocate for {arg}"), got, expected, hint)
            reference.allocate(theirs[-1], expected)
            call(step, student.allocate, mine[-1], expected)
            expect_equal(
                _(f"{step}: num_cached_tokens right after allocate"),
                mine[-1].num_cached_tokens,
                theirs[-1].num_cached_tokens,
                _("allocate sets num_cached_tokens = hits * block_size"),
            )
            for manager, seq in ((reference, theirs[-1]), (student, mine[-1])):
                _compute(step, manager, seq)
        elif kind == "batch":  # admitted in one step: all allocated before any is computed and hashed
            new = [
                (LocalSequence(tokens, reference.block_size), seq_for(student, tokens, reference.block_size))
                for tokens in arg
            ]
            for ref_seq, my_seq in new:
                expected = reference.can_allocate(ref_seq)
                got = plain_int(step, call(step, student.can_allocate, my_seq), N_("can_allocate's result"))
                expect_equal(_(f"{step}: can_allocate for {ref_seq.token_ids}"), got, expected, hint)
                reference.allocate(ref_seq, expected)
                call(step, student.allocate, my_seq, expected)
            for ref_seq, my_seq in new:
                for manager, seq in ((reference, ref_seq), (student, my_seq)):
                    _compute(step, manager, seq)
                theirs.append(ref_seq)
                mine.append(my_seq)
        elif kind == "free":
            reference.deallocate(theirs.pop(arg))
            freed = mine.pop(arg)
            call(step, student.deallocate, freed)
            expect_equal(
                _(f"{step}: the freed sequence's block_table"),
                freed.block_table,
                [],
                _("deallocate clears seq.block_table"),
            )
            expect_equal(
                _(f"{step}: the freed sequence's num_cached_tokens"),
                freed.num_cached_tokens,
                0,
                _("deallocate sets seq.num_cached_tokens = 0"),
            )
        expect_same_state(step, student, mine, reference, theirs, hint)


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
    _same_ops(
        _("live prefix shared"),
        *_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6, 7])],
        ALLOCATE_HINT,
    )
    # The last block is never served from the cache, even when the whole prompt is cached.
    _same_ops(
        _("prompt fully cached"),
        *_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4]), ("prefill", [1, 2, 3, 4])],
        N_("the last block must be computed: loop over range(seq.num_blocks - 1)"),
    )
    _same_ops(
        _("block_size=1, same prompt twice"),
        *_pair(tested, 8, 1),
        [("prefill", [4, 5, 6]), ("prefill", [4, 5, 6])],
        N_("with block_size 1 the last token is still computed"),
    )
    # Stop at the first miss: a later block that matches must not be reused after a gap.
    _same_ops(
        _("a miss in the middle"),
        *_pair(tested, 10, 2),
        [("prefill", [1, 2, 3, 4, 5, 6, 7]), ("prefill", [1, 2, 9, 9, 5, 6, 7])],
        ALLOCATE_HINT,
    )
    # Stop at the first miss even when a later block is still cached (so the hits form a prefix):
    # two copies of a prefix filled in one step, the map's copy of block 1 reused, block 2 still cached.
    _same_ops(
        _("a later block cached after a miss"),
        *_pair(tested, 7, 1),
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
    _same_ops(
        _("revive a freed prefix"),
        *_pair(tested, 6, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("free", 0), ("prefill", [1, 2, 3, 4, 8])],
        ALLOCATE_HINT,
    )
    for num_blocks, second in ((4, [1, 2, 3, 4, 6, 7]), (4, [1, 2, 3, 4, 6, 7, 8])):
        student, reference = _pair(tested, num_blocks, 2)
        _same_ops(
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
    student, reference = _pair(tested, 4, 2)
    _same_ops(
        _("exact fit with a live hit"),
        student,
        reference,
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6])],
        ALLOCATE_HINT,
    )
    # Token verification: the cache maps a prompt's hash to a block holding other tokens (a collision).
    for block_size in (2, 3):
        student, reference = _pair(tested, 8, block_size)
        planted = []
        for manager in (student, reference):
            seq = seq_for(manager, [7] * block_size + [1], block_size)
            _prefill(manager, seq)
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
    _same_ops(
        _("free a sequence alone"), *_pair(tested, 6, 2), [("prefill", [1, 2, 3, 4, 5]), ("free", 0)], RELEASE_HINT
    )
    _same_ops(
        _("free one of two sharers"),
        *_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("prefill", [1, 2, 3, 4, 6]), ("free", 0), ("free", 0)],
        RELEASE_HINT,
    )
    _same_ops(
        _("a freed prefix is still hit"),
        *_pair(tested, 8, 2),
        [("prefill", [1, 2, 3, 4, 5]), ("free", 0), ("prefill", [1, 2, 3, 4, 9])],
        N_("do not clear a block's hash (or its map entry) when it is freed: free but cached"),
    )
    # Reuse: the filler takes the freed prefix's blocks; their old hashes must leave the map.
    _same_ops(
        _("reused blocks lose their old hash"),
        *_pair(tested, 3, 2),
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
    _same_ops(
        _("stale mapping with equal tokens"),
        *_pair(tested, 4, 2),
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
        student, reference = _pair(tested, 6, block_size)
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
                _compute(case, manager, seq)
            call(case, manager.deallocate, seqs[name].pop(0))
            filler = seq_for(manager, [9] * (4 * block_size), block_size)  # the unused blocks, then the first copy's
            call(case, _prefill, manager, filler)
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
    _compute(case, manager, seq, scheduled)


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
        student, reference = _pair(tested, 12, block_size)
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
