"""Lab 09's grader, beyond what test_graders.py checks for every lab: each catalogued bug loses the points of the
checks it breaks and one of them names the rule it broke, feedback names the step and gives a hint, the visible
cell catches each pitfall the notebook lists with the hint of its rule, the hidden checks' traces exercise every
rule (several traces each), and super() reaches a stub."""

from __future__ import annotations

import inspect
from collections import defaultdict

import pytest

from autograder.labs.lab09_chunked_prefill import checks as grader
from autograder.labs.lab09_chunked_prefill.tests import bugs as bugs
from paged_kv.engine.chunked import ChunkedScheduler
from paged_kv.lab import chunked_rules
from paged_kv.lab.chunked_rules import HINTS, check_rules
from paged_kv.lab.chunked_trace import make_chunk_trace

CHECKS = {
    name: f
    for name, f in inspect.getmembers(grader, inspect.isfunction)
    if name.startswith("check_") and f.__module__ == grader.__name__
}
Starter = bugs.ChunkedSchedulerWithoutSchedule


def failures(cls):
    failed = {}
    for name, check in CHECKS.items():
        try:
            check(cls)
        except (AssertionError, NotImplementedError) as error:
            failed[name] = f"{type(error).__name__}: {error}" if isinstance(error, NotImplementedError) else str(error)
    return failed


def test_the_grader_has_the_four_checks_the_notebook_calls():
    assert set(CHECKS) == {bugs.BUDGET, bugs.BLOCKS, bugs.CACHE, bugs.RANDOM}


def test_the_catalogue_holds_thirty_bugs_and_five_variants_and_names_each_bugs_rule():
    assert len(bugs.BUGS) >= 30 and len(bugs.VARIANTS) >= 5
    assert set(bugs.RULES) == set(bugs.ALL_BUGS) and set(bugs.RULES.values()) <= set(HINTS)


@pytest.mark.parametrize("seed", range(40))
def test_the_reference_keeps_every_rule_on_random_traces(seed):
    spec = make_chunk_trace(
        seed,
        12,
        num_blocks=6 + seed % 9,
        block_size=(1, 2, 3, 4)[seed % 4],
        budget=(1, 3, 5, 8, 13, 40)[seed % 6],
        max_num_seqs=1 + seed % 6,
    )
    check_rules(ChunkedScheduler, spec, f"seed {seed}")


@pytest.mark.parametrize("bug", bugs.ALL_BUGS)
def test_every_bug_loses_exactly_the_points_of_the_checks_it_breaks(bug):
    failed = failures(bugs.bug_class(bug))
    assert bugs.must_fail(bug) == set(failed), (
        f"{bug}: expected {sorted(bugs.must_fail(bug))} to fail, got {sorted(failed)}"
    )
    assert all(message.startswith("[") for message in failed.values()), failed
    hint = HINTS[bugs.RULES[bug]]
    assert any(message.endswith(f"hint:     {hint}") for message in failed.values()), (bug, failed)


def test_feedback_names_the_step_and_gives_a_hint():
    message = failures(bugs.bug_class("blocks for the whole prompt at admission"))[bugs.BUDGET]
    first, *rest = message.splitlines()
    assert first.startswith("[") and "step" in first and "blocks" in first
    assert [line.split(":")[0].strip() for line in rest] == ["expected", "got", "hint"]
    assert "allocate_slots" in rest[-1]


