"""Readable checks for the labs' visible tests and the graders: which case, what was expected, what came
back, and a hint, shown as one short block instead of a traceback.

The comparisons never trust the student's objects: a value is accepted only when it is built from plain
Python values (``int``, ``float``, ``str``, ``bool``, ``None``, ``list``, ``tuple``, ``dict``) or exact
``torch.Tensor`` objects, of exactly the expected types, so a subclass with a doctored ``__eq__`` or an
object that says it equals everything cannot pass.

Every text it shows is in the notebook's language (``paged_kv.lab.i18n``): its own wording, and the case, problem
and hint a check is given (a code cell's English text, translated where the catalogs know it).
"""

from __future__ import annotations

import reprlib
from typing import Any, Callable, List, Optional

from paged_kv.cache.todo import TodoNotWritten  # noqa: F401 (the labs import it from here)
from paged_kv.lab.i18n import SOURCE, _, language, speaking
from paged_kv.lab.message_layout import field, wrap

_MISSING = object()
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict, _repr.maxlevel = 120, 120, 12, 8, 4


def short_repr(value: Any) -> str:
    """``repr`` cut to a readable length (long lists and strings end in ``...``)."""
    try:
        return _repr.repr(value)
    except Exception:  # a student's object whose __repr__ fails must not hide the real message
        return f"<{type(value).__name__} object>"


class CheckFailed(AssertionError):
    """A failed check: ``[case] problem`` then ``expected``/``got``/``hint`` lines.

    In Jupyter, Colab and nbgrader feedback it shows as that block alone (IPython's
    ``_render_traceback_``), not as a traceback through this module. ``case``, ``problem`` and ``hint`` are
    shown in the notebook's language (translated here where a catalog knows them).
    """

    def __init__(self, case: str, problem: str, *, expected: Any = _MISSING, got: Any = _MISSING, hint: str = ""):
        self.case, self.problem, self.hint = _(str(case)), _(str(problem)), _(str(hint))
        self.expected, self.got = expected, got
        self.language = language()  # the block is shown in the language it was made in
        super().__init__(self._text())

    def _lines(self) -> List[str]:
        with speaking(self.language):
            lines = [f"[{self.case}] {self.problem}"]
            if self.expected is not _MISSING:
                lines.append(field("expected:", short_repr(self.expected)))
            if self.got is not _MISSING:
                lines.append(field("got:", short_repr(self.got)))
            if self.hint:
                lines.append(field("hint:", self.hint))
            return lines

    def _text(self) -> str:
        return "\n".join(self._lines())

    def _render_traceback_(self) -> List[str]:
        first, *rest = self._lines()
        with speaking(self.language):
            if self.hint:  # a long hint wraps between words (a notebook's output would break inside an identifier)
                rest[-1] = wrap(rest[-1])
            return [f"{_RED}{_BOLD}{_('Check failed')}{_RESET} {first}", *rest]


def materialize(value: Any) -> Any:
    """``value`` with every object that lives elsewhere replaced by its plain data; the same object when
    there is none. Such objects (the grader's handles to a grading kernel's objects) implement
    ``__pkv_value__()`` and a batched ``__pkv_values__(items)``; nothing else is touched."""
    found: List[Any] = []
    _remote_leaves(value, found, 0)
    if not found:
        return value
    plain = {}
    kinds = {}
    for leaf in found:
        kinds.setdefault(type(leaf), []).append(leaf)
    for kind, leaves in kinds.items():
        batch = getattr(kind, "__pkv_values__", None)
        values = batch(leaves) if batch is not None else [leaf.__pkv_value__() for leaf in leaves]
        plain.update({id(leaf): v for leaf, v in zip(leaves, values)})
    return _rebuild(value, plain)


def _is_elsewhere(value: Any) -> bool:
    return hasattr(type(value), "__pkv_value__")


def _remote_leaves(value: Any, found: List[Any], depth: int) -> None:
    if depth > 40:
        return
    if _is_elsewhere(value):
        found.append(value)
    elif type(value) in (list, tuple, set, frozenset):
        for item in value:
            _remote_leaves(item, found, depth + 1)
    elif type(value) is dict:
        for key, item in value.items():
            _remote_leaves(key, found, depth + 1)
            _remote_leaves(item, found, depth + 1)


