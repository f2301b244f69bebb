"""Lab 08's graders grade, TODO by TODO: the solution notebook gets full marks, the untouched release
zero on every check, each catalogued bug loses points on its own TODO's checks and nowhere else, correct
variants written differently keep full marks, and objects that claim equality earn nothing."""

import inspect

import pytest

from autograder.labs.lab08_fork_and_share import checks as grader
from autograder.course.layout import LABS as NOTEBOOKS, RELEASE_DIR, SOURCE_DIR
from doctored import AgreeableList
from autograder.labs.lab08_fork_and_share.tests import bugs as bugs
from notebook_code import namespace_after_answer

LAB = "08-fork-and-share"
CHECKS = [
    f
    for name, f in inspect.getmembers(grader, inspect.isfunction)
    if name.startswith("check_") and f.__module__ == grader.__name__
]
# TODO -> the reference functions its checks name in @grades, and the notebook object each check receives
TODO_REFERENCE = {1: "fork", 2: "may_append", 3: "advance_beams", 4: "copy_blocks"}
NOTEBOOK_OBJECT = {1: "ForkingManager", 2: "CopyOnWriteManager", 3: "advance_beams", 4: "copy_blocks"}


def todo_of(check) -> int:
    names = {f.__name__ for f in check.__grades__}
    return next(k for k, name in TODO_REFERENCE.items() if name in names)


def checks_of(todo):
    return {c.__name__ for c in CHECKS if todo_of(c) == todo}


def failures(implementation, todos=(1, 2, 3, 4)):
    """{check name: first line of its message} for the checks of ``todos`` that fail."""
    failed = {}
    for check in CHECKS:
        if todo_of(check) not in todos:
            continue
        try:
            check(implementation)
        except NotImplementedError as error:
            failed[check.__name__] = f"NotImplementedError: {error}"
        except AssertionError as error:
            failed[check.__name__] = str(error).splitlines()[0]
    return failed


def todos_taking(implementation):
    """Classes answer TODOs 1 and 2, functions TODO 3 (a manager first) or 4 (caches first)."""
    if isinstance(implementation, type):
        return (1, 2)
    first = next(iter(inspect.signature(implementation).parameters))
    return (3,) if first == "manager" else (4,)


_namespaces = {}


def notebook_object(folder, todo):
    if folder not in _namespaces:
        _namespaces[folder] = namespace_after_answer(folder / LAB / NOTEBOOKS[LAB])
    return _namespaces[folder][NOTEBOOK_OBJECT[todo]]


def test_every_todo_is_graded_by_its_own_checks():
    assert {todo_of(c) for c in CHECKS} == set(TODO_REFERENCE)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_solution_gets_full_marks(check):
    check(notebook_object(SOURCE_DIR, todo_of(check)))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_untouched_release_gets_zero(check):
    with pytest.raises(NotImplementedError):
        check(notebook_object(RELEASE_DIR, todo_of(check)))


@pytest.mark.parametrize("implementation", list(bugs.VARIANTS), ids=lambda v: v.__name__)
def test_correct_variants_written_differently_get_full_marks(implementation):
    assert failures(implementation, bugs.VARIANTS[implementation]) == {}


@pytest.mark.parametrize("bug, todo", list(bugs.BUGS.items()), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_catalogued_bug_loses_points_on_its_own_todo_only(bug, todo):
    failed = failures(bug, todos_taking(bug))
    assert failed, f"{bug.__name__} passed every check"
    assert set(failed) <= checks_of(todo), f"{bug.__name__} (TODO {todo}) also lost points elsewhere: {failed}"
    for message in failed.values():
        assert message.startswith("["), message


def test_a_class_with_fork_only_is_graded_on_fork_and_fails_may_append_as_unwritten():
    only_fork = type("OnlyFork", (bugs.ForkingManagerWithoutFork,), {"fork": bugs.Correct.fork})
    failed = failures(only_fork, (1, 2))
    assert set(failed) == checks_of(2) and all(m.startswith("NotImplementedError") for m in failed.values()), failed


def test_a_fork_returning_a_table_that_claims_equality_does_not_pass():
    class Agreeable(bugs.Correct):
        def fork(self, parent):
            child = bugs.Correct.fork(self, parent)
            for block_id in child.block_table:
                self.blocks[block_id].ref_count -= 1
            child.block_table = AgreeableList(child.block_table)
            return child

    assert checks_of(1) <= set(failures(Agreeable, (1,)))


@pytest.mark.parametrize("bug", bugs.MISSED_BEFORE_ISSUE_27, ids=lambda b: b.__name__)
def test_what_the_grader_before_issue_27_missed_now_fails_on_the_field_or_tensor_it_gets_wrong(bug):
    """A fork that leaves a counter or the seq_id as Sequence made them, and copies put into new tensors:
    every field of the child is compared with the reference's child, and the caches are read from lists the
    function never saw."""
    failed = failures(bug, todos_taking(bug))
    assert failed and set(failed) <= checks_of(bugs.BUGS[bug]), failed
    named = {
        "ForkForgetsThePromptLength": "num_prompt_tokens",
        "ForkIsAShallowCopy": "seq_id",
        "puts_new_tensors_in_the_list": "did not change",
    }[bug.__name__]
    assert all(named in message for message in failed.values()), failed
