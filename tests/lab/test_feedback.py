"""Visible-test helpers: one readable block per failure, and no trust in the student's objects."""

import pytest
import torch

from paged_kv.lab.feedback import CheckFailed, TodoNotWritten, expect, expect_equal, expect_raises, show_when_ready


def test_a_failure_names_case_expected_got_and_hint():
    with pytest.raises(CheckFailed) as caught:
        expect_equal("prompt_len=6: blocks", 1, 2, "ceil(6 / 4) = 2")
    lines = str(caught.value).splitlines()
    assert lines[0] == "[prompt_len=6: blocks] wrong value"
    assert lines[1:] == ["  expected: 2", "  got:      1", "  hint:     ceil(6 / 4) = 2"]
    rendered = caught.value._render_traceback_()
    assert "Check failed" in rendered[0] and len(rendered) == 4


def test_a_float_where_an_int_is_expected_gets_an_integer_arithmetic_hint():
    with pytest.raises(CheckFailed, match="expected an int, got a float") as caught:
        expect_equal("bytes", 2.0, 2)
    assert "integer arithmetic" in caught.value.hint


class Liar(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class LyingList(list):
    def __eq__(self, other):
        return True


class LyingTensor(torch.Tensor):
    def __eq__(self, other):
        return torch.ones_like(self, dtype=torch.bool)


@pytest.mark.parametrize(
    "got, expected",
    [
        (Liar(3), 4),
        (LyingList([1]), [1, 2]),
        ([1, Liar(0)], [1, 2]),
        ({"a": Liar(0)}, {"a": 1}),
        (torch.zeros(2).as_subclass(LyingTensor), torch.ones(2)),
        ((1, 2), [1, 2]),
        (True, 1),
    ],
)
def test_doctored_objects_never_pass(got, expected):
    with pytest.raises(CheckFailed):
        expect_equal("case", got, expected)


def test_equal_plain_values_and_tensors_pass():
    expect_equal("case", {"a": [1, (2, 3.5)], "b": None}, {"a": [1, (2, 3.5)], "b": None})
    expect_equal("case", torch.arange(3), torch.arange(3))
    with pytest.raises(CheckFailed, match="dtype"):
        expect_equal("case", torch.arange(3.0), torch.arange(3))


def test_expect_needs_exactly_true():
    expect(True, "case", "never shown")
    for falsy_or_truthy in (False, 1, "yes", None):
        with pytest.raises(CheckFailed, match=r"^\[case\] broken"):
            expect(falsy_or_truthy, "case", "broken")


def test_expect_raises_reports_the_wrong_error_and_lets_a_todo_through():
    with pytest.raises(CheckFailed, match="expected RuntimeError, got ValueError"):
        expect_raises("case", RuntimeError, lambda: int("x"))
    with pytest.raises(CheckFailed, match="should contain 'OOM'"):
        expect_raises("case", RuntimeError, lambda: (_ for _ in ()).throw(RuntimeError("full")), match="OOM")
    with pytest.raises(TodoNotWritten):
        expect_raises("case", RuntimeError, lambda: (_ for _ in ()).throw(TodoNotWritten("x")))


def test_show_when_ready_prints_a_note_until_the_todo_exists(capsys):
    def unwritten():
        raise NotImplementedError()

    assert show_when_ready(unwritten, "allocate_for_prefill") is None
    assert "Finish allocate_for_prefill" in capsys.readouterr().out
    with pytest.raises(ZeroDivisionError):
        show_when_ready(lambda: 1 / 0)


def test_a_bug_found_by_a_picture_cell_keeps_its_type_and_shows_as_one_block():
    def decode():
        return [][3]

    with pytest.raises(IndexError) as caught:
        show_when_ready(decode, "allocate_for_decode")
    block = caught.value._render_traceback_()
    assert "IndexError: list index out of range" in block[0]
    assert block[1].strip().startswith("where:    decode, line")
    assert "allocate_for_decode" in block[2] and len(block) == 3


def test_in_a_kernel_a_failure_is_one_short_error_block():
    """What a student sees in Jupyter and what nbgrader records: an error output of a few lines."""
    import nbformat
    from autograder.course.notebook_client import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(source)
        for source in (
            "from paged_kv.lab.feedback import expect_equal, install_notebook_hooks\nassert install_notebook_hooks()",
            "expect_equal('blocks for 6 tokens', 1, 2, 'ceil(6 / 4) = 2')",
            "def allocate_for_prefill(req):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
            "allocate_for_prefill(None)",
        )
    ]
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True).execute()
    failed, todo = (next(o for o in nb.cells[i].outputs if o.output_type == "error") for i in (1, 3))
    assert failed.ename == "CheckFailed" and len(failed.traceback) == 4, failed.traceback
    assert "expected: 2" in "\n".join(failed.traceback)
    assert todo.ename == "NotImplementedError" and len(todo.traceback) == 3, todo.traceback
    assert "allocate_for_prefill still raises NotImplementedError" in todo.traceback[0]


