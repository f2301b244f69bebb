"""What each graded lab asks for, as code in the package: its TODOs, their other implementations, its parts.

An *edition* of the package (``autograder.editions.build``) leaves out, as stubs that raise
``TodoNotWritten``, a set of the functions listed here:

- ``todos``: the reference implementation of each TODO of the lab (the answer);
- ``equivalents``: code elsewhere in the package that computes what a TODO computes, without calling
  the TODO (a student could delegate to it): e.g. for lab 03's decode growth every ``may_append``, for
  lab 05's ``compute_hash`` the module's own ``_chain_hash``. Code that merely CALLS a TODO needs no
  entry: in an edition it reaches the stub.

A lab with several parts grades each part on its own, with the reference's versions of the other parts
(``with_reference_todos``). A part whose checks need another part's reference (``own_box``) is graded in
a box of its own, whose edition leaves out that part only; every other part is graded in the lab's
main box, whose edition leaves out every part of the lab. So a TODO never shares a process with its own
reference. Every edition also leaves out every LATER lab's TODOs and equivalents (a class's handout for
lab NN carries the edition of NN: answers of earlier labs, past due, stay).

``REVIEWED`` lists code that looks close to a TODO but was judged not to implement it, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Stub:
    """One function (or Triton kernel) an edition leaves out: ``module`` is its path inside ``paged_kv/``,
    ``qualname`` its name there (``Class.method`` for a method), ``why`` a few words for its message."""

    module: str
    qualname: str
    why: str = ""

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def dotted(self) -> str:
        """``paged_kv.cache.prefix_cache.BlockManager.allocate``."""
        return "paged_kv." + self.module[:-len(".py")].replace("/", ".") + "." + self.qualname


@dataclass(frozen=True)
class Part:
    """A part of a lab: the TODOs graded together, the graded cells that grade them, and whether its checks
    need the other parts' references (then it is graded in a box of its own)."""

    name: str
    todos: Tuple[Stub, ...]
    cells: Tuple[str, ...]
    equivalents: Tuple[Stub, ...] = ()
    own_box: bool = False

    @property
    def stubs(self) -> Tuple[Stub, ...]:
        return self.todos + self.equivalents


@dataclass(frozen=True)
class LabTodos:
    lab: str
    title: str
    parts: Tuple[Part, ...]

    @property
    def stubs(self) -> Tuple[Stub, ...]:
        return tuple(s for part in self.parts for s in part.stubs)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"lab {self.lab} has no part {name!r}; its parts are {[p.name for p in self.parts]}")

    def part_of_cell(self, grade_id: str) -> Optional[Part]:
        return next((p for p in self.parts if grade_id in p.cells), None)

    @property
    def boxed_parts(self) -> Tuple[Part, ...]:
        return tuple(p for p in self.parts if p.own_box)


PREFIX = "cache/prefix_cache.py"
FORK = "cache/forking.py"