def test_an_error_in_schedule_or_its_helper_names_the_step_and_the_rule_not_another_part():
    """Raised in code a notebook cell defined (its file is ipykernel's), inside schedule()'s own test: the block
    says which step and which rule, never "the error is in ..., its own tests say more"."""
    from paged_kv.lab.feedback import CheckFailed

    source = (
        "class Broken(Starter):\n"
        "    def _take(self, seq):\n"
        "        return self.block_manager.allocate_slots(seq, 0)\n"
        "    def schedule(self):\n"
        "        self._take(self.waiting[0])\n"
    )
    namespace = {"Starter": Starter}
    exec(compile(source, "/tmp/ipykernel_1/2.py", "exec"), namespace)
    spec = make_chunk_trace(0, 3, num_blocks=8, block_size=2, budget=4, arrival_spread=0)
    with pytest.raises(CheckFailed) as caught:
        check_rules(namespace["Broken"], spec, "a trace")
    failure = caught.value
    assert failure.case == "a trace, step 0" and "num_new_tokens" in failure.problem
    assert failure.hint == HINTS["budget"] and "its own tests" not in str(failure)


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_an_error_the_replay_raises_names_its_rule_in_the_notebooks_language(language):
    """The replay's own messages are made in the notebook's language; each still points at its rule's hint."""
    from paged_kv.lab.feedback import CheckFailed
    from paged_kv.lab.i18n import speaking, translate

    class ReturnsAList(Starter):
        def schedule(self):
            return [list(self.waiting)]

    spec = make_chunk_trace(0, 2, num_blocks=8, block_size=2, budget=4, arrival_spread=0)
    with speaking(language), pytest.raises(CheckFailed) as caught:
        check_rules(ReturnsAList, spec, "a trace")
    with speaking(language):
        assert caught.value.hint == translate(HINTS["shape"]), caught.value
    assert ("必须返回" in caught.value.problem) == (language == "zh_CN"), caught.value


def test_super_reaches_a_stub_not_the_reference():
    class UsesSuper(Starter):
        def schedule(self):
            return super().schedule()

    failed = failures(UsesSuper)
    assert set(failed) == set(CHECKS)
    assert all(message.startswith("TodoNotWritten") for message in failed.values()), failed


# The pitfalls the notebook lists, each as the bugs that commit it; the visible cell names each one's rule.
VISIBLE_MUST_CATCH = {
    "A chunk that overruns the budget": [
        "a running chunk overruns the budget",
        "an admitted chunk overruns the budget",
        "the budget never shrinks for admissions",
    ],
    "Blocks for the whole prompt at admission": ["blocks for the whole prompt at admission"],
    "Registering a partly computed block": [
        "registering the chunk's blocks at allocation",
        "registering a running chunk's blocks in schedule",
    ],
    "Counting a cached prefix as budget": ["counting the cached prefix as budget"],
    "Ignoring the prefix cache": ["never uses the prefix cache"],
    "Starving decodes behind prefill": ["waiting admitted before running (starves decodes)"],
    "Skipping the head of waiting": ["skips a waiting head that does not fit"],
    "Ignoring `max_num_seqs`": ["ignores max_num_seqs", "one sequence more than max_num_seqs"],
    "Preempting the wrong sequence": ["preempts the oldest", "preempts the sequence that cannot grow"],
    "Losing a victim": [
        "a victim keeps its blocks",
        "a victim stays in running",
        "a victim goes to the tail of waiting",
    ],
    "Admitting in a step that preempted": ["admits in a step that preempted"],
    "A wrong `is_prefill`": [
        "is_prefill always False",
        "is_prefill only for chunks of more than one token",
        "is_prefill from the prompt length alone",
        "is_prefill only when a sequence is admitted",
    ],
}


def run_visible_cell(cls):
    """The notebook's visible test cell, run with ``cls`` as the student's ChunkedScheduler."""
    from notebook_code import run_visible_cell as run_cell

    imports = (
        "from paged_kv.lab.chunked_rules import check_rules\n"
        "from paged_kv.lab.chunked_trace import ChunkTraceSpec, describe\n"
        "from paged_kv.lab.feedback import say\n"
        "from paged_kv.lab.scheduler_trace import TraceRequest"
    )
    run_cell(bugs.LAB, "lab09-visible", imports, {"ChunkedScheduler": cls})


def test_the_visible_cell_passes_the_solution(capsys):
    run_visible_cell(bugs.student_class(bugs.solution_source()))
    assert "Visible tests passed." in capsys.readouterr().out