def _rebuild(value: Any, plain: dict, depth: int = 0) -> Any:
    """``value`` with the leaves ``_remote_leaves`` found replaced; deeper than it looked, left as it is."""
    if depth > 40:
        return value
    if _is_elsewhere(value):
        return plain.get(id(value), value)
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return kind(_rebuild(v, plain, depth + 1) for v in value)
    if kind is dict:
        return {_rebuild(k, plain, depth + 1): _rebuild(v, plain, depth + 1) for k, v in value.items()}
    return value


def say(message: str) -> None:
    """Print ``message`` (a code cell's English: ``"Visible tests passed."``, an f-string) in the notebook's
    language: what a cell tells its student, where ``print`` would show the English in every language."""
    if not isinstance(message, str):
        raise TypeError(f"say() prints a text: give it a str, not {type(message).__name__}")
    print(_(message))


def expect(condition: bool, case: str, problem: str, hint: str = "") -> None:
    """Raise :class:`CheckFailed` with ``problem`` unless ``condition`` is exactly ``True``."""
    condition = materialize(condition)
    if condition is not True:
        raise CheckFailed(case, problem, hint=hint)


# -- untrusting comparison ------------------------------------------------------------------------
_SCALARS = (bool, int, float, str, bytes, type(None))


def _a(type_name: str) -> str:
    """``a list``, ``an int`` (in English: Chinese has no article)."""
    if language() != SOURCE:
        return type_name
    return ("an " if type_name[:1].lower() in "aeiou" else "a ") + type_name


def _kind(value: Any) -> str:
    cls = type(value)
    if value is None:
        return "None"
    base = next((b for b in (bool, int, float, str, list, tuple, dict) if isinstance(value, b)), None)
    if base is not None and cls is not base:
        name, base_name = _a(cls.__name__), base.__name__
        return _(f"{name} (a subclass of {base_name})")
    return _a(cls.__name__)


def _type_hint(got: Any, expected: Any) -> str:
    if type(expected) is int and type(got) is float:
        return _(
            "use integer arithmetic: // instead of /, or int(...) only where the value is exact; "
            "sizes and counts are whole numbers"
        )
    if type(got) is not type(expected) and isinstance(got, type(expected)):
        name = type(expected).__name__
        return _(f"return a plain {name}, not a subclass")
    return ""


