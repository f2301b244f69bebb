"""Is a kernel's whole text Triton? Read before anything is built or launched (issue 35).

The grader builds a submitted ``@triton.jit`` kernel for sm_90 and launches its *source* in Triton's
interpreter. The two read an ``if`` differently: the compiler resolves a condition that is not a tensor
when it builds and never visits the other branch, while the interpreter runs the kernel as Python. So a
kernel written as ``if hasattr(k_cache_ptr.handle, "data"): <Python and torch> else: <trivial>`` builds
as the trivial code and runs as the Python. Here every line of the kernel, both branches of every ``if``
and ``... if ... else ...``, must be Triton code:

- statements the Triton compiler lowers: assignments (one target), ``for`` over ``range``/``tl.range``/
  ``tl.static_range`` and ``while`` (without ``else``), ``if``, ``return``, ``assert``, ``pass``, and the
  stub's ``raise NotImplementedError()``; no ``import``, ``def``, ``class``, ``lambda``, ``try``,
  ``with``, ``global``, ``del``, ``break``, ``continue``;
- names bound in the kernel (its parameters and variables), ``tl`` and ``triton``, the other
  ``@triton.jit`` functions of the student's cells, globals made with ``tl.constexpr(<a literal>)``, and
  the builtins the Triton compiler accepts except introspection: ``range``, ``min``, ``max``, ``float``,
  ``int``, ``len``, ``list``, ``print`` (the compiler also accepts ``isinstance``, ``getattr`` and
  ``hasattr``, and those are exactly what a test the compiler and the interpreter see differently needs);
- attributes: ``tl.X`` for X in ``triton.language.__all__`` (but ``extra`` and ``target_info``, whose
  answers depend on the target), ``tl.math.X``, ``triton.language.X`` as ``tl.X``, ``triton.cdiv`` and
  ``triton.next_power_of_2``; on any other value the public API of ``tl.tensor`` and of Triton's dtypes
  (``.dtype``, ``.shape``, ``.T``, ``.to``, ``.element_ty``, ...), never ``.handle``, ``.data``,
  ``.item``, ``.tolist``, ``.numpy`` or a name that starts with ``_``;
- no string (a docstring included) with a line that starts with ``def``: the compiler reads a kernel's source
  from its first ``def`` line, the interpreter from its last, so a docstring can hold a whole other function
  that only the interpreter runs;
- operators the compiler lowers: arithmetic, comparisons (one at a time; ``is`` only against ``None``:
  the compiler compares a specialised ``1`` with ``is``, the interpreter a tensor), ``and``/``or``/
  ``not``, subscripts; f-strings only as a message (``print``, ``tl.static_assert``, ``assert``).

``why_not_triton`` answers with the line and the rule, or ``''``. The language's names are in
``autograder.verdict.triton_names``: the builtins, the dtype API and the tensor API are fixed lists, reviewed
against Triton 3.7's code generator (``builtin_namespace``) and ``dir(tl.tensor)``; the ``tl`` names come from the
installed Triton.
"""

from __future__ import annotations

import ast
from typing import Iterable, Optional, Sequence, Set

from autograder.verdict.triton_names import (
    BIN_OPS,
    BUILTINS,
    COMPARE_OPS,
    DTYPE_API,
    INTROSPECTION,
    MESSAGE_CALLS,
    MODULES,
    NEVER,
    TENSOR_API,
    TL_REFUSED,
    TRITON_FUNCTIONS,
    tl_math_names,
    tl_names,
)

ANSWER = (
    "the GPU compiler decides it once, when it builds, and the interpreter runs it as Python, so the two "
    "would run different code"
)
HINT = (
    "inside @triton.jit write only Triton: tl.* operations, arithmetic and comparisons on tensors, "
    "range/tl.static_range loops, min/max, and the tensor's own API (.to, .dtype, .shape); a global must be "
    "tl.constexpr(<a literal>)"
)


def bound_names(node: ast.FunctionDef) -> Set[str]:
    """The names a kernel binds: its parameters, what it assigns, its loop and comprehension targets."""
    args = node.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
            names.add(inner.id)
    return names


class _Refused(Exception):
    def __init__(self, node: ast.AST, rule: str):
        super().__init__(rule)
        self.node, self.rule = node, rule