LABS: Tuple[LabTodos, ...] = (
    LabTodos("01-capacity-ledger", "capacity ledger", (
        Part("estimate", (Stub("cache/ledger.py", "estimate_kv_cache_bytes"),),
             ("lab01-visible", "lab01-hidden-per-token", "lab01-hidden-per-block", "lab01-hidden-total",
              "lab01-hidden-random"),
             equivalents=(Stub("engine/model.py", "TinyLlama.kv_bytes_per_token",
                               "the tiny model's own bytes-per-token formula"),)),)),
    LabTodos("02-atomic-prefill", "atomic prefill", (
        Part("prefill", (Stub("cache/manager.py", "KVCacheManager.allocate_for_prefill"),),
             ("lab02-visible", "lab02-hidden-count", "lab02-hidden-atomic", "lab02-hidden-random")),)),
    LabTodos("03-decode-growth", "decode boundary growth", (
        Part("decode", (Stub("cache/manager.py", "KVCacheManager.allocate_for_decode"),),
             ("lab03-visible", "lab03-hidden-boundaries", "lab03-hidden-block-size-one", "lab03-hidden-rollback",
              "lab03-hidden-random"),
             equivalents=(Stub(PREFIX, "BlockManagerBase.may_append", "the block manager's decode growth"),
                          Stub(PREFIX, "BlockManagerBase.can_append", "the block manager's decode growth"),
                          Stub(PREFIX, "BlockManagerBase._num_new_blocks_for_decode",
                               "the block manager's decode growth"))),)),
    LabTodos("04-logical-reconstruction", "logical reconstruction", (
        Part("reconstruct", (Stub("cache/manager.py", "KVCacheManager.get_physical_cache"),),
             ("lab04-visible", "lab04-hidden-order", "lab04-hidden-tail", "lab04-hidden-random"),
             equivalents=(Stub("kernels/attention.py", "gather_kv", "reads a pool through block tables"),
                          Stub("engine/cache_ops.py", "slots_for", "maps logical positions through a block table"))),)),
    LabTodos("05-prefix-cache", "prefix cache", (
        Part("hash", (Stub(PREFIX, "BlockManager.compute_hash"),), ("lab05-visible-hash", "lab05-hidden-hash"),
             equivalents=(Stub(PREFIX, "_chain_hash", "the package's own chained xxh64"),)),
        Part("release", (Stub(PREFIX, "BlockManager.deallocate"), Stub(PREFIX, "BlockManager._allocate_block")),
             ("lab05-visible-release", "lab05-hidden-release", "lab05-hidden-release-traces"), own_box=True),
        Part("register", (Stub(PREFIX, "BlockManager.hash_blocks"),),
             ("lab05-visible-hash-blocks", "lab05-hidden-hash-blocks"), own_box=True),
        Part("admit", (Stub(PREFIX, "BlockManager.can_allocate"), Stub(PREFIX, "BlockManager.allocate")),
             ("lab05-visible-allocate", "lab05-hidden-hits", "lab05-hidden-admit-traces"), own_box=True),
    )),
    LabTodos("06-triton-paged-attention", "Triton paged attention", (
        Part("kernels", (Stub("kernels/triton_kernels.py", "paged_decode_kernel"),
                         Stub("kernels/triton_kernels.py", "merge_splits_kernel")),
             ("lab06-step1-visible", "lab06-step1-hidden", "lab06-step2-visible", "lab06-step2-hidden",
              "lab06-step3-visible", "lab06-step3-hidden", "lab06-step4-visible", "lab06-step4-hidden-batch",
              "lab06-step4-hidden-poison", "lab06-step4-hidden-int64", "lab06-step5-visible",
              "lab06-step5-hidden-correct", "lab06-step5-hidden-build")),)),
    LabTodos("07-serve-it", "serving engine's scheduler", (
        Part("scheduler", (Stub("engine/scheduler.py", "Scheduler.schedule"), Stub("engine/scheduler.py", "Scheduler.preempt")),
             ("lab07-visible", "lab07-hidden-admission", "lab07-hidden-decode", "lab07-hidden-preemption",
              "lab07-hidden-random")),)),
    LabTodos("08-fork-and-share", "fork and share", (
        Part("fork", (Stub(FORK, "ForkingBlockManager.fork"),), ("lab08-visible-fork", "lab08-hidden-fork"),
             own_box=True),
        Part("copy-on-write", (Stub(FORK, "ForkingBlockManager.may_append"),),
             ("lab08-visible-cow", "lab08-hidden-cow", "lab08-hidden-oom"),
             # (_num_new_blocks_for_decode, the copy-on-write decision, stays: the given can_append needs it)
             own_box=True),
        Part("beams", (Stub("engine/forking.py", "advance_beams"),), ("lab08-visible-beams", "lab08-hidden-beams"),
             own_box=True),
        Part("copy", (Stub("engine/cache_ops.py", "copy_blocks"),), ("lab08-visible-copy", "lab08-hidden-copy")),
    )),
)

BY_LAB: Dict[str, LabTodos] = {lab.lab: lab for lab in LABS}

#: Labs that ask for no code of the package (lab 00 only checks the student's setup): a box that runs one
#: gets the strictest edition, which leaves out every graded lab's TODOs.
NO_TODOS: Tuple[str, ...] = ("00-start-here",)

#: Looked at and kept in every edition: why each does not implement a lab's TODO.
REVIEWED: Dict[str, str] = {
    "cache/manager.py:KVCacheManagerBase.blocks_needed":
        "ceil(n / block_size), given to labs 02-04 on purpose (lab 02 says so); it allocates nothing",
    "cache/ledger.py:blocks_per_request": "ceil(n / block_size) only: lab 02's TODO is the atomic allocation",
    "engine/scheduler.py:MaxReservationScheduler.schedule":
        "the contiguous baseline's policy (reservations, no prefix cache, no preemption): it fails lab 07's checks",
    "engine/cache_ops.py:store_kv": "writes new keys at slots; a copy between blocks is plain indexing either way",
    "kernels/attention.py:paged_decode_attention_ref":
        "lab 06's torch oracle: lab 06 grades Triton kernels built and launched from their text, which cannot "
        "call Python; it reads the pool through gather_kv (left out of lab 04's edition and earlier)",
    "lab/decode_bench.py": "benchmark competitors in torch (SDPA, FlexAttention): not Triton, not graded code",
}


def lab_index(lab: str) -> int:
    order = [entry.lab for entry in LABS]
    if lab not in order:
        raise KeyError(f"{lab!r} is not a graded lab; the graded labs are {order}")
    return order.index(lab)


def stubs_for(lab: str, part: Optional[str] = None) -> List[Stub]:
    """What the edition of ``lab`` leaves out: every part of ``lab`` (or only ``part``) and every later lab."""
    index = lab_index(lab)
    chosen = list(LABS[index].part(part).stubs) if part else list(LABS[index].stubs)
    for later in LABS[index + 1:]:
        chosen += later.stubs
    return chosen


@dataclass(frozen=True)
class BoxPlan:
    """Which box grades which graded cells of a lab: ``None`` is the lab's main box."""

    lab: str
    boxes: Dict[Optional[str], Tuple[str, ...]] = field(default_factory=dict)

    def box_of(self, grade_id: str) -> Optional[str]:
        for box, cells in self.boxes.items():
            if grade_id in cells:
                return box
        return None


def box_plan(lab: str) -> BoxPlan:
    """The main box grades every part that needs no other part's reference; each other part has its own."""
    entry = BY_LAB[lab]
    boxes: Dict[Optional[str], Tuple[str, ...]] = {None: tuple(c for p in entry.parts if not p.own_box for c in p.cells)}
    for part in entry.boxed_parts:
        boxes[part.name] = part.cells
    return BoxPlan(lab, boxes)