@pytest.mark.parametrize("pitfall, bug", [(p, b) for p, listed in sorted(VISIBLE_MUST_CATCH.items()) for b in listed])
def test_the_visible_cell_catches_each_pitfall_with_one_short_block_naming_its_rule(pitfall, bug, capsys):
    from paged_kv.lab.feedback import CheckFailed

    with pytest.raises(CheckFailed) as caught:
        run_visible_cell(bugs.bug_class(bug))
    assert "Visible tests passed." not in capsys.readouterr().out
    lines = caught.value._render_traceback_()
    assert 2 <= len(lines) <= 6, lines
    assert caught.value.hint == HINTS[bugs.RULES[bug]], (pitfall, caught.value)
    assert "step" in caught.value.case, caught.value


def test_every_listed_pitfall_is_tried_on_the_visible_cell():
    import nbformat

    from autograder.course.layout import LABS, SOURCE_DIR

    text = next(
        c.source
        for c in nbformat.read(SOURCE_DIR / bugs.LAB / LABS[bugs.LAB], as_version=4).cells
        if c.cell_type == "markdown" and "Pitfalls to remember" in c.source
    )
    listed = [line.split("**")[1].rstrip(".") for line in text.splitlines() if line.startswith("- **")]
    assert sorted(listed) == sorted(VISIBLE_MUST_CATCH), listed


# -- the hidden traces exercise every rule -------------------------------------------------------------------
def _situations(checker, s):
    """Which rules this step could catch a break of (a correct scheduler's step, before the checker reads it)."""
    spec, size = checker.spec, checker.spec.block_size
    holders = {name: computed for name, _, computed, _ in s.holders}
    sched = dict(s.scheduled)
    left = spec.max_num_batched_tokens - sum(sched.values())
    prompt = {name: len(spec.requests[int(name[1:])].prompt) for name in sched}
    needs = [n for n, t in s.scheduled if t != 1 or holders[n] + t != checker.length(n)]
    victims = [n for n in s.running_before if n not in s.running]
    admitted = [n for n in s.running if n not in s.running_before]
    found = set()
    if victims:
        found.add("preemption")
        if len(s.running_before) > len(victims):
            found.add("a victim other than the sequence that needed blocks")
    if needs and all(t == 1 for t in sched.values()):
        found.add("is_prefill: a one-token chunk short of its end, every other sequence one token")
    if needs and all(checker.length(n) > prompt[n] for n in sched):
        found.add("is_prefill: a recomputation, no sequence without outputs")
    if needs and not admitted:
        found.add("is_prefill: a running prompt's chunk in a step that admits nobody")
    if any(held for _, _, held in s.admissions):
        found.add("an admission the prefix cache serves")
    if s.head and left > 0:
        name, hits, revived = s.head
        n = min(checker.length(name) - hits * size, left)
        fits = -(-(hits * size + n) // size) - hits + revived <= s.free_blocks
        if fits and victims:
            found.add("a victim that would fit again in the step that preempted it")
        if fits and not victims and len(s.running) == spec.max_num_seqs:
            found.add("max_num_seqs stops an admission that would fit")
        if not fits and not victims and len(s.waiting) > 1:
            found.add("the head of waiting does not fit, another behind it waits")
    if any(holders[n] + t < checker.length(n) for n, t in s.scheduled) and left == 0:
        found.add("a chunk cut by the budget")
    if any((holders[n] + t) % size and holders[n] + t < checker.length(n) for n, t in s.scheduled):
        found.add("a chunk that ends inside a block")
    if admitted and any(n in sched for n in s.running_before):
        found.add("running sequences served before an admission")
    return found


def test_the_hidden_checks_exercise_every_rule_on_several_traces(monkeypatch):
    seen = defaultdict(set)

    class Recording(chunked_rules.RuleChecker):
        def step(self, s):
            if not s.idle:
                for situation in _situations(self, s):
                    seen[situation].add(self.case)
            super().step(s)

    monkeypatch.setattr(chunked_rules, "RuleChecker", Recording)
    for check in CHECKS.values():
        check(ChunkedScheduler)
    counts = {situation: len(cases) for situation, cases in seen.items()}
    assert len(counts) == 12 and min(counts.values()) >= 3, "\n".join(f"{n:>3} {s}" for s, n in sorted(counts.items()))