def why_not_triton(
    node: ast.FunctionDef, kernels: Iterable[str] = (), constants: Iterable[str] = (), lines: Sequence[str] = ()
) -> str:
    """Why ``node``'s text is not all Triton (``"line N of its cell: `code`: rule"``), or ``''``.

    ``kernels``: the names of the student's ``@triton.jit`` functions; ``constants``: the globals bound to
    ``tl.constexpr(<a literal>)``; ``lines``: the cell's lines (the code shown is that line, else the construct)."""
    checker = _Checker(node, set(kernels), set(constants))
    try:
        checker.check()
    except _Refused as refused:
        line = getattr(refused.node, "lineno", node.lineno)
        if 0 < line <= len(lines) and lines[line - 1].strip():
            code = lines[line - 1].strip()
        else:
            code = (ast.unparse(refused.node).splitlines() or [""])[0]  # a compound statement's first line
        return f"line {line} of its cell: `{code[:100]}`: {refused.rule}"
    return ""


class _Checker:
    def __init__(self, node: ast.FunctionDef, kernels: Set[str], constants: Set[str]):
        self.node = node
        self.kernels, self.constants = kernels, constants
        self.bound = bound_names(node)
        self.messages: Set[int] = set()  # ids of f-strings that are a message

    def check(self) -> None:
        for name in sorted(self.bound):
            if name in MODULES or name == "range":  # the rules below read these as Triton's
                where = next(
                    (
                        n
                        for n in ast.walk(self.node)
                        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                    ),
                    self.node,
                )
                raise _Refused(
                    where, f"a kernel may not rebind `{name}`: it would no longer be what Triton gives that name"
                )
        self.statements(self.node.body)

    # ---- statements -----------------------------------------------------------------------------------
    def statements(self, body) -> None:
        for statement in body:
            self.statement(statement)

    def statement(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise _Refused(s, "one target per assignment (`a = b = x` is not Triton)")
            self.target(s.targets[0])
            self.expr(s.value)
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.op, BIN_OPS):
                raise _Refused(s, f"the operator {type(s.op).__name__} is not Triton")
            self.target(s.target, tuples=False)
            self.expr(s.value)
        elif isinstance(s, ast.AnnAssign):
            if not isinstance(s.target, ast.Name) or s.value is None:
                raise _Refused(s, "an annotated assignment names one variable and gives it a value")
            if not is_constexpr(s.annotation):
                raise _Refused(s, "a variable's only annotation in a kernel is tl.constexpr")
            self.expr(s.value)
        elif isinstance(s, ast.If):
            self.expr(s.test)
            self.statements(s.body)
            self.statements(s.orelse)
        elif isinstance(s, ast.For):
            if s.orelse:
                raise _Refused(s, "a loop's `else:` is not Triton")
            if not (isinstance(s.iter, ast.Call) and _is_range(s.iter.func)):
                raise _Refused(s, "a kernel loops over range(...), tl.range(...) or tl.static_range(...) only")
            self.target(s.target)
            self.expr(s.iter)
            self.statements(s.body)
        elif isinstance(s, ast.While):
            if s.orelse:
                raise _Refused(s, "a loop's `else:` is not Triton")
            self.expr(s.test)
            self.statements(s.body)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, ast.Assert):
            self.expr(s.test)
            if s.msg is not None:
                self.message(s.msg)
        elif isinstance(s, ast.Pass):
            pass
        elif isinstance(s, ast.Raise):
            if not (s.cause is None and s.exc is not None and _is_not_implemented(s.exc)):
                raise _Refused(s, "the only `raise` in a kernel is the stub's `raise NotImplementedError()`")
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            raise _Refused(
                s,
                "`import` is Python, not Triton: a kernel runs only Triton operations, and "
                "only the interpreter would run it",
            )
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            raise _Refused(
                s,
                "a function or class defined inside a kernel is not Triton: write a helper as "
                "its own top-level @triton.jit function",
            )
        else:
            raise _Refused(s, f"`{type(s).__name__.lower()}` is not a statement the Triton compiler lowers")

    def target(self, t: ast.expr, tuples: bool = True) -> None:
        if isinstance(t, ast.Name):
            return
        if tuples and isinstance(t, (ast.Tuple, ast.List)):
            for element in t.elts:
                self.target(element)
            return
        raise _Refused(t, "a kernel assigns to its own variables only (no attribute, item or starred target)")

    # ---- expressions ----------------------------------------------------------------------------------
    def message(self, e: ast.expr) -> None:
        if isinstance(e, ast.JoinedStr):
            self.messages.add(id(e))
        self.expr(e)

    def expr(self, e: ast.expr) -> None:
        if isinstance(e, ast.Constant):
            lines = e.value.split("\n") if isinstance(e.value, str) else []
            at = next((i for i, line in enumerate(lines) if i and line.lstrip().startswith("def ")), 0)
            if at:
                where = ast.Constant(value="def")
                where.lineno = getattr(e, "lineno", 0) + at  # that line of a triple-quoted string
                raise _Refused(
                    where,
                    "a line of a string in a kernel starts with `def`: Triton's compiler reads a "
                    "kernel from its first `def` line, the interpreter from its last, so the two "
                    "would run different code",
                )
            return
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.Attribute):
            return self.attribute(e)
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.BinOp):
            if not isinstance(e.op, BIN_OPS):
                raise _Refused(e, f"the operator {type(e.op).__name__} is not Triton (tl.dot multiplies matrices)")
            self.expr(e.left)
            return self.expr(e.right)
        if isinstance(e, ast.UnaryOp):
            return self.expr(e.operand)
        if isinstance(e, ast.BoolOp):
            for value in e.values:
                self.expr(value)
            return
        if isinstance(e, ast.Compare):
            return self.compare(e)
        if isinstance(e, ast.IfExp):
            self.expr(e.test)
            self.expr(e.body)
            return self.expr(e.orelse)
        if isinstance(e, ast.Subscript):
            self.expr(e.value)
            return self.expr(e.slice)
        if isinstance(e, ast.Slice):
            for part in (e.lower, e.upper, e.step):
                if part is not None:
                    self.expr(part)
            return
        if isinstance(e, (ast.Tuple, ast.List)):
            for element in e.elts:
                self.expr(element)
            return
        if isinstance(e, ast.ListComp):
            return self.comprehension(e)
        if isinstance(e, ast.JoinedStr):
            if id(e) not in self.messages:
                raise _Refused(
                    e,
                    "an f-string in a kernel is only a message (print, tl.static_assert, assert): "
                    f"what it makes of a value, {ANSWER}",
                )
            for value in e.values:
                if isinstance(value, ast.FormattedValue):
                    self.expr(value.value)
                    if value.format_spec is not None:
                        self.messages.add(id(value.format_spec))
                        self.expr(value.format_spec)
            return
        if isinstance(e, ast.Starred):
            raise _Refused(e, "`*` unpacks only a call's arguments in a kernel")
        raise _Refused(e, f"`{type(e).__name__}` is not an expression the Triton compiler lowers")

    def name(self, e: ast.Name) -> None:
        name = e.id
        if name in self.bound or name in MODULES or name in BUILTINS or name in self.kernels or name in self.constants:
            return
        if name in INTROSPECTION:
            raise _Refused(e, f"`{name}` is Python introspection, not Triton: {ANSWER}")
        raise _Refused(
            e,
            f"`{name}` is neither a parameter or variable of the kernel, nor tl/triton, another "
            "@triton.jit function of your cells, range/min/max/float/int/len/list/print, or a "
            "global made with tl.constexpr(<a literal>)",
        )

    def attribute(self, e: ast.Attribute) -> None:
        chain = _module_chain(e, self.bound)
        if chain is not None:
            return self.module_attribute(e, chain)
        self.expr(e.value)
        attr = e.attr
        if attr.startswith("_") or attr in NEVER or attr not in TENSOR_API | DTYPE_API:
            raise _Refused(
                e,
                f"`.{attr}` is not part of a Triton tensor's or dtype's API (.dtype, .shape, .T, "
                ".to(...), .element_ty, ...): on the interpreter's tensors it reaches Python objects "
                "that a compiled kernel does not have",
            )

    def module_attribute(self, e: ast.Attribute, chain: list) -> None:
        """``tl.X[.Y]`` / ``triton.language.X[.Y]`` / ``triton.cdiv``: the language's own names."""
        head, rest = chain[0], chain[1:]
        if head == "triton":
            if rest[:1] == ["language"]:
                rest = rest[1:]
                if not rest:
                    raise _Refused(
                        e, "use triton.language's functions and types (tl.load, tl.float32), not the module as a value"
                    )
            elif len(rest) == 1 and rest[0] in TRITON_FUNCTIONS:
                return
            else:
                raise _Refused(
                    e,
                    f"`{'.'.join(chain)}` is not part of the Triton language: inside a kernel use "
                    "tl.* (and triton.cdiv, triton.next_power_of_2)",
                )
        first = rest[0]
        if first.startswith("_") or first not in tl_names():
            raise _Refused(
                e,
                f"`tl.{first}` is not part of the Triton language a kernel may use"
                + (" (its answer depends on the target the code is built for)" if first in TL_REFUSED else ""),
            )
        if first == "math" and len(rest) > 1:
            if rest[1] not in tl_math_names():
                raise _Refused(e, f"`tl.math.{rest[1]}` is not a function of tl.math")
            rest = rest[2:]
        else:
            rest = rest[1:]
        for attr in rest:  # tl.float32.primitive_bitwidth
            if attr.startswith("_") or attr in NEVER or attr not in TENSOR_API | DTYPE_API:
                raise _Refused(e, f"`.{attr}` is not part of a Triton dtype's or tensor's API")

    def call(self, e: ast.Call) -> None:
        is_message = _call_name(e.func) in MESSAGE_CALLS
        self.expr(e.func)
        for argument in e.args:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            self.message(value) if is_message else self.expr(value)
        for keyword in e.keywords:
            if keyword.arg is None:
                raise _Refused(e, "`**` is not Triton: name each keyword argument")
            self.message(keyword.value) if is_message else self.expr(keyword.value)

    def compare(self, e: ast.Compare) -> None:
        if len(e.ops) != 1:
            raise _Refused(e, "one comparison at a time (`a < b < c` is not Triton): use `(a < b) & (b < c)`")
        op, right = e.ops[0], e.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not any(isinstance(side, ast.Constant) and side.value is None for side in (e.left, right)):
                raise _Refused(
                    e,
                    "`is` compares with None only: on a specialised int the compiler compares a "
                    f"Python 1, the interpreter a tensor, and {ANSWER}",
                )
        elif not isinstance(op, COMPARE_OPS):
            raise _Refused(e, f"the comparison {type(op).__name__} is not Triton")
        self.expr(e.left)
        self.expr(right)

    def comprehension(self, e: ast.ListComp) -> None:
        if (
            len(e.generators) != 1
            or e.generators[0].ifs
            or e.generators[0].is_async
            or not isinstance(e.generators[0].target, ast.Name)
        ):
            raise _Refused(
                e,
                "a comprehension in a kernel has one `for` over a tuple and no `if` (the compiler "
                "ignores its `if`, the interpreter does not)",
            )
        self.expr(e.generators[0].iter)
        self.expr(e.elt)


