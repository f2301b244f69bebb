"""Which ``tl.dot`` a graded launch counts: those whose products reach what it stores (issue 47).

A GPU build holds every ``tl.dot`` of a kernel's text, those behind a branch no launch takes included, so a rule
that counts the build's dots rewards code that never runs. Here a graded launch is run once more with every
``tl.dot`` call of the student's text (and of the ``@triton.jit`` functions it calls) replaced by ``COUNTED_DOT``:
the same product, multiplied by ``PRODUCT_SCALE`` (0.5: exact in binary floating point) when it is a tensor-core
dot of the tiles the caller names (16-bit inputs, fp32 accumulation, ``(M, K, N)`` among ``shapes``), and left as
it is otherwise; an ``acc`` argument is added after, unscaled. A kernel whose products all come from such dots
then stores what its products, halved, give (lab 06: ``PRODUCT_SCALE`` x the attention at ``PRODUCT_SCALE`` x the
scale); one whose products come from anywhere else stores what it stored before, however many dots its text
holds behind a branch no launch takes, in a loop that runs no time, discarded by ``tl.where``, multiplied by 0,
cancelled by another, or never stored.

The rewrite is of the text alone, and it fails in one direction: a dot it does not recognise (``tl.dot`` reached
through an alias) stays unscaled, which can only cost the kernel its points, never earn them. What it cannot
stop: a kernel that runs a dot on values it knows, learns the scale from it and rescales a product it computed
elsewhere (written against this grader on purpose; it still runs its dots on the tensor cores).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from typing import Any, Dict, List, Sequence, Tuple

PRODUCT_SCALE = 0.5
COUNTED_DOT = "_pkv_counted_dot"
Shape = Tuple[int, int, int]  # (M, K, N): an M x K tile times a K x N tile
_SIXTEEN_BIT = "(x.dtype == tl.float16 or x.dtype == tl.bfloat16)"


def counted_dot_source(shapes: Sequence[Shape]) -> str:
    """The ``@triton.jit`` function every ``tl.dot`` call is rewritten to (it takes ``tl.dot``'s parameters)."""
    shapes = _checked(shapes)
    tiles = " or ".join(
        f"(input.shape[0] == {m} and input.shape[1] == {k} and other.shape[1] == {n})" for m, k, n in shapes
    )
    return textwrap.dedent(
        f"""\
        @triton.jit
        def {COUNTED_DOT}(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
                          out_dtype: tl.constexpr = tl.float32):
            if input_precision is not None:
                product = tl.dot(input, other, input_precision=input_precision,
                                 max_num_imprecise_acc=max_num_imprecise_acc, out_dtype=out_dtype)
            elif allow_tf32 is not None:
                product = tl.dot(input, other, allow_tf32=allow_tf32, max_num_imprecise_acc=max_num_imprecise_acc,
                                 out_dtype=out_dtype)
            else:
                product = tl.dot(input, other, max_num_imprecise_acc=max_num_imprecise_acc, out_dtype=out_dtype)
            if (len(input.shape) == 2 and ({tiles}) and {_SIXTEEN_BIT.replace("x.", "input.")}
                    and {_SIXTEEN_BIT.replace("x.", "other.")} and product.dtype == tl.float32):
                product = product * {PRODUCT_SCALE!r}
            if acc is not None:
                product = product + acc
            return product
        """
    )


def _checked(shapes: Sequence[Shape]) -> List[Shape]:
    out = []
    for shape in shapes:
        if not (isinstance(shape, tuple) and len(shape) == 3 and all(type(s) is int and s > 0 for s in shape)):
            raise ValueError(f"a counted tile shape is (M, K, N), three positive ints; got {shape!r}")
        out.append(shape)
    if not out:
        raise ValueError("name at least one counted tile shape (M, K, N)")
    return out


def _is_tl_dot(func: ast.expr) -> bool:
    chain = []
    node = func
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    chain.append(node.id)
    return chain[::-1] in (["tl", "dot"], ["triton", "language", "dot"])


class _CountDots(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if _is_tl_dot(node.func):
            node.func = ast.copy_location(ast.Name(id=COUNTED_DOT, ctx=ast.Load()), node.func)
        return node


def counted_text(text: str) -> str:
    """``text`` (one definition, as the compile box receives it) with every ``tl.dot(...)`` call made a call of
    ``COUNTED_DOT`` with the same arguments; a text without one comes back as it is."""
    tree = ast.parse(text)
    if not any(isinstance(n, ast.Call) and _is_tl_dot(n.func) for n in ast.walk(tree)):
        return text
    return ast.unparse(ast.fix_missing_locations(_CountDots().visit(tree)))


def counted_sources(sources: Sequence[str], shapes: Sequence[Shape]) -> List[str]:
    """The compile box's definitions with their dots counted, and ``COUNTED_DOT`` last (so that a student's function
    of that name, which would be defined before, is replaced by it)."""
    return [counted_text(text) for text in sources] + [counted_dot_source(shapes)]


def counted_twin(kernel: Any, shapes: Sequence[Shape]) -> Any:
    """A kernel of this process (a test's, a catalogue's) made again from its source with its dots counted, and the
    ``@triton.jit`` functions it calls with theirs: what the compile box does with a submission's text."""
    fn = getattr(kernel, "fn", None)
    if not callable(fn):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    reached_all = _jit_functions_reached(kernel)
    namespace: Dict[str, Any] = {}
    for reached in reversed(reached_all):  # the kernel's own globals last: they win where two modules differ
        namespace.update(reached.fn.__globals__)
    for number, reached in enumerate(reached_all):
        source = textwrap.dedent(inspect.getsource(reached.fn))
        _define(namespace, counted_text(source), f"<dots counted {number}: {reached.fn.__name__}>")
    _define(namespace, counted_dot_source(shapes), f"<{COUNTED_DOT}>")
    return namespace[fn.__name__]


def _jit_functions_reached(kernel: Any) -> List[Any]:
    """``kernel`` and every ``@triton.jit`` function of student code its globals lead to, each once."""
    found, todo = [], [kernel]
    while todo:
        current = todo.pop()
        if any(current is f for f in found):
            continue
        found.append(current)
        for name in current.fn.__code__.co_names:
            value = current.fn.__globals__.get(name)
            if type(value).__name__ in ("InterpretedFunction", "JITFunction") and _is_student_code(value):
                todo.append(value)
    return found


def _is_student_code(value: Any) -> bool:
    module = getattr(value.fn, "__module__", "") or ""
    return not module.startswith(("triton", "paged_kv"))


def _define(namespace: Dict[str, Any], source: str, filename: str) -> None:
    # Triton reads a kernel's source through inspect (linecache), as it does for a notebook cell's.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - a kernel of this process, made again