def test_attempt_names_the_case_and_practice_never_raises(capsys):
    from paged_kv.lab.feedback import CheckFailed, attempt, practice

    with pytest.raises(CheckFailed, match=r"\[dividing\] raised ZeroDivisionError"):
        attempt("dividing", lambda: 1 / 0)
    with pytest.raises(NotImplementedError):
        attempt("todo", lambda: (_ for _ in ()).throw(NotImplementedError()))
    assert practice(lambda: 1 / 0) is None  # a cell ending in practice(...) shows no trailing True/False
    assert capsys.readouterr().out.startswith("Not yet: ZeroDivisionError")

    def test_it():
        pass

    assert practice(test_it) is None
    assert capsys.readouterr().out == "test_it: passed\n"


def test_practice_on_a_todo_not_written_yet_says_what_to_finish_instead_of_a_verdict(capsys):
    from paged_kv.lab.feedback import CheckFailed, TodoNotWritten, practice

    def unwritten():
        raise TodoNotWritten("allocate is this lab's TODO")

    def failing():
        raise CheckFailed("case", "wrong")

    practice(unwritten, todo="BlockManager (parts 1 to 4)")
    assert capsys.readouterr().out == (
        "Finish BlockManager (parts 1 to 4), run its cell again, then run this cell to try this exercise.\n"
    )
    practice(failing, todo="BlockManager (parts 1 to 4)")  # written but wrong: the verdict, as without todo
    assert capsys.readouterr().out.startswith("Not yet: [case] wrong")
    practice(unwritten)  # without todo, an unwritten TODO is a verdict like any other error
    assert capsys.readouterr().out.startswith("Not yet: TodoNotWritten: allocate is this lab's TODO")
    with pytest.raises(TypeError, match="todo must name"):
        practice(unwritten, todo=None)


def test_attempt_returns_the_result_and_shows_an_exact_fit_oom_as_one_block_with_its_hint():
    from paged_kv.lab.feedback import attempt

    assert attempt("case", lambda x: x + 1, 1) == 2

    def oom():
        raise RuntimeError("OOM: need 3, have 3")

    with pytest.raises(CheckFailed) as caught:
        attempt("exact fit", oom, hint="compare with >, not >=")
    assert str(caught.value).splitlines() == [
        "[exact fit] raised RuntimeError: OOM: need 3, have 3",
        "  hint:     compare with >, not >=",
    ]
    with pytest.raises(CheckFailed, match=r"^\[asserting\] an assertion failed: no"):
        attempt("asserting", lambda: (_ for _ in ()).throw(AssertionError("no")))


def _run_in_kernel(sources):
    import nbformat
    from autograder.course.notebook_client import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True).execute()
    return [next((o for o in c.outputs if o.output_type == "error"), None) for c in nb.cells]


def test_a_name_a_skipped_cell_defines_says_to_run_the_cells_above(tmp_path, monkeypatch):
    """Run All stops at a failing test; jumping below it to a cell that uses a name a given cell defines
    shows one block saying to run the cells above, not a raw NameError."""
    import nbformat

    saved = nbformat.v4.new_notebook()  # the notebook file the Jupyter server names to its kernel
    saved.cells = [
        nbformat.v4.new_code_cell(source)
        for source in (
            "from paged_kv.lab.feedback import install_notebook_hooks",
            "%matplotlib inline\nif True:\n    def scores_spec(q, k):\n        pass",
        )
    ]  # bound inside an if, too
    path = tmp_path / "lab.ipynb"
    nbformat.write(saved, path)
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    errors = _run_in_kernel(
        [  # the cell that defines scores_spec never ran in this kernel
            "from paged_kv.lab.feedback import install_notebook_hooks, show_when_ready\nassert install_notebook_hooks()",
            "scores_spec(1, 2)",
            "show_when_ready(lambda: scores_spec(1, 2), 'step 2')",
            "spelled_wrong + 1",
            "def f():\n    x += 1\n\nf()",
        ]
    )
    skipped, shown, typo, unbound = errors[1:]
    for error, lines in ((skipped, 3), (shown, 4)):  # inside a function the block says where
        text = "\n".join(error.traceback)
        assert error.ename == "NameError" and len(error.traceback) == lines, error.traceback
        assert "'scores_spec' is defined by a cell of this notebook" in text and "Run All Above Selected Cell" in text
    assert "where:    <lambda>, line 1" in "\n".join(shown.traceback)
    assert typo.ename == "NameError" and "Run All Above" not in "\n".join(typo.traceback)
    assert unbound.ename == "UnboundLocalError" and "Run All Above" not in "\n".join(unbound.traceback)


