"""Lab 07 grader: a scheduler's ``schedule()`` and ``preempt()``, replayed against the reference on traces.

Each check replays scripted or seeded workloads (``paged_kv.lab.scheduler_trace``) through the student's
class and ``paged_kv.Scheduler`` side by side and stops at the first step where they differ: which
sequences were scheduled, the order of both queues, blocks held, free blocks, cached tokens.
"""

from __future__ import annotations

from paged_kv.engine.scheduler import Scheduler as Reference
from paged_kv.lab.scheduler_trace import TraceRequest, TraceSpec, make_trace
from paged_kv.lab.scheduler_trace import compare_with_reference as _replay

from autograder.labs.checking import _, grades, student_side

BOX_NAMES = ("BlockManager",)  # the visible test builds a scheduler on a block manager of the student's side

# Where the lab teaches what a hint is about (the insight report's "taught in"; the task itself is § 4): a
# fragment of the hint, as the trace replay (``paged_kv.lab.scheduler_trace``) gives it to the visible test and
# these checks, and its section. The first match wins. The rules (first come first served, the token budget of
# uncached tokens, a prefill step runs no decode, the newest gives way and goes back to the head of waiting) are
# § 3's; the calls that carry them out (num_scheduled_tokens, deallocate, the order running is put back in) are
# the task's own.
TEACHES = {
    "first come, first served": "§ 3",
    "a step that admits anything is a prefill step": "§ 3",
    "admit only while can_allocate(head) != -1": "§ 3",
    "the budget counts only uncached tokens": "§ 3",
    "preempt the newest running sequence (the tail)": "§ 3",
    "a preempted sequence goes back to the head of waiting": "§ 3",
}


def compare_with_reference(cls, spec: TraceSpec, case: str, reference_cls=None) -> int:
    """``paged_kv.lab.scheduler_trace.compare_with_reference``, the student's side replayed where it lives and
    the reference replayed here (never a recording)."""
    return _replay(
        cls, spec, case, reference_cls or Reference, run_cls=student_side(cls, "paged_kv.lab.scheduler_trace.TraceRun")
    )


TRUSTED_NAMES = {"compare_with_reference": compare_with_reference}


def _spec(requests, num_blocks, block_size, max_num_seqs=8, max_num_batched_tokens=256) -> TraceSpec:
    reqs = tuple(TraceRequest(tuple(prompt), tokens, arrival) for prompt, tokens, arrival in requests)
    return TraceSpec(reqs, num_blocks, block_size, max_num_seqs, max_num_batched_tokens)


def _ids(start: int, count: int):
    return list(range(start, start + count))


@grades(Reference.schedule, Reference.preempt)
def check_fcfs_admission(cls) -> None:
    """Admission stops at the head: a big head blocks smaller ones behind it; token budget (exactly full
    too); max_num_seqs."""
    # r0 runs; r1 (big) cannot fit yet; r2 (small) arrives behind it and must wait too.
    compare_with_reference(
        cls,
        _spec([(_ids(1, 12), 6, 0), (_ids(20, 14), 3, 1), (_ids(40, 2), 3, 1)], num_blocks=7, block_size=4),
        _("head of the queue blocks the rest"),
    )
    # The token budget (24) admits r0 and r1 (12 + 10 tokens) but not r2; r3 would fit but is behind r2.
    compare_with_reference(
        cls,
        _spec(
            [(_ids(1, 12), 2, 0), (_ids(20, 10), 2, 0), (_ids(40, 8), 2, 0), (_ids(60, 1), 2, 0)],
            num_blocks=30,
            block_size=4,
            max_num_batched_tokens=24,
        ),
        _("token budget"),
    )
    # Boundaries: r0 + r1 fill the budget of 24 exactly; r2 alone is exactly the budget; r3 takes exactly
    # the blocks left free (a test with ``>=`` instead of ``>`` would never admit r2: the engine stalls).
    compare_with_reference(
        cls,
        _spec(
            [(_ids(1, 12), 2, 0), (_ids(20, 12), 2, 0), (_ids(40, 24), 1, 3), (_ids(70, 16), 1, 6)],
            num_blocks=10,
            block_size=4,
            max_num_batched_tokens=24,
        ),
        _("prompts that exactly fill the budget and the pool"),
    )
    # Prefix hits: r1 and r2 share r0's first two blocks, so only their last 2 and 3 tokens count against
    # the budget of 12: both fit in one step (counting their cached tokens too, r2 would not).
    compare_with_reference(
        cls,
        _spec(
            [(_ids(1, 11), 2, 0), (_ids(1, 8) + [90, 91], 3, 1), (_ids(1, 8) + [93, 94, 95], 2, 1)],
            num_blocks=12,
            block_size=4,
            max_num_batched_tokens=12,
        ),
        _("prefix hits and the budget"),
    )
    compare_with_reference(
        cls,
        _spec([([i + 1, i + 2], 4, 0) for i in range(7)], num_blocks=20, block_size=4, max_num_seqs=3),
        _("max_num_seqs = 3"),
    )


