"""Lab 05's graders grade, part by part: the solution notebook gets full marks, the untouched release
zero on every check, each catalogued bug loses points on its own part's checks and nowhere else, correct
variants written differently keep full marks, and no part can be passed by delegating to the reference
or with objects that claim equality."""

import inspect

import pytest

from autograder.labs.lab05_prefix_cache import checks as grader
from autograder.course.layout import RELEASE_DIR, SOURCE_DIR, LABS as NOTEBOOKS
from paged_kv.lab.starters import BlockManagerWithoutPrefixCache
from doctored import AgreeableList, AlwaysEqual
from autograder.labs.lab05_prefix_cache.tests import bugs as bugs
from notebook_code import namespace_after_answer

LAB = "05-prefix-cache"
TODOS = grader.PARTS
CHECKS = [
    f
    for name, f in inspect.getmembers(grader, inspect.isfunction)
    if name.startswith("check_") and f.__module__ == grader.__name__
]
# The notebook's class that each check receives (the hidden test cells right after that part).
NOTEBOOK_CLASS = {
    "hash": "HashingManager",
    "release": "ReleasingManager",
    "register": "RegisteringManager",
    "admit": "BlockManager",
}


def todo_of(check) -> str:
    """The part a check grades, read from the reference functions its @grades names."""
    names = {getattr(f, "__name__", "") for f in check.__grades__}
    return next(k for k, methods in TODOS.items() if names & set(methods))


def test_every_check_grades_exactly_one_todo_and_every_todo_is_graded():
    assert {todo_of(c) for c in CHECKS} == set(TODOS)
    for check in CHECKS:
        names = {f.__name__ for f in check.__grades__} - {"_chain_hash"}
        assert names <= set(TODOS[todo_of(check)]), check.__name__


_namespaces = {}


def notebook_class(folder, todo):
    if folder not in _namespaces:
        _namespaces[folder] = namespace_after_answer(folder / LAB / NOTEBOOKS[LAB])
    return _namespaces[folder][NOTEBOOK_CLASS[todo]]


def failures(implementation):
    """{check name: first line of its message} for every check that fails; NotImplementedError counts."""
    failed = {}
    for check in CHECKS:
        try:
            check(implementation)
        except NotImplementedError as error:
            failed[check.__name__] = f"NotImplementedError: {error}"
        except AssertionError as error:
            failed[check.__name__] = str(error).splitlines()[0]
    return failed


def checks_of(todo):
    return {c.__name__ for c in CHECKS if todo_of(c) == todo}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_solution_gets_full_marks(check):
    check(notebook_class(SOURCE_DIR, todo_of(check)))
    check(notebook_class(SOURCE_DIR, "admit"))  # the finished class passes every part's checks too


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_untouched_release_gets_zero(check):
    with pytest.raises(NotImplementedError):
        check(notebook_class(RELEASE_DIR, todo_of(check)))


@pytest.mark.parametrize("implementation", bugs.VARIANTS, ids=lambda c: c.__name__)
def test_correct_variants_written_differently_get_full_marks(implementation):
    assert failures(implementation) == {}


@pytest.mark.parametrize("bug, todo", list(bugs.BUGS.items()), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_catalogued_bug_loses_points_on_its_own_todo_only(bug, todo):
    failed = failures(bug)
    assert failed, f"{bug.__name__} passed every check"
    assert set(failed) <= checks_of(todo), f"{bug.__name__} (part {todo}) also lost points elsewhere: {failed}"
    for message in failed.values():
        assert message.startswith("[") and "integrity" not in message, message


def test_one_bug_per_todo_together_lose_every_todo():
    """Isolation: a class with one bug in each part still has each part graded on its own."""
    mixed = type(
        "Mixed",
        (bugs.Correct,),
        {
            "compute_hash": vars(bugs.HashInt32Ids)["compute_hash"],
            "can_allocate": bugs.NoTokenCheck.can_allocate,
            "_allocate_block": bugs.KeepsStaleMapping._allocate_block,
            "hash_blocks": bugs.RestartsTheChain.hash_blocks,
        },
    )
    lost = {todo_of(getattr(grader, name)) for name in failures(mixed)}
    assert lost == set(TODOS)


def test_a_todo_not_written_yet_does_not_stop_the_others_from_being_graded():
    only_hash = type(
        "OnlyHash", (BlockManagerWithoutPrefixCache,), {"compute_hash": vars(bugs.Correct)["compute_hash"]}
    )
    failed = failures(only_hash)
    assert set(failed) == {c.__name__ for c in CHECKS} - checks_of("hash")
    assert all(m.startswith("NotImplementedError") for m in failed.values()), failed


# -- delegation ------------------------------------------------------------------------------------------
# Every form of handing a TODO to the reference is read from the submitted text: test_provenance.py.


def test_super_reaches_a_stub_not_the_reference():
    namespace = {}
    exec(
        "class UsesSuper(Correct):\n"
        "    def allocate(self, seq, n):\n        return super(Correct, self).allocate(seq, n)\n",
        {"Correct": bugs.Correct},
        namespace,
    )
    failed = failures(namespace["UsesSuper"])
    assert set(failed) == checks_of("admit") and all(m.startswith("NotImplementedError") for m in failed.values())


# -- doctored objects ------------------------------------------------------------------------------------
class DoctoredHash(bugs.Correct):
    @classmethod
    def compute_hash(cls, token_ids, prefix=-1):
        return AlwaysEqual(0)


class DoctoredCanAllocate(bugs.Correct):
    def can_allocate(self, seq):
        return AlwaysEqual(bugs.Correct.can_allocate(self, seq))


class DoctoredTable(bugs.Correct):
    def deallocate(self, seq):
        bugs.Correct.deallocate(self, seq)
        seq.block_table = AgreeableList()


@pytest.mark.parametrize(
    "implementation, todo",
    [(DoctoredHash, "hash"), (DoctoredCanAllocate, "admit"), (DoctoredTable, "release")],
    ids=["always-equal-hash", "always-equal-count", "agreeable-table"],
)
def test_objects_that_claim_equality_do_not_pass(implementation, todo):
    assert checks_of(todo) <= set(failures(implementation))
