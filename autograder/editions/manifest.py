"""What each edition of the package leaves out, read from the lab model (what a lab's TODOs, ``equivalents`` and
parts are: ``autograder/course/model.py``; each lab declares its own in ``autograder/labs/labNN_*/__init__.py``).

``stubs_for(lab, part)``: a lab's main box leaves out every part of the lab; a part graded in a box of its own
(``own_box``) leaves out that part only (``box_plan`` says which box grades which cell), so a TODO never shares a
process with its own reference. Every edition also leaves out every LATER lab's TODOs and equivalents (a class's
handout for lab NN carries the edition of NN: answers of earlier labs, past due, stay).

``REVIEWED`` lists code that looks close to a TODO, or that ``autograder/editions/routes.py`` finds doing what one
does, but was judged not to implement it, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from autograder.labs import LABS as ALL_LABS
from autograder.course.model import FORK, PREFIX, Lab, Part, Stub  # noqa: F401 (the names editions use)


LABS: Tuple[Lab, ...] = ALL_LABS
BY_LAB: Dict[str, Lab] = {lab.lab: lab for lab in LABS}

#: Labs that ask for no code of the package (lab 00 only checks the student's setup): a box that runs one
#: gets the strictest edition, which leaves out every graded lab's TODOs.
NO_TODOS: Tuple[str, ...] = ("00-start-here",)

#: Looked at and kept in every edition: why each does not implement a lab's TODO.
REVIEWED: Dict[str, str] = {
    "cache/manager.py:KVCacheManagerBase.blocks_needed": "ceil(n / block_size), given to labs 02-04 on purpose (lab 02 says so); it allocates nothing",
    "cache/ledger.py:blocks_per_request": "ceil(n / block_size) only: lab 02's TODO is the atomic allocation",
    "engine/scheduler.py:MaxReservationScheduler.schedule": "the contiguous baseline's policy (reservations, no prefix cache, no preemption): it fails lab 07's checks",
    "engine/cache_ops.py:store_kv": "writes new keys at slots; a copy between blocks is plain indexing either way",
    "kernels/attention.py:paged_decode_attention_ref": "lab 06's torch oracle: lab 06 grades Triton kernels built and launched from their text, which cannot "
    "call Python; it reads the pool through gather_kv (left out of lab 04's edition and earlier)",
    "lab/gpu_section.py": "lab 06's optional GPU cell: times the student's kernels beside the package's Triton kernel "
    "(launched as it is, never rewritten) and lab 04's copy path (gather_kv, then SDPA in torch): not Triton, not "
    "graded code",
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
    for later in LABS[index + 1 :]:
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
    boxes: Dict[Optional[str], Tuple[str, ...]] = {
        None: tuple(c for p in entry.parts if not p.own_box for c in p.cells)
    }
    for part in entry.boxed_parts:
        boxes[part.name] = part.cells
    return BoxPlan(lab, boxes)