def _difference(got: Any, expected: Any, path: str) -> Optional[tuple]:
    """``None`` when ``got`` equals ``expected`` exactly (types included), else ``(path, problem, hint)``."""
    import torch

    if type(got) is not type(expected):
        wanted, found = _kind(expected), _kind(got)
        return path, _(f"expected {wanted}, got {found}"), _type_hint(got, expected)
    if type(expected) in _SCALARS:
        if got != expected:  # both are exactly the same builtin type here: this == is the builtin's
            return path, _("wrong value"), ""
        return None
    if type(expected) in (list, tuple):
        if len(got) != len(expected):
            wanted, found = len(expected), len(got)
            return path, _(f"expected length {wanted}, got length {found}"), ""
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = _difference(g, e, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if type(expected) is dict:
        for key in got:
            if type(key) not in _SCALARS:
                kind = _kind(key)
                return path, _(f"a dict key is {kind}"), _("use plain str or int keys")
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            return path, _(f"keys differ: missing {missing}, unexpected {extra}"), ""
        for key in expected:
            diff = _difference(got[key], expected[key], f"{path}[{key!r}]")
            if diff:
                return diff
        return None
    if type(expected) is torch.Tensor:
        if got.dtype != expected.dtype:
            wanted, found = expected.dtype, got.dtype
            return path, _(f"expected dtype {wanted}, got {found}"), ""
        if tuple(got.shape) != tuple(expected.shape):
            wanted, found = tuple(expected.shape), tuple(got.shape)
            return path, _(f"expected shape {wanted}, got {found}"), ""
        if not torch.equal(got.detach().cpu(), expected.detach().cpu()):
            return path, _("tensor values differ"), ""
        return None
    raise TypeError(f"expect_equal cannot compare values of type {type(expected).__name__}")


def expect_equal(case: str, got: Any, expected: Any, hint: str = "") -> None:
    """Raise :class:`CheckFailed` unless ``got`` has exactly ``expected``'s types and value, all the way down."""
    got, expected = materialize(got), materialize(expected)
    diff = _difference(got, expected, "")
    if diff is None:
        return
    path, problem, type_hint = diff
    if path:
        problem = _(f"{problem} at result{path}")
    hint = _("; ").join(h for h in (type_hint, _(hint)) if h)
    raise CheckFailed(case, problem, expected=expected, got=got, hint=hint)


def expect_raises(case: str, error: type, func: Callable, *args: Any, hint: str = "", match: str = "") -> BaseException:
    """Call ``func(*args)`` and require it to raise ``error`` (whose message contains ``match``).

    A ``NotImplementedError`` (an unwritten TODO) passes through unchanged.
    """
    try:
        func(*args)
    except NotImplementedError:
        raise
    except error as caught:
        if match and match not in str(caught):
            name = error.__name__
            raise CheckFailed(
                case, _(f"the {name} message should contain {match!r}"), got=str(caught), hint=hint
            ) from None
        return caught
    except Exception as other:
        name, raised = error.__name__, type(other).__name__
        raise CheckFailed(case, _(f"expected {name}, got {raised}: {other}"), hint=hint) from None
    name = error.__name__
    raise CheckFailed(case, _(f"expected {name}, but nothing was raised"), hint=hint)


def attempt(case: str, func: Callable, *args: Any, hint: str = "") -> Any:
    """Call student code for a visible test: an unexpected error becomes a :class:`CheckFailed` naming ``case``.

    ``NotImplementedError`` (a TODO not written yet) and ``CheckFailed`` pass through unchanged.
    """
    try:
        return func(*args)
    except (NotImplementedError, CheckFailed):
        raise
    except AssertionError as error:
        raise CheckFailed(case, _(f"an assertion failed: {error}"), hint=hint) from None
    except Exception as error:
        elsewhere, name = _raised_in_other_code(error, func), type(error).__name__
        if elsewhere:  # an earlier part's method crashed under this test: the fix is there, not here
            raise CheckFailed(
                case,
                _(f"raised {name} in {elsewhere}: {error}"),
                hint=_(
                    f"the error is in {elsewhere}, not in what this test checks: fix {elsewhere} "
                    "(its own tests say more), run its cell and the later parts' cells again, then "
                    "this one"
                ),
            ) from None
        raise CheckFailed(case, _(f"raised {name}: {error}"), hint=hint) from None


def _raised_in_other_code(error: BaseException, func: Callable) -> str:
    """``"Class.method"`` when ``error`` was raised in a function the notebook defined (not this package's code)
    other than ``func``, the one the test called; "" otherwise."""
    tb, where = error.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if _notebook_code(code) and code.co_name != "<module>":
            where = code
        tb = tb.tb_next
    called = getattr(getattr(func, "__func__", func), "__code__", None)
    if where is None or where is called:
        return ""
    name = getattr(where, "co_qualname", where.co_name)
    owner = getattr(called, "co_qualname", "").rpartition(".")[0]
    return "" if owner and name.rpartition(".")[0] == owner else name  # (a helper of the same class: same part)


def _notebook_code(code) -> bool:
    """Code a notebook cell defined (IPython names a cell's file ``.../ipykernel_<pid>/<n>.py`` or
    ``<ipython-input-...>``), not a library's or this package's."""
    name = code.co_filename
    return name.startswith("<ipython-input") or "ipykernel_" in name


def practice(check: Callable, *args: Any, todo: str = "") -> None:
    """Run an ungraded practice check; print "passed" or its one-block failure, never raise.

    For cells that must run without error in the untouched notebook (a bug hunt before it is fixed).
    It returns nothing, so a cell that ends with it shows the verdict alone (no trailing ``True``/``False``).
    ``todo`` names the student's code the check builds on (``"BlockManager (parts 1 to 4)"``): while that
    code still raises ``NotImplementedError`` (a TODO not written yet), it prints the note
    ``show_when_ready`` prints instead of a verdict on code that is not there yet.
    """
    if not isinstance(todo, str):
        raise TypeError(f"todo must name the code the check builds on, as a str; got {type(todo).__name__}")
    try:
        check(*args)
    except NotImplementedError as error:
        print(_finish_note(todo, exercise=True) if todo else _not_yet(f"{type(error).__name__}: {_(str(error))}"))
        return
    except CheckFailed as failed:
        print(_not_yet("\n".join(failed._lines())))
        return
    except Exception as error:  # a crash in the buggy code is the bug showing, not a broken cell
        print(_not_yet(f"{type(error).__name__}: {_(str(error))}"))
        return
    name = getattr(check, "__name__", "check")
    print(_(f"{name}: passed"))


def _not_yet(what: str) -> str:
    return _("Not yet: ") + what


def show_when_ready(make: Callable[[], Any], todo: str = "the TODO above"):
    """Run ``make()`` (a picture, a table, a widget) once the student's code exists.

    While the TODO still raises ``NotImplementedError`` this prints a short note (the error's own ``note``
    when it has one) instead of a traceback, so the rest of the notebook keeps running. Any other error is
    raised as it is (same type): it points at a real bug. In IPython it shows as one block naming the error, the function
    and line where it was raised, and what to do, instead of a traceback through the package.
    """
    try:
        return make()
    except NotImplementedError as error:
        note = getattr(error, "note", None)
        print(_(note) if note else _finish_note(todo))
        return None
    except CheckFailed:
        raise
    except NameError as error:
        lines = missing_name_lines(error)
        if lines is None:
            raise
        try:
            error._render_traceback_ = lambda: lines
        except AttributeError:
            pass
        raise
    except Exception as error:
        tb = _innermost(error.__traceback__)
        where = _where(tb) if tb is not None else "?"
        todo = _(todo)
        lines = [
            f"{_RED}{_BOLD}{_('Error in what you built')}{_RESET} {type(error).__name__}: {_(str(error))}",
            field("where:", where),
            field(
                "hint:",
                _(
                    f"this cell runs {todo} on cases the visible tests may not cover: "
                    "fix it, run its cell, then run this cell again"
                ),
            ),
        ]
        try:
            error._render_traceback_ = lambda: lines
        except AttributeError:  # an exception type without a __dict__: shown as a normal traceback
            pass
        raise


def _finish_note(todo: str, exercise: bool = False) -> str:
    """What a cell built on an unwritten TODO prints instead of running: finish ``todo``, then run this cell to
    see what you built (or, for a practice cell, to try the exercise)."""
    todo = _(todo)
    if exercise:
        return _(f"Finish {todo}, run its cell again, then run this cell to try this exercise.")
    return _(f"Finish {todo}, run its cell again, then run this cell to see what you built.")


def _where(tb) -> str:
    """``function, line N`` of a traceback entry."""
    name, line = tb.tb_frame.f_code.co_name, tb.tb_lineno
    return _(f"{name}, line {line}")


# -- notebook display ------------------------------------------------------------------------------
def _innermost(tb):
    """The last entry of a traceback (where the error was raised), or None."""
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _in_package(frame) -> bool:
    """True for a frame of this package's own code (a helper the student never wrote)."""
    import os

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # paged_kv/, every layer
    return os.path.abspath(frame.f_code.co_filename).startswith(package)


def _todo_block(value, tb) -> List[str]:
    header = f"{_RED}{_BOLD}{_('TODO not written yet')}{_RESET}"
    if isinstance(value, TodoNotWritten):  # its own block, its message in the notebook's language
        first, *rest = _(str(value)).splitlines() or [""]
        return [f"{header} {first}", *rest]
    if hasattr(value, "_render_traceback_"):
        return value._render_traceback_()
    tb = _innermost(tb)
    todo = "  " + _("Write your code in its TODO cell (replacing the `raise NotImplementedError()` line),")
    again = "  " + _("run that cell, then run this cell again.")
    if tb is not None and _in_package(tb.tb_frame) and str(value):
        # raised by a course helper on the student's behalf: its message names the student's TODO
        return [f"{header} {_(str(value))}", todo, again]
    name = tb.tb_frame.f_code.co_name if tb is not None else "?"
    name = _("this cell") if name == "<module>" else name
    detail = f" ({value})" if str(value) else ""
    return [f"{header} " + _(f"{name} still raises NotImplementedError{detail}."), todo, again]


# -- a name a cell of the notebook defines, not run yet ----------------------------------------------
_NOTEBOOK_NAMES: dict = {}


def _bound_names(statements) -> set:
    """Names bound by ``statements`` and by the statements nested in their ``if``/``for``/``with``/``try``
    blocks (not inside functions or classes: those names are local)."""
    import ast

    names: set = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            names |= {
                n.id
                for item in node.items
                if item.optional_vars is not None
                for n in ast.walk(item.optional_vars)
                if isinstance(n, ast.Name)
            }
        for part in ("body", "orelse", "finalbody", "handlers"):
            names |= _bound_names(getattr(node, part, []) or [])
    return names


def _names_defined_in_notebook() -> Optional[set]:
    """Names the running notebook's code cells bind at their top level (test cells left out), read from
    the file the Jupyter server names in ``JPY_SESSION_NAME``; None when that is unknown (Colab, a script,
    nbgrader)."""
    import ast
    import json
    import os

    path = os.environ.get("JPY_SESSION_NAME", "")
    if not path.endswith(".ipynb") or not os.path.isfile(path):
        return None
    stamp = (path, os.path.getmtime(path))
    if stamp not in _NOTEBOOK_NAMES:
        names: set = set()
        try:
            with open(path, encoding="utf-8") as handle:
                cells = json.load(handle).get("cells", [])
        except (OSError, ValueError):
            return None
        for cell in cells:
            if cell.get("cell_type") != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            try:
                names |= _bound_names(ast.parse("\n".join(lines)).body)
            except SyntaxError:
                continue
        _NOTEBOOK_NAMES.clear()
        _NOTEBOOK_NAMES[stamp] = names
    return _NOTEBOOK_NAMES[stamp]


def missing_name_lines(error: NameError) -> Optional[List[str]]:
    """A short block for a ``NameError`` on a name that a cell of the notebook defines: that cell has not
    run, usually because Run All stopped at a failing test. Where the notebook file is unknown (Colab,
    nbgrader), only a name used directly in the cell gets the block, with an "if". None otherwise (an
    ``UnboundLocalError``, a typo): the normal traceback says more."""
    if isinstance(error, UnboundLocalError):
        return None
    name = getattr(error, "name", None)
    if not name:
        import re

        found = re.search(r"name '([^']+)' is not defined", str(error))
        name = found.group(1) if found else None
    if not name:
        return None
    tb = _innermost(error.__traceback__)
    in_cell = tb is None or tb.tb_frame.f_code.co_name == "<module>"
    where = [] if in_cell else [field("where:", _where(tb))]
    run_above = "  " + _("Run the cells above this one (Run > Run All Above Selected Cell), then this cell again.")
    why = "  " + _("(If you used Run All: it stops at the first test that fails, and the cells below it do not run.)")
    defined = _names_defined_in_notebook()
    if defined is None:
        if not in_cell:
            return None
        return [
            f"{_RED}{_BOLD}{_('Not defined')}{_RESET} "
            + _(f"name '{name}' is not defined. If a cell above this one defines it, that cell has not run yet:"),
            run_above,
            why,
        ]
    if name in defined:
        return [
            f"{_RED}{_BOLD}{_('Not run yet')}{_RESET} "
            + _(f"'{name}' is defined by a cell of this notebook that has not run yet."),
            *where,
            run_above,
            why,
        ]
    return None


def _todo_traceback(shell, etype, value, tb, tb_offset=None):
    """IPython handler: an unwritten TODO's ``NotImplementedError`` shown as one block naming the function,
    and a name that a cell above defines but has not run as one block saying to run the cells above.

    IPython discards a custom handler's return value, so the block is sent here as the cell's error.
    """
    if isinstance(value, NameError):
        stb = missing_name_lines(value)
        if stb is None:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
    else:
        stb = _todo_block(value, tb)
    shell._showtraceback(etype, value, stb)
    return stb


def install_notebook_hooks() -> bool:
    """Show an unwritten TODO, and a name defined by a cell above that has not run, as one short block in
    IPython (Jupyter, Colab, nbgrader); False outside IPython.

    :class:`CheckFailed` needs no hook: it renders itself through ``_render_traceback_``.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((NotImplementedError, NameError), _todo_traceback)
    return True