@grades(Reference.schedule, Reference.preempt)
def check_decode_growth(cls) -> None:
    """Decode: one token each, blocks exactly at boundaries (block sizes 1, 3, 4), oldest first, capped,
    and what happens when growth finds the pool empty."""
    for block_size in (1, 3, 4):
        compare_with_reference(
            cls,
            _spec(
                [(_ids(1, 5), 9, 0), (_ids(30, 2), 12, 0), (_ids(50, 7), 6, 2)], num_blocks=40, block_size=block_size
            ),
            _(f"decode growth, block_size={block_size}"),
        )
    compare_with_reference(
        cls,
        _spec([(_ids(10 * i, 3), 6, 0) for i in range(1, 6)], num_blocks=30, block_size=2, max_num_seqs=2),
        _("decode with max_num_seqs = 2"),
    )
    compare_with_reference(
        cls,
        _spec([(_ids(1, 3), 6, 0), (_ids(10, 2), 6, 0)], num_blocks=4, block_size=2),
        _("decode growth until the pool runs dry"),
    )


@grades(Reference.schedule, Reference.preempt)
def check_preemption(cls) -> None:
    """The newest gives way, returns to the head of waiting with no blocks; a lone sequence preempts itself."""
    compare_with_reference(
        cls,
        _spec([(_ids(1, 4), 6, 0), (_ids(10, 4), 6, 0)], num_blocks=3, block_size=4),
        _("two requests, one free block"),
    )
    compare_with_reference(
        cls,
        _spec([([10 * i + 1, 10 * i + 2, 10 * i + 3], 3, 0) for i in range(5)], num_blocks=5, block_size=4),
        _("five requests fill the pool"),
    )
    compare_with_reference(
        cls,
        _spec(
            [(_ids(1, 3), 8, 0), (_ids(10, 3), 8, 0), (_ids(20, 3), 8, 0), (_ids(30, 3), 8, 1)],
            num_blocks=6,
            block_size=2,
        ),
        _("several preemptions, an arrival behind the preempted"),
    )
    compare_with_reference(
        cls,
        _spec([(_ids(1, 3), 3, 0), (_ids(10, 8), 4, 0)], num_blocks=3, block_size=4),
        _("the last running sequence preempts itself"),
    )
    compare_with_reference(
        cls,
        _spec([(_ids(1, 2), 5, 0), (_ids(10, 2), 5, 0)], num_blocks=7, block_size=1),
        _("block_size=1: every token needs a block"),
    )


@grades(Reference.schedule, Reference.preempt)
def check_random_traces(cls, seeds=range(12)) -> None:
    """Seeded random workloads with shared prefixes, staggered arrivals and a tight pool."""
    for seed in seeds:
        spec = make_trace(
            seed,
            10,
            num_blocks=9 + seed % 4,
            block_size=(2, 4, 3)[seed % 3],
            max_num_seqs=3 + seed % 4,
            max_num_batched_tokens=36,
        )
        compare_with_reference(cls, spec, _(f"random trace seed={seed}"))
