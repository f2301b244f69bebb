"""Lab 09 (chunked prefill): realistic scheduler bugs and correct variants written differently, all starting from
the lab's starter like a student's notebook. Most bugs are one-line edits of the notebook's own solution:
``EDITS`` maps a name to (text in the solution, replacement, checks that must fail)."""

from __future__ import annotations

from autograder.course.layout import LABS, SOURCE_DIR
from notebook_code import answer_class, answer_source, edited_answer
from paged_kv.lab.starters import ChunkedSchedulerWithoutSchedule

BUDGET, BLOCKS, CACHE, RANDOM = (
    "check_token_budget",
    "check_blocks_and_preemption",
    "check_prefix_cache",
    "check_random_traces",
)
LAB = "09-chunked-prefill"

EDITS = {
    "a running chunk overruns the budget": (
        "            n = min(len(seq) - seq.num_computed_tokens, budget)\n",
        "            n = len(seq) - seq.num_computed_tokens\n",
        {BUDGET, RANDOM},
    ),
    "an admitted chunk overruns the budget": (
        "            n = min(len(seq) - hits * self.block_size, budget)\n",
        "            n = len(seq) - hits * self.block_size\n",
        {BUDGET, CACHE, RANDOM},
    ),
    "the budget never shrinks for admissions": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            self.running.append(self.waiting.popleft())",
        {BUDGET, RANDOM},
    ),
    "blocks for the whole prompt at admission": (
        "if not manager.allocate_slots(seq, n, hits):",
        "if not manager.allocate_slots(seq, len(seq) - hits * self.block_size, hits):",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "counting the cached prefix as budget": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            budget -= n + hits * self.block_size\n            self.running.append(self.waiting.popleft())",
        {CACHE, RANDOM},
    ),
    "registering the chunk's blocks at allocation": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            budget -= n\n            manager.hash_blocks(seq)\n"
        "            self.running.append(self.waiting.popleft())",
        {BUDGET, CACHE, RANDOM},
    ),
    "preempts the oldest": ("victim = self.running.pop()", "victim = self.running.popleft()", {BLOCKS}),
    "ignores max_num_seqs": (" and len(self.running) < self.max_num_seqs:", ":", {BUDGET}),
    "a chunk that cannot get its blocks is skipped, nobody preempted": (
        "            while not manager.allocate_slots(seq, n):\n",
        "            while not manager.allocate_slots(seq, n) and False:\n",
        {BLOCKS},
    ),
    "a decode is charged a whole chunk": (
        "            budget -= n\n            scheduled.append(seq)\n            i += 1",
        "            budget -= max(n, self.block_size)\n            scheduled.append(seq)\n            i += 1",
        {BUDGET, RANDOM},
    ),
}


class WaitingFirst(ChunkedSchedulerWithoutSchedule):
    """Admits waiting prompts before serving the running ones: a long prompt starves the decodes."""

    def schedule(self):
        manager, budget, scheduled = self.block_manager, self.max_num_batched_tokens, []
        running_before = list(self.running)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hits = manager.get_computed_blocks(seq)
            n = min(len(seq) - hits * self.block_size, budget)
            if not manager.allocate_slots(seq, n, hits):
                break
            seq.num_scheduled_tokens = n
            budget -= n
            self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        for seq in running_before:
            if budget == 0:
                break
            n = min(len(seq) - seq.num_computed_tokens, budget)
            if not manager.allocate_slots(seq, n):
                break
            seq.num_scheduled_tokens = n
            budget -= n
            scheduled.append(seq)
        return scheduled, True


class KeepsChunkingInWaiting(ChunkedSchedulerWithoutSchedule):
    """nano-vllm's shape: only the head of waiting chunks, it stays in waiting until its last chunk, and prefill
    and decode never share a step (here on per-chunk blocks): running requests stall behind a long prompt."""

    def schedule(self):
        manager, budget, scheduled = self.block_manager, self.max_num_batched_tokens, []
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hits = manager.get_computed_blocks(seq) if not seq.block_table else 0
            missing = len(seq) - (hits * self.block_size if not seq.block_table else seq.num_computed_tokens)
            if missing > budget and scheduled:
                break
            n = min(missing, budget)
            if not manager.allocate_slots(seq, n, hits):
                break
            seq.num_scheduled_tokens = n
            budget -= n
            scheduled.append(seq)
            if n == missing:
                self.running.append(self.waiting.popleft())
            else:
                break
        if scheduled:
            return scheduled, True
        for seq in list(self.running):
            if not manager.allocate_slots(seq, 1):
                self.running.remove(seq)
                self.preempt(seq)
                continue
            seq.num_scheduled_tokens = 1
            scheduled.append(seq)
        return scheduled, False


