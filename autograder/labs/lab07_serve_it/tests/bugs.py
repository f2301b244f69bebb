"""Lab 07 (scheduler): realistic bugs and correct variants written differently, all starting from the
lab's starter like a student's notebook. Most bugs are one-line edits of the notebook's own solution:
``EDITS`` maps a name to (text in the solution, replacement, checks that must fail)."""

from __future__ import annotations

from collections import deque

from autograder.course.layout import LABS, SOURCE_DIR
from notebook_code import answer_class, answer_source, edited_answer
from paged_kv.lab.starters import SchedulerWithoutSchedule

ADMISSION, DECODE, PREEMPTION, RANDOM = (
    "check_fcfs_admission",
    "check_decode_growth",
    "check_preemption",
    "check_random_traces",
)

EDITS = {
    "preempts the oldest": (
        "victim = self.running.pop() if self.running else seq",
        "victim = self.running.popleft() if self.running else seq",
        {PREEMPTION, RANDOM},
    ),
    "forgets to deallocate on preemption": ("self.block_manager.deallocate(seq)\n", "pass\n", {PREEMPTION, RANDOM}),
    "preempted sequence to the tail of waiting": (
        "self.waiting.appendleft(seq)",
        "self.waiting.append(seq)",
        {PREEMPTION, RANDOM},
    ),
    "admits beyond the pool (capacity check off by one)": (
        "hits = self.block_manager.can_allocate(head)\n            if hits == -1:",
        "hits = max(self.block_manager.can_allocate(head), 0)\n"
        "            if self.block_manager.num_free_blocks + 1 < head.num_blocks:",
        {ADMISSION, PREEMPTION},
    ),
    "decode growth off by one (a free block for every token)": (
        "while not self.block_manager.can_append(seq):",
        "while self.block_manager.num_free_blocks < 1:",
        {PREEMPTION, RANDOM},
    ),
    "decode growth by hand, wrong for block size 1": (
        "while not self.block_manager.can_append(seq):",
        "while len(seq) % self.block_size == 1 and not self.block_manager.num_free_blocks:",
        {PREEMPTION},
    ),
    "forgets may_append": ("                self.block_manager.may_append(seq)\n", "", {DECODE, PREEMPTION, RANDOM}),
    "ignores max_num_seqs in decode": (
        "while self.running and len(scheduled) < self.max_num_seqs:",
        "while self.running:",
        {DECODE},
    ),
    "budget compared with the total, not what is left": (
        "if new_tokens > budget:",
        "if new_tokens > self.max_num_batched_tokens:",
        {ADMISSION},
    ),
    "a prompt that exactly fills the budget is refused": (
        "if new_tokens > budget:",
        "if new_tokens >= budget:",
        {ADMISSION},
    ),
    "budget counts cached tokens": (
        "new_tokens = len(head) - hits * self.block_size",
        "new_tokens = len(head)",
        {ADMISSION},
    ),
    "scheduled ones to the tail of running": (
        "self.running.extendleft(reversed(scheduled))",
        "self.running.extend(scheduled)",
        {DECODE},
    ),
    "no self-preemption: the sequence is dropped": (
        "victim = self.running.pop() if self.running else seq",
        "victim = self.running.pop() if self.running else None\n"
        "                if victim is None:\n                    break",
        {PREEMPTION},
    ),
    "prefill and decode in the same step": (
        "        if scheduled:\n            return scheduled, True\n",
        "",
        {ADMISSION, DECODE, PREEMPTION, RANDOM},
    ),
    "decode forgets num_scheduled_tokens": (
        "                seq.num_scheduled_tokens = 1\n",
        "",
        {DECODE, PREEMPTION, RANDOM},
    ),
}


class SkipsAheadOfTheHead(SchedulerWithoutSchedule):
    """Admits any waiting sequence that fits, scanning past a head that does not (starves long prompts)."""

    def preempt(self, seq):
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def schedule(self):
        scheduled, budget = [], self.max_num_batched_tokens
        for seq in list(self.waiting):
            if len(scheduled) == self.max_num_seqs:
                break
            hits = self.block_manager.can_allocate(seq)
            if hits == -1 or len(seq) - hits * self.block_size > budget:
                continue
            self.block_manager.allocate(seq, hits)
            seq.num_scheduled_tokens = len(seq) - seq.num_cached_tokens
            budget -= seq.num_scheduled_tokens
            self.waiting.remove(seq)
            self.running.append(seq)
            scheduled.append(seq)
        if scheduled:
            return scheduled, True
        while self.running and len(scheduled) < self.max_num_seqs:
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq):
                victim = self.running.pop() if self.running else seq
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                self.block_manager.may_append(seq)
                seq.num_scheduled_tokens = 1
                scheduled.append(seq)
        self.running.extendleft(reversed(scheduled))
        return scheduled, False


