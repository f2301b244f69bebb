"""Lab 09 (chunked prefill): realistic scheduler bugs and correct variants written differently, all starting from
the lab's starter like a student's notebook. Most bugs are one-line edits of the notebook's own solution:
``EDITS`` maps a name to (text in the solution, replacement, checks that must fail); ``RULES`` names the rule
each bug breaks, whose hint a failing check must give. The bugs were written from the lab's text as a student
reads it: the budget and its off-by-ones, chunk sizes, blocks, registration, preemption (victim, freeing,
queues, admission in the same step), the prefix cache, ``max_num_seqs``, first come first served and
``is_prefill``."""

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
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "an admitted chunk overruns the budget": (
        "            n = min(len(seq) - hits * self.block_size, budget)\n",
        "            n = len(seq) - hits * self.block_size\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "the budget never shrinks for admissions": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            self.running.append(self.waiting.popleft())",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "blocks for the whole prompt at admission": (
        "if not manager.allocate_slots(seq, n, hits):",
        "if not manager.allocate_slots(seq, len(seq) - hits * self.block_size, hits):",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "counting the cached prefix as budget": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            budget -= n + hits * self.block_size\n            self.running.append(self.waiting.popleft())",
        {BLOCKS, CACHE, RANDOM},
    ),
    "registering the chunk's blocks at allocation": (
        "            budget -= n\n            self.running.append(self.waiting.popleft())",
        "            budget -= n\n            manager.hash_blocks(seq)\n"
        "            self.running.append(self.waiting.popleft())",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "preempts the oldest": ("victim = self.running.pop()", "victim = self.running.popleft()", {BUDGET, BLOCKS, RANDOM}),
    "ignores max_num_seqs": (" and len(self.running) < self.max_num_seqs:", ":", {BUDGET, BLOCKS, RANDOM}),
    "a chunk that cannot get its blocks is skipped, nobody preempted": (
        "            while not manager.allocate_slots(seq, n):\n",
        "            while not manager.allocate_slots(seq, n) and False:\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "a decode is charged a whole chunk": (
        "            budget -= n\n            scheduled.append(seq)\n            i += 1",
        "            budget -= max(n, self.block_size)\n            scheduled.append(seq)\n            i += 1",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    # is_prefill: each of these crashes the engine's runner (a step of "decodes" that computes a chunk)
    "is_prefill always False": (
        "        return scheduled, is_prefill\n",
        "        return scheduled, False\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "is_prefill only for chunks of more than one token": (
        "        return scheduled, is_prefill\n",
        "        return scheduled, any(s.num_scheduled_tokens > 1 for s in scheduled)\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "is_prefill from the prompt length alone": (
        "        return scheduled, is_prefill\n",
        "        return scheduled, any(len(s) == s.num_prompt_tokens for s in scheduled)\n",
        {BLOCKS, RANDOM},
    ),
    "is_prefill only when a sequence is admitted": (
        "        return scheduled, is_prefill\n",
        "        return scheduled, len(scheduled) > i\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    # preemption
    "admits in a step that preempted": (
        "        while not preempted and self.waiting and budget > 0",
        "        while self.waiting and budget > 0",
        {BLOCKS, RANDOM},
    ),
    "preempts the sequence that cannot grow": (
        "                victim = self.running.pop()\n",
        "                victim = seq\n                self.running.remove(seq)\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "preempts every newer sequence at once": (
        "                victim = self.running.pop()\n                self.preempt(victim)\n",
        "                victim = self.running.pop()\n                self.preempt(victim)\n"
        "                while victim is not seq and self.running[-1] is not seq:\n"
        "                    victim = self.running.pop()\n                    self.preempt(victim)\n",
        {BLOCKS, RANDOM},
    ),
    "a victim keeps its blocks": (
        "                self.preempt(victim)\n",
        "                self.waiting.appendleft(victim)\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "a victim stays in running": (
        "                victim = self.running.pop()\n",
        "                victim = self.running[-1]\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "a victim goes to the tail of waiting": (
        "                self.preempt(victim)\n",
        "                manager.deallocate(victim)\n                self.waiting.append(victim)\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "the running pass stops after any preemption": (
        "            if not fits:\n                break\n",
        "            if not fits or preempted:\n                break\n",
        {BUDGET, BLOCKS, RANDOM},
    ),
    # the prefix cache, the budget, the queues
    "never uses the prefix cache": (
        "            hits = manager.get_computed_blocks(seq)\n",
        "            hits = 0\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "the hits are not taken off the chunk": (
        "            n = min(len(seq) - hits * self.block_size, budget)\n",
        "            n = min(len(seq), budget)\n",
        {BLOCKS, CACHE, RANDOM},
    ),
    "one sequence more than max_num_seqs": (
        " and len(self.running) < self.max_num_seqs:",
        " and len(self.running) <= self.max_num_seqs:",
        {BUDGET, BLOCKS, RANDOM},
    ),
    "admissions past the budget": (
        "        while not preempted and self.waiting and budget > 0 and",
        "        while not preempted and self.waiting and",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "chunks of whole blocks": (
        "            n = min(len(seq) - seq.num_computed_tokens, budget)\n",
        "            n = min(len(seq) - seq.num_computed_tokens, max(budget // self.block_size, 1) * self.block_size)\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "blocks for the token the step will sample": (
        "            while not manager.allocate_slots(seq, n):\n",
        "            while not manager.allocate_slots(seq, n + 1):\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "registering a running chunk's blocks in schedule": (
        "            seq.num_scheduled_tokens = n\n            budget -= n\n            scheduled.append(seq)\n",
        "            seq.num_scheduled_tokens = n\n            manager.hash_blocks(seq)\n            budget -= n\n"
        "            scheduled.append(seq)\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "a prompt waits until the budget holds it whole": (
        "            n = min(len(seq) - hits * self.block_size, budget)\n",
        "            n = len(seq) - hits * self.block_size\n            if n > budget:\n                break\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "admitted to the head of running": (
        "            self.running.append(self.waiting.popleft())\n",
        "            self.running.appendleft(self.waiting.popleft())\n",
        {BUDGET, BLOCKS, CACHE, RANDOM},
    ),
    "an admission's tokens not set": (
        "            seq.num_scheduled_tokens = n\n            budget -= n\n            self.running.append",
        "            budget -= n\n            self.running.append",
        {BUDGET, BLOCKS, CACHE, RANDOM},
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


class SkipsAHeadThatDoesNotFit(ChunkedSchedulerWithoutSchedule):
    """The reference's running pass, then admissions that pass over a waiting sequence whose blocks do not fit and
    admit one behind it (not first come, first served: a long prompt can wait forever)."""

    def schedule(self):
        manager, budget, scheduled, preempted = self.block_manager, self.max_num_batched_tokens, [], False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq) - seq.num_computed_tokens, budget)
            while not manager.allocate_slots(seq, n):
                victim = self.running.pop()
                self.preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                seq.num_scheduled_tokens = n
                budget -= n
                scheduled.append(seq)
                i += 1
                continue
            break
        for seq in list(self.waiting):
            if preempted or budget == 0 or len(self.running) >= self.max_num_seqs:
                break
            hits = manager.get_computed_blocks(seq)
            n = min(len(seq) - hits * self.block_size, budget)
            if not manager.allocate_slots(seq, n, hits):
                continue
            seq.num_scheduled_tokens = n
            budget -= n
            self.waiting.remove(seq)
            self.running.append(seq)
            scheduled.append(seq)
        return scheduled, True


STRUCTURAL_BUGS = {
    "skips a waiting head that does not fit": (SkipsAHeadThatDoesNotFit, {BUDGET, BLOCKS, RANDOM}),
    "waiting admitted before running (starves decodes)": (WaitingFirst, {BUDGET, BLOCKS, CACHE, RANDOM}),
    "nano-vllm's phases: prefill steps stall the decodes": (KeepsChunkingInWaiting, {BUDGET, BLOCKS, CACHE, RANDOM}),
}


#: The rule each bug breaks: at least one check it fails names it in its hint (``paged_kv.lab.chunked_rules.HINTS``).
RULES = {
    "a running chunk overruns the budget": "budget",
    "an admitted chunk overruns the budget": "budget",
    "the budget never shrinks for admissions": "budget",
    "admissions past the budget": "budget",
    "blocks for the whole prompt at admission": "blocks",
    "blocks for the token the step will sample": "blocks",
    "a chunk that cannot get its blocks is skipped, nobody preempted": "blocks",
    "counting the cached prefix as budget": "admit",
    "a prompt waits until the budget holds it whole": "admit",
    "a decode is charged a whole chunk": "chunk",
    "chunks of whole blocks": "chunk",
    "the hits are not taken off the chunk": "chunk",
    "registering the chunk's blocks at allocation": "registered",
    "registering a running chunk's blocks in schedule": "registered",
    "never uses the prefix cache": "prefix_hits",
    "preempts the oldest": "preempt_newest",
    "preempts the sequence that cannot grow": "preempt_newest",
    "preempts every newer sequence at once": "preempt_newest",
    "a victim keeps its blocks": "preempt_queue",
    "a victim stays in running": "preempt_queue",
    "a victim goes to the tail of waiting": "preempt_queue",
    "the running pass stops after any preemption": "retry",
    "admits in a step that preempted": "no_admit",
    "ignores max_num_seqs": "max_num_seqs",
    "one sequence more than max_num_seqs": "max_num_seqs",
    "admitted to the head of running": "fcfs",
    "skips a waiting head that does not fit": "fcfs",
    "waiting admitted before running (starves decodes)": "running_first",
    "nano-vllm's phases: prefill steps stall the decodes": "shape",
    "an admission's tokens not set": "shape",
    "is_prefill always False": "is_prefill",
    "is_prefill only for chunks of more than one token": "is_prefill",
    "is_prefill from the prompt length alone": "is_prefill",
    "is_prefill only when a sequence is admitted": "is_prefill",
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


class AsksBeforeItTakes(ChunkedSchedulerWithoutSchedule):
    """Asks the manager what an allocation would cost (num_blocks_to_allocate) before taking it, preempts while the
    free pool is short, and sets is_prefill exactly as the runner needs it: False only for a step of decodes."""

    def _fits(self, seq, n, hits=0):
        return self.block_manager.num_blocks_to_allocate(seq, n, hits) <= self.block_manager.num_free_blocks

    def schedule(self):
        left, out, preempted = self.max_num_batched_tokens, [], False
        for index in range(len(self.running)):
            if left == 0 or index >= len(self.running):
                break
            seq = self.running[index]
            n = min(seq.num_tokens - seq.num_computed_tokens, left)
            while not self._fits(seq, n) and self.running[-1] is not seq:
                self.preempt(self.running.pop())
                preempted = True
            if not self._fits(seq, n):  # only seq itself is left to give back
                self.preempt(self.running.pop())
                preempted = True
                break
            assert self.block_manager.allocate_slots(seq, n)
            seq.num_scheduled_tokens = n
            left -= n
            out.append(seq)
        while not preempted and left and self.waiting and len(self.running) < self.max_num_seqs:
            head = self.waiting[0]
            hits = self.block_manager.get_computed_blocks(head)
            n = min(head.num_tokens - hits * self.block_size, left)
            if not self._fits(head, n, hits):
                break
            assert self.block_manager.allocate_slots(head, n, hits)
            head.num_scheduled_tokens = n
            left -= n
            self.running.append(self.waiting.popleft())
            out.append(head)
        decodes_only = all(s.num_scheduled_tokens == 1 and s.num_computed_tokens + 1 == s.num_tokens for s in out)
        return out, not decodes_only


class OneLoopWithAFlag(ChunkedSchedulerWithoutSchedule):
    """One loop over a work list: the running sequences, then the head of waiting while admission is allowed;
    a flag per sequence says whether it computes a prompt token, a helper preempts, the budget is a list."""

    def _make_room(self, seq, n):
        """Preempt the newest until seq's n tokens fit; False when seq itself had to go."""
        while not self.block_manager.allocate_slots(seq, n):
            newest = self.running[-1]
            self.running.remove(newest)
            self.preempt(newest)
            self.preempted_now = True
            if newest is seq:
                return False
        return True

    def schedule(self):
        self.preempted_now = False
        budget = [self.max_num_batched_tokens]
        batch, prompt_work = [], False
        pos = 0
        while budget[0] > 0 and pos < len(self.running):
            seq = self.running[pos]
            n = min(len(seq) - seq.num_computed_tokens, budget[0])
            if not self._make_room(seq, n):
                break
            seq.num_scheduled_tokens = n
            budget[0] -= n
            batch.append(seq)
            prompt_work |= n > 1 or seq.num_computed_tokens + n < len(seq) or len(seq) == seq.num_prompt_tokens
            pos += 1
        while budget[0] > 0 and not self.preempted_now and self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.block_manager.get_computed_blocks(seq)
            n = min(len(seq) - cached * self.block_size, budget[0])
            if not self.block_manager.allocate_slots(seq, n, cached):
                break
            self.waiting.popleft()
            self.running.append(seq)
            seq.num_scheduled_tokens = n
            budget[0] -= n
            batch.append(seq)
            prompt_work = True
        return batch, prompt_work


class RecursiveAdmission(ChunkedSchedulerWithoutSchedule):
    """The running pass as a generator of (sequence, tokens) with preemption inside it, admissions written
    recursively, and is_prefill exactly what the runner's decode path cannot take: a sequence that computes more
    than one token, or stops short of its end (a prompt's last token alone goes the decode path)."""

    def _running_pass(self, budget):
        for seq in list(self.running):
            if budget == 0 or all(s is not seq for s in self.running):
                return
            n = min(len(seq) - seq.num_computed_tokens, budget)
            while not self.block_manager.allocate_slots(seq, n):
                victim = self.running.pop()
                self.preempt(victim)
                self.preempted_here = True
                if victim is seq:
                    return
            budget -= n
            yield seq, n

    def _admit(self, budget, batch):
        if budget == 0 or not self.waiting or len(self.running) >= self.max_num_seqs:
            return
        head = self.waiting[0]
        hits = self.block_manager.get_computed_blocks(head)
        n = min(len(head) - hits * self.block_size, budget)
        if self.block_manager.allocate_slots(head, n, hits):
            head.num_scheduled_tokens = n
            self.running.append(self.waiting.popleft())
            batch.append(head)
            self._admit(budget - n, batch)

    def schedule(self):
        self.preempted_here = False
        batch = []
        for seq, n in self._running_pass(self.max_num_batched_tokens):
            seq.num_scheduled_tokens = n
            batch.append(seq)
        if not self.preempted_here:
            self._admit(self.max_num_batched_tokens - sum(s.num_scheduled_tokens for s in batch), batch)
        is_prefill = any(
            s.num_scheduled_tokens > 1 or s.num_computed_tokens + s.num_scheduled_tokens < len(s) for s in batch
        )
        return batch, is_prefill


VARIANTS = [DecodesBeforeChunks, IndexAndFlags, AsksBeforeItTakes, OneLoopWithAFlag, RecursiveAdmission]