def test_without_the_notebook_file_a_missing_name_still_gets_the_hint(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    errors = _run_in_kernel(
        [
            "from paged_kv.lab.feedback import install_notebook_hooks\nassert install_notebook_hooks()",
            "attend_spec(1)",
            "def uses_it():\n    return attend_spek(1)\n\nuses_it()",
        ]
    )
    text = "\n".join(errors[1].traceback)
    assert len(errors[1].traceback) == 3 and "If a cell above this one defines it" in text, errors[1].traceback
    # a name misspelled inside a function: the normal traceback, which shows the line
    assert "If a cell above" not in "\n".join(errors[2].traceback) and len(errors[2].traceback) > 3


NOTEBOOK_PARTS = '''
from paged_kv.lab.feedback import attempt, CheckFailed
class Part3:
    def hash_blocks(self):
        return {}[12345678901234567890]
class Part4(Part3):
    def allocate(self):
        return self._chain() + self.hash_blocks()
    def _chain(self):
        return 0
caught = []
for method in ("allocate", "hash_blocks"):
    try:
        attempt(method + "()", getattr(Part4(), method))
    except CheckFailed as failed:
        caught.append(str(failed))
'''


def test_a_crash_in_an_earlier_parts_method_is_blamed_on_that_method():
    """A test of part 4 whose code calls part 3's method, which crashes: one block naming Part3.hash_blocks (the
    part at fault) and what to run again; the same crash in a test of part 3 itself, or in a helper of the class
    under test, is that code's own error. (Cells' code is compiled as IPython names a cell's file.)"""
    scope = {}
    exec(compile(NOTEBOOK_PARTS, "/tmp/ipykernel_1/1.py", "exec"), scope)
    in_part4, in_part3 = scope["caught"]
    assert in_part4.startswith("[allocate()] raised KeyError in Part3.hash_blocks: 12345678901234567890")
    assert "fix Part3.hash_blocks" in in_part4 and "later parts' cells again" in in_part4
    assert in_part3 == "[hash_blocks()] raised KeyError: 12345678901234567890"


def test_a_stale_chain_of_parts_says_which_cells_to_run_again():
    """Part 1's class defined again after part 2's and 3's: with_reference_todos on part 3's class says which
    answer cells to run again, in order; once they ran, it builds the class."""
    from paged_kv.lab.starters import stale_bases

    code = '''
from paged_kv.lab.starters import BlockManagerWithoutPrefixCache, with_reference_todos
class HashingManager(BlockManagerWithoutPrefixCache): pass
class ReleasingManager(HashingManager): pass
class RegisteringManager(ReleasingManager): pass
fresh = with_reference_todos(RegisteringManager, "hash_blocks")
class HashingManager(BlockManagerWithoutPrefixCache): pass
'''
    import sys
    import types

    notebook = types.ModuleType("__main__")
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = notebook
    try:
        exec(compile(code, "/tmp/ipykernel_1/2.py", "exec"), vars(notebook))
        assert [(k.__name__, old.__name__) for k, old in stale_bases(notebook.RegisteringManager)] == [
            ("ReleasingManager", "HashingManager")
        ]
        with pytest.raises(CheckFailed, match="run the answer cells of ReleasingManager, RegisteringManager again"):
            notebook.with_reference_todos(notebook.RegisteringManager, "hash_blocks")
        exec(
            "class ReleasingManager(HashingManager): pass\nclass RegisteringManager(ReleasingManager): pass",
            vars(notebook),
        )
        assert stale_bases(notebook.RegisteringManager) == []
        notebook.with_reference_todos(notebook.RegisteringManager, "hash_blocks")
    finally:
        sys.modules["__main__"] = saved