STRUCTURAL_BUGS = {"skips ahead of the head of the queue": (SkipsAheadOfTheHead, {ADMISSION, RANDOM})}


def solution_source() -> str:
    return answer_source(SOURCE_DIR / "07-serve-it" / LABS["07-serve-it"])


def student_class(source: str, name: str = "Scheduler") -> type:
    """Run an answer cell's source the way the notebook does; return its ``Scheduler`` class."""
    return answer_class(source, SchedulerWithoutSchedule, "Scheduler", name, "<serve_it.ipynb>")


def edited_solution(bug: str) -> type:
    old, new, _ = EDITS[bug]
    return student_class(*edited_answer(solution_source(), old, new, bug))


def must_fail(bug: str) -> set:
    return EDITS[bug][2] if bug in EDITS else STRUCTURAL_BUGS[bug][1]


def bug_class(bug: str) -> type:
    return edited_solution(bug) if bug in EDITS else STRUCTURAL_BUGS[bug][0]


ALL_BUGS = sorted(EDITS) + sorted(STRUCTURAL_BUGS)
#: Every catalogued bug as a class (each built from the solution with one edit, or written out).
BUGS = [bug_class(b) for b in ALL_BUGS]


# ---- correct variants, written differently ----------------------------------------------------------
class HelperMethods(SchedulerWithoutSchedule):
    """Split into helpers; the victim is read with ``running[-1]`` then deleted; running rebuilt as a deque."""

    def preempt(self, seq):
        manager = self.block_manager
        manager.deallocate(seq)
        self.waiting.insert(0, seq)

    def _admit(self):
        admitted, left = [], self.max_num_batched_tokens
        while self.waiting and len(admitted) < self.max_num_seqs:
            seq = self.waiting[0]
            cached_blocks = self.block_manager.can_allocate(seq)
            cost = len(seq) - max(cached_blocks, 0) * self.block_size
            if cached_blocks < 0 or cost > left:
                return admitted
            self.block_manager.allocate(seq, cached_blocks)
            seq.num_scheduled_tokens = cost
            left -= cost
            self.running.append(self.waiting.popleft())
            admitted.append(seq)
        return admitted

    def _grow(self, seq):
        """True when seq got room for its token; False when it had to preempt itself."""
        while not self.block_manager.can_append(seq):
            if not self.running:
                self.preempt(seq)
                return False
            victim = self.running[-1]
            del self.running[-1]
            self.preempt(victim)
        self.block_manager.may_append(seq)
        seq.num_scheduled_tokens = 1
        return True

    def schedule(self):
        admitted = self._admit()
        if admitted:
            return admitted, True
        decoded = []
        while self.running and len(decoded) < self.max_num_seqs:
            seq = self.running.popleft()
            if self._grow(seq):
                decoded.append(seq)
        self.running = deque(decoded + list(self.running))
        return decoded, False


class CountsFreeBlocksItself(SchedulerWithoutSchedule):
    """Admission from a list copy with an explicit index; decode with a ``for``/``break`` and a flag."""

    def preempt(self, seq):
        self.block_manager.deallocate(seq)
        self.waiting.extendleft([seq])

    def schedule(self):
        batch = []
        tokens_left = self.max_num_batched_tokens
        while len(batch) < self.max_num_seqs and len(self.waiting) > 0:
            n = self.block_manager.can_allocate(self.waiting[0])
            if n == -1:
                break
            need = len(self.waiting[0]) - self.block_size * n
            if need > tokens_left:
                break
            seq = self.waiting.popleft()
            self.block_manager.allocate(seq, n)
            seq.num_scheduled_tokens = need
            tokens_left -= need
            self.running.append(seq)
            batch.append(seq)
        if len(batch) > 0:
            return batch, True
        while len(self.running) > 0 and len(batch) < self.max_num_seqs:
            seq = self.running.popleft()
            fits = True
            while not self.block_manager.can_append(seq):
                if len(self.running) == 0:
                    self.preempt(seq)
                    fits = False
                    break
                self.preempt(self.running.pop())
            if fits:
                self.block_manager.may_append(seq)
                seq.num_scheduled_tokens = 1
                batch.append(seq)
        for seq in reversed(batch):
            self.running.appendleft(seq)
        return batch, False


VARIANTS = [HelperMethods, CountsFreeBlocksItself]
