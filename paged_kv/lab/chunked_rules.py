"""Lab 09's rules, checked on the snapshots of a replay (``paged_kv.lab.chunked_trace``): the trusted side.

``check_rules`` replays a trace through a ``schedule()`` and checks every step against each rule the lab
states, never a particular order among correct choices: the shape of what ``schedule()`` returns, the token
budget, chunks cut only by the budget left, blocks for the scheduled tokens only, running before waiting,
first come first served, ``max_num_seqs``, admission with every prefix hit the cache holds, no head left
waiting that would fit, newest-first preemption in which the victim leaves running, gives its blocks back and
goes to the head of waiting, no admission in a step that preempted (a victim re-admitted at once included),
``is_prefill`` set whenever a sequence computes more than its one last token, only fully computed blocks in
the prefix cache, and, with a simulated KV cache that remembers which token each slot holds, that every
sequence reads back exactly the keys of its own prefix (a wrong prefix hit reads a slot nobody wrote).

A preemption is seen three ways: the block manager recorded the victim's blocks given back, the victim left
running, or its computed tokens dropped since the last step (each request's count is remembered here).

Each failure is one ``CheckFailed`` block whose hint names the rule that broke (``HINTS``, one per rule).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from paged_kv.lab.chunked_trace import ChunkedTraceRun, ChunkSnapshot, ChunkTraceSpec
from paged_kv.lab.feedback import CheckFailed, materialize
from paged_kv.lab.i18n import N_, _, told
from paged_kv.lab.scheduler_trace import made_up_token

HINTS = {
    "shape": N_(
        "schedule() returns (list of the scheduled sequences, is_prefill), each sequence in running, "
        "scheduled once, with 1 <= num_scheduled_tokens <= len(seq) - num_computed_tokens",
    ),
    "budget": N_(
        "a chunk that overruns the budget: each sequence gets min(its missing tokens, the budget LEFT), never 0 "
        "(stop once the budget is spent), and the budget shrinks by every scheduled token",
    ),
    "chunk": N_(
        "a chunk is cut only by the budget left: n = min(missing tokens, budget left), and the budget shrinks by "
        "exactly the tokens scheduled (a prefix hit costs none: a sequence you admit misses len(seq) - hits * "
        "block_size tokens)",
    ),
    "blocks": N_(
        "blocks for this step's tokens only: allocate_slots(seq, n) for the n tokens you schedule (never the "
        "whole prompt at admission: allocate(seq, ...) gives a sequence all its blocks)",
    ),
    "registered": N_(
        "a block enters the prefix cache only once all its tokens are computed: the engine registers "
        "after the step (hash_blocks); schedule() never registers blocks itself",
    ),
    "running_first": N_(
        "running sequences come first: every one gets its tokens (a decode, or the next chunk) while "
        "budget is left, before any waiting sequence is admitted; otherwise prefill starves the decodes",
    ),
    "retry": N_(
        "after a preemption, try allocate_slots(seq, n) again: preempt the newest running sequence until the "
        "sequence fits or is itself the victim, then go on serving the running ones while budget is left",
    ),
    "fcfs": N_(
        "admit from the HEAD of waiting, in order, each to the tail of running, and stop at the first that does "
        "not get its blocks",
    ),
    "max_num_seqs": N_(
        "admit only while fewer than max_num_seqs sequences run (len(self.running) < self.max_num_seqs)",
    ),
    "admit": N_(
        "the head of waiting fits, so it must be admitted: keep admitting while budget is left (prefix hits cost "
        "none of it), fewer than max_num_seqs run and allocate_slots(head, n, hits) succeeds; a prompt longer than the "
        "budget starts with a chunk",
    ),
    "prefix_hits": N_(
        "admit with the prefix cache: hits = get_computed_blocks(head), then allocate_slots(head, n, "
        "hits) with n = min(len(head) - hits * block_size, budget left)",
    ),
    "preempt_newest": N_(
        "when allocate_slots fails, preempt the NEWEST running sequence (self.running.pop()), one at "
        "a time, and only until the sequence fits",
    ),
    "preempt_queue": N_(
        "a preempted sequence leaves running and gives its blocks back: victim = self.running.pop(), "
        "then self.preempt(victim), which deallocates it and puts it at the HEAD of waiting",
    ),
    "no_admit": N_(
        "admit nobody in a step that preempted: the victims wait at the head of waiting for the next step",
    ),
    "is_prefill": N_(
        "is_prefill must be True when any scheduled sequence computes more than its one last token: a "
        "prompt chunk (even a single token short of its end) or a recomputation after preemption; False only for "
        "a step of decodes",
    ),
    "kv": N_(
        "a sequence read keys its prefix never wrote: a prefix hit on a block whose tokens are not all computed, "
        "or a block written by two sequences",
    ),
}

#: Errors the replay can meet, by a fragment of their message that reads the same in every language (the engine's
#: and the block manager's English, or an identifier), and the rule whose hint explains them.
ERROR_RULES = (
    ("exceed its", "chunk"),
    ("num_new_tokens", "budget"),
    ("prefix hits are taken at admission only", "prefix_hits"),
    ("not in the prefix cache", "prefix_hits"),
    ("already holds blocks", "prefix_hits"),
    ("holds no blocks", "preempt_queue"),
    ("ref_count", "preempt_queue"),
    ("num_scheduled_tokens", "shape"),
)
#: The replay's own errors (``chunked_trace``, ``scheduler_trace``: made in the notebook's language), by their
#: English template, and the rule whose hint explains them.
REPLAY_ERRORS = (
    (
        "{name} is not running but still holds blocks {table}: were its blocks given back (preempt -> deallocate) "
        "when it left running?",
        "preempt_queue",
    ),
    ("the trace is still running after {steps} steps: is a request stuck?", "admit"),
    ("schedule() must return a tuple (scheduled, is_prefill), got {result!r}", "shape"),
    ("schedule() must return (list of sequences, bool), got ({first}, {second})", "shape"),
    ("schedule() returned or queued {seq!r}, which is not one of the trace's sequences", "shape"),
)
_ERROR_HINT = N_(
    "ask allocate_slots before you schedule a sequence and act on its answer (False: preempt or stop); "
    "take a sequence off running only to preempt it, and set num_scheduled_tokens for every one you return"
)


def _fail(where: str, problem: str, rule: str, expected=None, got=None):
    shown = {}
    if expected is not None:
        shown["expected"] = _Shown(expected)
    if got is not None:
        shown["got"] = _Shown(got)
    raise CheckFailed(where, problem, hint=HINTS[rule], **shown)


class _Shown(str):
    def __repr__(self) -> str:
        return str(self)


def _rule_of(problem: str) -> Optional[str]:
    """The rule whose hint explains an error the replay met (its message, as shown), or None."""
    found = next((rule for fragment, rule in ERROR_RULES if fragment in problem), None)
    return found or next((rule for template, rule in REPLAY_ERRORS if told(template, problem)), None)


def _blocks(count: int) -> str:
    return _("1 block") if count == 1 else _(f"{count} blocks")


def _prefill_work(recomputed: bool, short: int) -> str:
    """What a sequence computes that only the prefill path can: a recomputation or a prompt chunk, and how far
    short of its end it stops (when it does)."""
    if recomputed:
        if short > 0:
            return _(f"a recomputation after preemption, {short} short of its end")
        return _("a recomputation after preemption")
    if short > 0:
        return _(f"a prompt chunk, {short} short of its end")
    return _("a prompt chunk")


def _chunk_short(name: str, n: int, short: int, left: int) -> str:
    """The problem of a chunk cut short while budget was left (each count's English plural, one template each)."""
    if n == 1 and left == 1:
        return _(f"{name} got 1 token, {short} short of its end, while 1 token of the budget was left")
    if n == 1:
        return _(f"{name} got 1 token, {short} short of its end, while {left} tokens of the budget were left")
    if left == 1:
        return _(f"{name} got {n} tokens, {short} short of its end, while 1 token of the budget was left")
    return _(f"{name} got {n} tokens, {short} short of its end, while {left} tokens of the budget were left")


class RuleChecker:
    """Checks each snapshot of a run against the rules, with a simulated KV cache (trusted side: plain data)."""

    def __init__(self, spec: ChunkTraceSpec, case: str):
        self.spec, self.case = spec, case
        self.slots: Dict[Tuple[int, int], Tuple[int, ...]] = {}  # (block, offset) -> the prefix it holds the key of
        self.tokens = [list(r.prompt) for r in spec.requests]
        self.generated = [0] * len(spec.requests)
        self.computed: Dict[str, int] = {}  # each request's computed tokens after the last step
        self.tables: Dict[str, Tuple[int, ...]] = {}  # each holder's block table after the last step

    def length(self, name: str) -> int:
        return len(self.tokens[int(name[1:])])

    def step(self, s: ChunkSnapshot) -> None:
        if s.idle:
            return
        case, step = self.case, s.step
        where = _(f"{case}, step {step}")
        holders = {name: (tuple(table), computed) for name, table, computed, _length in s.holders}
        sched = dict(s.scheduled)
        if len(sched) != len(s.scheduled):
            line = " ".join(f"{n}+{t}" for n, t in s.scheduled)
            _fail(where, _("a sequence is scheduled twice"), "shape", got=line)
        victims = self._victims(s, holders)
        self._preemption(where, s, holders, sched, victims)
        self._queues(where, s, holders, sched, victims)
        self._skipped(where, s, sched, victims)
        self._budget_and_blocks(where, s, holders, sched)
        self._admissions(where, s)
        self._unused(where, s, holders, sched, victims)
        self._is_prefill(where, s, holders)
        self._kv(where, s, holders)
        if not s.scheduled:
            _fail(where, _("nothing was scheduled although sequences wait or run"), "shape")

    # -- each rule ------------------------------------------------------------------------------------------
    def _victims(self, s, holders) -> List[str]:
        """The sequences this step preempted: blocks given back, gone from running, or fewer tokens computed."""
        found = set(s.freed)
        for name in s.running_before:
            if name not in s.running or (name in holders and holders[name][1] < self.computed.get(name, 0)):
                found.add(name)
        order = list(s.running_before) + [n for n in s.freed if n not in s.running_before]
        return [n for n in order if n in found]

    def _preemption(self, where, s, holders, sched, victims) -> None:
        if not victims:
            return
        newest = list(s.running_before[len(s.running_before) - len(victims) :])
        if sorted(victims) != sorted(newest):
            running = list(s.running_before)
            _fail(
                where,
                _(f"preempted {victims}, not the newest of running {running}"),
                "preempt_newest",
                expected=str(newest),
                got=str(victims),
            )
        for name in victims:
            if name in s.running and name in s.waiting:
                problem = _(f"{name} was preempted but never taken off running: it is in both queues")
                _fail(where, problem, "preempt_queue")
            if name in sched and name in s.running:
                _fail(where, _(f"{name} was preempted, then admitted again in the same step"), "no_admit")
            if name in s.running:
                _fail(where, _(f"{name} gave its blocks back (preempted) but is still in running"), "preempt_queue")
            if name in holders:
                table = list(holders[name][0])
                _fail(where, _(f"{name} left running but still holds blocks {table}"), "preempt_queue")
            if name not in s.waiting:
                problem = _(f"{name} left running but is not in waiting: a preempted sequence is lost")
                _fail(where, problem, "preempt_queue")
        if list(s.waiting[: len(victims)]) != victims:
            _fail(
                where,
                _("the preempted sequences are not at the head of waiting, oldest first"),
                "preempt_queue",
                expected=str(victims),
                got=str(list(s.waiting[: len(victims)])),
            )
        self._needed(where, s, sched, victims)

    def _needed(self, where, s, sched, victims) -> None:
        """The last victim (the oldest) was needed: either the blocks it gave back went to the sequences served
        after it (fewer are free now than it gave back), or it was the one that could not get its own."""
        oldest, size = victims[0], self.spec.block_size
        kept = {b for n in s.running_before if n not in victims for b in self.tables.get(n, ())}
        table = self.tables.get(oldest, ())
        given_back = len(set(table) - kept)
        room = s.free_blocks - given_back  # free blocks had it kept its own
        if room < 0:
            return
        left = self.spec.max_num_batched_tokens - sum(sched.values())
        computed = self.computed.get(oldest, 0)
        n = min(self.length(oldest) - computed, left)
        if n > 0 and -(-(computed + n) // size) - len(table) > room:
            return  # it could not get its own blocks: it had to preempt itself
        if not n:
            _fail(
                where,
                _(f"preempted {oldest} although every sequence served got its blocks without it"),
                "preempt_newest",
            )
        need = max(-(-(computed + n) // size) - len(table), 0)
        _fail(
            where,
            _(
                f"preempted {oldest} although every sequence served got its blocks without it, and {oldest} itself "
                f"would have fit ({need} of {room} free blocks)"
            ),
            "preempt_newest",
        )

    def _queues(self, where, s, holders, sched, victims) -> None:
        for name, n in s.scheduled:
            if name not in s.running:
                _fail(where, _(f"{name} is scheduled but not in running"), "shape")
            computed, length = holders.get(name, ((), 0))[1], self.length(name)
            if type(n) is not int or n < 1 or computed + n > length:
                _fail(where, _(f"{name}: {n} tokens scheduled after {computed} computed, of {length}"), "shape")
        if len(s.running) > self.spec.max_num_seqs:
            count, most = len(s.running), self.spec.max_num_seqs
            _fail(
                where,
                _(f"{count} sequences run, more than max_num_seqs={most}"),
                "max_num_seqs",
                got=str(list(s.running)),
            )
        admitted = [n for n in s.running if n not in s.running_before]
        if admitted and victims:
            _fail(where, _(f"admitted {admitted} in a step that preempted {victims}"), "no_admit")
        skipped = [n for n in s.running_before if n not in sched and n not in victims]
        if admitted and skipped:
            _fail(where, _(f"admitted {admitted} while running {skipped} got no token"), "running_first")
        if admitted != list(s.waiting_before[: len(admitted)]):
            waiting = list(s.waiting_before)
            _fail(
                where,
                _(f"admitted {admitted}, not the head of waiting {waiting}"),
                "fcfs",
                expected=str(list(s.waiting_before[: len(admitted)])),
                got=str(admitted),
            )
        kept = [n for n in s.running_before if n not in victims]
        if list(s.running) != kept + admitted:
            _fail(
                where,
                _("running is out of order: the running ones keep theirs, admitted ones join its tail"),
                "fcfs",
                expected=str(kept + admitted),
                got=str(list(s.running)),
            )
        left = victims + [n for n in s.waiting_before if n not in admitted]
        if list(s.waiting) != left:
            _fail(
                where,
                _("waiting is out of order: victims at its head, the others in their order"),
                "fcfs",
                expected=str(left),
                got=str(list(s.waiting)),
            )

    def _skipped(self, where, s, sched, victims) -> None:
        left = self.spec.max_num_batched_tokens - sum(sched.values())
        for name in s.running_before:
            if left > 0 and name not in sched and name not in victims:
                if left == 1:
                    problem = _(f"running {name} got no token although 1 token of the budget was left")
                else:
                    problem = _(f"running {name} got no token although {left} tokens of the budget were left")
                _fail(where, problem, "retry" if victims else "running_first")

    def _budget_and_blocks(self, where, s, holders, sched) -> None:
        budget, size = self.spec.max_num_batched_tokens, self.spec.block_size
        total = sum(sched.values())
        if total > budget:
            line = " ".join(f"{n}+{t}" for n, t in s.scheduled)
            _fail(
                where,
                _(f"{total} tokens scheduled, more than the budget of {budget}"),
                "budget",
                expected=_(f"at most {budget}"),
                got=line,
            )
        for name, (table, computed) in holders.items():
            if name not in s.running:
                blocks = list(table)
                _fail(where, _(f"{name} holds blocks {blocks} but is not running"), "preempt_queue")
            scheduled, held = sched.get(name, 0), len(table)
            need = -(-(computed + scheduled) // size)
            if held != need:
                _fail(
                    where,
                    _(
                        f"{name} holds {held} blocks for {computed} computed + {scheduled} scheduled tokens "
                        f"(blocks of {size})"
                    ),
                    "blocks",
                    expected=_blocks(need),
                    got=_blocks(held),
                )
        for name in s.running:
            if name not in holders:
                _fail(where, _(f"{name} is running but holds no blocks"), "blocks")
        registered = set(s.registered)
        for name, (table, computed) in holders.items():
            for j, block in enumerate(table):
                if block in registered and (j + 1) * size > computed:
                    done = max(computed - j * size, 0)
                    _fail(
                        where,
                        _(
                            f"block {block} ({name}'s block {j}) is in the prefix cache but only {done} of its "
                            f"{size} tokens are computed"
                        ),
                        "registered",
                    )

    def _admissions(self, where, s) -> None:
        for name, taken, held in s.admissions:
            if taken < held:
                _fail(
                    where,
                    _(
                        f"{name} was admitted with {taken} prefix hit(s) while the prefix cache held {held} of its blocks"
                    ),
                    "prefix_hits",
                    expected=f"allocate_slots({name}, n, {held})",
                    got=f"allocate_slots({name}, n, {taken})",
                )

    def _unused(self, where, s, holders, sched, victims) -> None:
        budget, size = self.spec.max_num_batched_tokens, self.spec.block_size
        left = budget - sum(sched.values())
        if left <= 0:
            return
        for name, n in s.scheduled:
            short = self.length(name) - holders[name][1] - n
            if short > 0:
                _fail(where, _chunk_short(name, n, short, left), "chunk")
        if victims or not s.head or len(s.running) >= self.spec.max_num_seqs or s.head[0] != s.waiting[0]:
            return
        name, hits, revived = s.head
        n = min(self.length(name) - hits * size, left)
        need = -(-(hits * size + n) // size) - hits + revived
        if need <= s.free_blocks:
            free = s.free_blocks
            if left == 1:
                problem = _(
                    f"{name} waits at the head of waiting although 1 token of the budget and {free} free blocks "
                    f"were left (it needs {need} for a chunk of {n})"
                )
            else:
                problem = _(
                    f"{name} waits at the head of waiting although {left} tokens of the budget and {free} free "
                    f"blocks were left (it needs {need} for a chunk of {n})"
                )
            _fail(where, problem, "admit")

    def _is_prefill(self, where, s, holders) -> None:
        if s.is_prefill is True:
            return
        for name, n in s.scheduled:
            computed, length = holders[name][1], self.length(name)
            if n != 1 or computed + n != length:
                what = _prefill_work(length > len(self.spec.requests[int(name[1:])].prompt), length - computed - n)
                flag = s.is_prefill
                if n == 1:
                    problem = _(
                        f"is_prefill is {flag!r} but {name} computes 1 token after {computed} of its {length} ({what})"
                    )
                else:
                    problem = _(
                        f"is_prefill is {flag!r} but {name} computes {n} tokens after {computed} of its {length} ({what})"
                    )
                _fail(where, problem, "is_prefill")

    def _kv(self, where, s, holders) -> None:
        """This step writes every scheduled token's key, then every query reads its prefix."""
        size = self.spec.block_size
        for name, n in s.scheduled:
            table, computed = holders[name]
            for p in range(computed, computed + n):
                self.slots[(table[p // size], p % size)] = tuple(self.tokens[int(name[1:])][: p + 1])
        for name, n in s.scheduled:
            table, computed = holders[name]
            tokens = self.tokens[int(name[1:])]
            for p in range(computed + n):
                if self.slots.get((table[p // size], p % size)) != tuple(tokens[: p + 1]):
                    block = table[p // size]
                    _fail(
                        where,
                        _(
                            f"{name} reads the key of its position {p} from block {block}, which holds another token's (or none)"
                        ),
                        "kv",
                    )

    def complete(self, s: ChunkSnapshot) -> None:
        """Advance the trusted copy of each request's tokens and computed count as the engine does after a step."""
        if s.idle:
            return
        sched = dict(s.scheduled)
        self.computed = {name: computed + sched.get(name, 0) for name, _table, computed, _length in s.holders}
        self.tables = {name: tuple(table) for name, table, _computed, _length in s.holders}
        for name, n in s.scheduled:
            i = int(name[1:])
            if self.computed[name] == len(self.tokens[i]):
                self.tokens[i].append(made_up_token(i, len(self.tokens[i])))
                self.generated[i] += 1


def check_rules(scheduler_cls, spec: ChunkTraceSpec, case: str, run_cls=None, max_steps: int = 3000) -> int:
    """Replay ``spec`` with ``scheduler_cls``; raise ``CheckFailed`` at the first step that breaks a rule, or when
    the run does not finish. Returns the number of steps. ``run_cls`` makes the student's side of the replay."""
    case = _(case)
    run = (run_cls or ChunkedTraceRun)(scheduler_cls, spec, max_steps)
    checker = RuleChecker(spec, case)
    while not materialize(run.done):
        got = materialize(_guarded(case, run.decide, run.readable, lambda: materialize(run.step_index)))
        if type(got) is not ChunkSnapshot:
            raise CheckFailed(case, _("schedule()'s step could not be read back"), got=got)
        checker.step(got)
        step = got.step
        _guarded(_(f"{case}, step {step}"), run.audit, run.readable)
        _guarded(_(f"{case}, step {step}"), run.complete, run.readable)
        checker.complete(got)
    wanted = [r.max_tokens for r in spec.requests]
    if checker.generated != wanted:
        raise CheckFailed(case, _("the run ended with requests unserved"), expected=wanted, got=checker.generated)
    return materialize(run.step_index)


def _guarded(where: str, action, readable=str, step=None):
    """``action()``; an error it raises (the student's ``schedule()``, or the replay finding a broken state)
    becomes one block naming the step (``step()`` when ``where`` does not), with the hint of the rule its message
    points at."""
    try:
        return action()
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:  # noqa: BLE001 - the student's code may raise anything
        name = type(error).__name__
        said = str(error) if isinstance(error, AssertionError) else f"raised {name}: {error}"
        problem = str(readable(said))
        rule = _rule_of(problem)  # read on the English of a mechanism's message (its fragments), then translated
        problem = _(problem)
        if step is not None:
            case, step = where, step()
            where = _(f"{case}, step {step}")
        raise CheckFailed(where, problem, hint=HINTS[rule] if rule else _ERROR_HINT) from None


def first_failure(scheduler_cls, spec: ChunkTraceSpec, case: str) -> Optional[str]:
    """The message of the first broken rule, or None (for tests and the instructor's tools)."""
    try:
        check_rules(scheduler_cls, spec, case)
    except CheckFailed as failed:
        return str(failed)
    return None