STRUCTURAL_BUGS = {
    "waiting admitted before running (starves decodes)": (WaitingFirst, {BUDGET, RANDOM}),
    "nano-vllm's phases: prefill steps stall the decodes": (KeepsChunkingInWaiting, {BUDGET, RANDOM}),
}


def solution_source() -> str:
    return answer_source(SOURCE_DIR / LAB / LABS[LAB])


def student_class(source: str, name: str = "ChunkedScheduler") -> type:
    """Run an answer cell's source the way the notebook does; return its ``ChunkedScheduler`` class."""
    return answer_class(source, ChunkedSchedulerWithoutSchedule, "ChunkedScheduler", name, "<chunked_prefill.ipynb>")


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


# ---- correct variants, written differently ----------------------------------------------------------------
class DecodesBeforeChunks(ChunkedSchedulerWithoutSchedule):
    """Another order that keeps the rules: among running sequences, decodes first (oldest first), then the running
    prompts' chunks, then admissions (vLLM V0's chunked-prefill order); preemption takes the newest."""

    def _serve(self, seq, budget):
        """Tokens scheduled for seq (0 when it had to preempt itself); None once preemption happened."""
        n = min(len(seq) - seq.num_computed_tokens, budget)
        while not self.block_manager.allocate_slots(seq, n):
            victim = self.running.pop()
            self.preempt(victim)
            self.preempted = True
            if victim is seq:
                return 0
        seq.num_scheduled_tokens = n
        return n

    def schedule(self):
        self.preempted = False
        budget, scheduled = self.max_num_batched_tokens, []
        decodes = [s for s in self.running if s.num_computed_tokens + 1 == len(s) and len(s) > s.num_prompt_tokens]
        chunks = [s for s in self.running if s not in decodes]
        for group in (decodes, chunks):
            for seq in group:
                if budget == 0 or not any(s is seq for s in self.running):
                    continue
                n = self._serve(seq, budget)
                if n:
                    budget -= n
                    scheduled.append(seq)
        while not self.preempted and self.waiting and budget and len(self.running) < self.max_num_seqs:
            head = self.waiting[0]
            hits = self.block_manager.get_computed_blocks(head)
            n = min(len(head) - hits * self.block_size, budget)
            if not self.block_manager.allocate_slots(head, n, hits):
                break
            head.num_scheduled_tokens = n
            budget -= n
            self.running.append(self.waiting.popleft())
            scheduled.append(head)
        return scheduled, True


class IndexAndFlags(ChunkedSchedulerWithoutSchedule):
    """The reference's two passes written with a for loop over a snapshot of running, a for/else, and a budget
    counted upwards; is_prefill always True (the runner's prefill path serves decodes too)."""

    def schedule(self):
        used, batch, stopped = 0, [], False
        for seq in list(self.running):
            if used == self.max_num_batched_tokens:
                break
            if all(s is not seq for s in self.running):
                break  # preempted by an earlier sequence of this pass
            want = min(seq.num_tokens - seq.num_computed_tokens, self.max_num_batched_tokens - used)
            while not self.block_manager.allocate_slots(seq, want):
                newest = self.running.pop()
                self.preempt(newest)
                stopped = True
                if newest is seq:
                    break
            else:
                seq.num_scheduled_tokens = want
                used += want
                batch.append(seq)
                continue
            break
        if not stopped:
            for _ in range(len(self.waiting)):
                if used == self.max_num_batched_tokens or len(self.running) >= self.max_num_seqs:
                    break
                head = self.waiting[0]
                cached = self.block_manager.get_computed_blocks(head)
                want = min(head.num_tokens - cached * self.block_size, self.max_num_batched_tokens - used)
                if not self.block_manager.allocate_slots(head, want, cached):
                    break
                head.num_scheduled_tokens = want
                used += want
                self.running.append(self.waiting.popleft())
                batch.append(head)
        return batch, True


VARIANTS = [DecodesBeforeChunks, IndexAndFlags]