def why_not_one_def(text: str) -> str:
    """Why a kernel's source as the compile box defines it does not have exactly one line that starts with ``def``
    (Triton's compiler reads a kernel from its first such line, the interpreter from its last), or ``''``."""
    if sum(line.lstrip().startswith("def ") for line in text.splitlines()) == 1:
        return ""
    return (
        "its text has more than one line that starts with `def`: Triton's compiler reads a kernel from its first, "
        "the interpreter from its last"
    )


def _module_chain(e: ast.Attribute, bound: Set[str]) -> Optional[list]:
    """``["tl", "math", "exp"]`` for ``tl.math.exp`` when it starts at the module ``tl``/``triton``, else None."""
    chain = []
    node: ast.expr = e
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in MODULES and node.id not in bound:
        return [node.id] + chain[::-1]
    return None


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def is_constexpr(node: ast.expr) -> bool:
    """``tl.constexpr`` or ``triton.language.constexpr``, written as such (a string annotation is read one way by
    the compiler, another by the interpreter)."""
    chain = _module_chain(node, set()) if isinstance(node, ast.Attribute) else None
    return chain in (["tl", "constexpr"], ["triton", "language", "constexpr"])


def _is_range(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "range"
    chain = _module_chain(func, set()) if isinstance(func, ast.Attribute) else None
    return (
        chain is not None and chain[-1] in ("range", "static_range") and chain[:-1] in (["tl"], ["triton", "language"])
    )


def _is_not_implemented(exc: ast.expr) -> bool:
    if isinstance(exc, ast.Call):
        if exc.keywords or any(not isinstance(a, ast.Constant) for a in exc.args):
            return False
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
