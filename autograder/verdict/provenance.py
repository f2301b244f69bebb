"""Read the submitted text for code that reaches the reference, the grading machinery or the kernel's internals.

The student's code runs in the grading kernel, where it can change anything; what it cannot change
is the text it was submitted as. Every cell the student wrote or added is read here, in the trusted
process, before any score is given. A finding names the cell, the line and the rule; a TODO with a
finding earns nothing, and the instructor's report lists it.

What is refused (each with the reason shown to the student):

- imports outside an allowed list (the standard library's plain-data modules, numpy, torch, triton,
  xxhash, matplotlib, ipywidgets), and any import of ``paged_kv`` beyond the names the lab's own
  setup imports; ``IPython``, ``ipykernel``, ``autograder``, ``sys``, ``os``, ``inspect``,
  ``importlib``, ``gc``, ``ctypes``, ``types``, ``builtins``, ``pickle`` and the like;
- dynamic code and introspection: ``eval``, ``exec``, ``compile``, ``__import__``, ``globals``,
  ``locals``, ``vars``, ``breakpoint``, ``getattr``/``setattr``/``delattr``/``hasattr`` with a name
  that is not a string literal, double-underscore attributes outside the data-model methods
  (``__class__``, ``__dict__``, ``__code__``, ``__globals__``, ``__mro__``, ``__subclasses__`` ...), frame,
  traceback, code and generator attributes (``f_back``, ``tb_frame``, ``co_code`` ...), ``mro()``,
  private attributes of modules (``torch._C``), loaders of pickled objects and native code;
- IPython and the kernel: ``get_ipython``, ``In``, ``Out``, ``_ih``, ``exit``, magics other than
  ``%time``/``%timeit``/``%matplotlib``, shell escapes;
- reaching the reference: reading, inside a function or class (code that runs when graded), a
  name of the lab's given cells that leads to paged_kv's implementation of a TODO (the package
  itself, its reference classes, ``with_reference_todos``) or a variable of a given or test cell
  (``_demo``, ``M``) -- directly, or through a name that a statement reading one bound;
- changing what is not yours: assigning attributes of modules, of given classes and functions
  (monkeypatching), rebinding a name the lab's setup binds, binding a TODO's name other than with
  ``def``/``class``.

``similar_to_reference`` flags, for the instructor only, a TODO whose normalised syntax tree is
nearly the reference's (students hold the package: pasting cannot be prevented, only shown).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import re
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from autograder.verdict.notebook import ANSWER, GIVEN, GRADED, Cell, python_of, statement_binds

ALLOWED_MODULES = {
    "math",
    "cmath",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "typing",
    "dataclasses",
    "enum",
    "random",
    "statistics",
    "time",
    "copy",
    "numbers",
    "fractions",
    "decimal",
    "array",
    "abc",
    "textwrap",
    "pprint",
    "re",
    "json",
    "hashlib",
    "struct",
    "contextlib",
    "warnings",
    "operator",
    "datetime",
    "numpy",
    "torch",
    "triton",
    "xxhash",
    "matplotlib",
    "ipywidgets",
    "__future__",
}
DENIED_SUBMODULES = (
    "torch.utils.cpp_extension",
    "torch.multiprocessing",
    "torch.hub",
    "torch.package",
    "torch.serialization",
    "torch.distributed",
    "torch.utils.data",
    "torch.jit",
    "torch.library",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.distutils",
    "triton.runtime",
    "triton.backends",
    "triton.compiler",
    "matplotlib.cbook",
    "ipywidgets.embed",
)
DENIED_NAMES = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "get_ipython",
    "In",
    "Out",
    "_ih",
    "_oh",
    "_dh",
    "_i",
    "_ii",
    "_iii",
    "exit",
    "quit",
    "__builtins__",
    "__builtin__",
    "__loader__",
    "__spec__",
    "__file__",
    "input",
    "help",
}
_HISTORY = re.compile(r"^_(i?\d+|_+)$")
MODEL_DUNDERS = {
    "__init__",
    "__new__",
    "__post_init__",
    "__name__",
    "__qualname__",
    "__doc__",
    "__repr__",
    "__str__",
    "__format__",
    "__len__",
    "__iter__",
    "__next__",
    "__reversed__",
    "__contains__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__missing__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
    "__bool__",
    "__call__",
    "__enter__",
    "__exit__",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__floordiv__",
    "__mod__",
    "__pow__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__index__",
    "__int__",
    "__float__",
    "__radd__",
    "__rsub__",
    "__rmul__",
    "__iadd__",
    "__isub__",
    "__matmul__",
    "__and__",
    "__or__",
    "__xor__",
}
DENIED_ATTRIBUTES = {
    "mro",
    "sys",
    "os",
    "builtins",
    "gc",
    "inspect",
    "importlib",
    "ctypes",
    "ctypeslib",
    "types",
    "subprocess",
    "modules",
    "pickle",
    "marshal",
    "threading",
    "multiprocessing",
    "signal",
    "socket",
    "attrgetter",
    "methodcaller",
    "get_type_hints",
    "load_library",
    "load_inline",
    "cpp_extension",
    "get_field",
    "f2py",
}
DENIED_MODULE_CALLS = {
    ("numpy", "load"),
    ("torch", "load"),
    ("numpy", "loads"),
    ("torch", "loads"),
    ("numpy", "fromregex"),
}
_FRAME_ATTRIBUTE = re.compile(r"^(f|tb|gi|cr|ag|co)_[a-z]+$")
DENIED_COURSE_NAMES = {"with_reference_todos", "starter"}
ALLOWED_MAGICS = {"time", "timeit", "matplotlib"}
TODO, BELOW = "todo", "below"  # a finding costs its TODO's tests, or every test below it


@dataclass
class Finding:
    """One refused construct: where (cell, line, the line's text), why, and what it costs."""

    cell_index: int
    cell_label: str
    line: int
    code: str
    rule: str
    scope: str = TODO

    def describe(self) -> str:
        return f"{self.cell_label}, line {self.line}: `{self.code}`: {self.rule}"


@dataclass
class LabNames:
    """What the given cells make of names: imports (with their paths), and which lead to the reference."""

    given: Set[str] = field(default_factory=set)  # every name a given or test cell binds
    given_imports: Dict[str, str] = field(default_factory=dict)  # name -> dotted path
    given_functions: Set[str] = field(default_factory=set)  # defs and classes of given cells
    reference_bearing: Set[str] = field(default_factory=set)  # given names leading to a reference
    module_names: Set[str] = field(default_factory=set)  # given names bound to modules
    todo_names: Set[str] = field(default_factory=set)  # names the answer cells must define
    course_paths: Set[str] = field(default_factory=set)  # paged_kv paths the given cells import
    reference_codes: Set[Any] = field(default_factory=set)  # code objects of the references


# ---- what the lab's names are -----------------------------------------------------------------------------
def lab_names(cells: Sequence[Cell], references: Iterable[Any], todo_names: Iterable[str]) -> LabNames:
    """Classify the names of the given and test cells (see ``LabNames``); ``references`` are the lab's
    reference implementations (its graders' ``@grades`` and its starters' TODOs)."""
    names = LabNames(todo_names=set(todo_names))
    reference_codes = {c for c in map(_code_of, references) if c is not None}
    names.reference_codes = reference_codes
    for cell in cells:
        if cell.kind not in (GIVEN, GRADED) or cell.tree is None:
            continue
        for node in cell.tree.body:
            for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
                if isinstance(sub, ast.Import):
                    for alias in sub.names:
                        bound = (alias.asname or alias.name).split(".")[0]
                        names.given_imports[bound] = alias.name if alias.asname else alias.name.split(".")[0]
                elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                    for alias in sub.names:
                        names.given_imports[alias.asname or alias.name] = f"{sub.module}.{alias.name}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.given_functions.add(node.name)
            names.given |= statement_binds(node)
    for name, path in names.given_imports.items():
        obj = _resolve(path)
        if isinstance(obj, types.ModuleType):
            names.module_names.add(name)
        if path.split(".")[0] == "paged_kv":
            names.course_paths.add(path)
            if (
                isinstance(obj, types.ModuleType)
                or name in DENIED_COURSE_NAMES
                or path.rsplit(".", 1)[-1] in DENIED_COURSE_NAMES
                or _leads_to(obj, reference_codes)
            ):
                names.reference_bearing.add(name)
    return names


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _code_of(obj: Any):
    for attr in ("__func__", "fget", "fn"):
        inner = getattr(obj, attr, None)
        if inner is not None and inner is not obj:
            return _code_of(inner)
    return getattr(obj, "__code__", None)


def _leads_to(obj: Any, codes: Set[Any], depth: int = 0, seen: Optional[Set[int]] = None) -> bool:
    """True when ``obj`` is a reference implementation, a class holding one, or a function that calls one."""
    seen = set() if seen is None else seen
    if obj is None or id(obj) in seen or depth > 6:
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        for klass in obj.__mro__:
            for value in vars(klass).values():
                code = _code_of(value)
                if code is not None and code in codes:
                    return True
        return False
    code = _code_of(obj)
    if code is None:
        return False
    if code in codes:
        return True
    function = getattr(obj, "__func__", obj)
    globals_ = getattr(function, "__globals__", {})
    module = getattr(function, "__module__", "") or ""
    for name in code.co_names:
        value = globals_.get(name)
        if value is None or not (getattr(value, "__module__", "") or "").startswith("paged_kv"):
            continue
        if (getattr(value, "__module__", "") or "") == module or isinstance(value, type) or callable(value):
            if _leads_to(value, codes, depth + 1, seen):
                return True
    return False


# ---- reading one cell ---------------------------------------------------------------------------------------
def _magic_free(source: str) -> Tuple[str, List[Tuple[int, str]]]:
    """The cell as Python, with allowed magics replaced by their Python; and the refused magics."""
    lines, refused = [], []
    raw = source.splitlines()
    if raw and raw[0].lstrip().startswith("%%"):
        name = raw[0].lstrip()[2:].split(maxsplit=1)[0] if raw[0].strip() != "%%" else ""
        if name in ALLOWED_MAGICS:
            return "\n".join([""] + raw[1:]), refused
        refused.append((1, raw[0].strip()))
        return "\n".join([""] * len(raw)), refused
    for number, line in enumerate(raw, 1):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("%") or stripped.startswith("!"):
            name = stripped[1:].split(maxsplit=1)[0] if len(stripped) > 1 else ""
            rest = stripped[1 + len(name) :].strip()
            if stripped.startswith("%") and name in ALLOWED_MAGICS:
                lines.append(indent + (rest if name != "matplotlib" and rest and not rest.startswith("-") else "pass"))
            else:
                refused.append((number, stripped))
                lines.append(indent + "pass")
        elif re.match(r"^\s*\w+\s*=\s*[%!]", line):  # x = !ls, x = %time f()
            refused.append((number, stripped))
            lines.append(indent + "pass")
        else:
            lines.append(line)
    return "\n".join(lines), refused


class _Reader(ast.NodeVisitor):
    """Walks one student cell and records findings (see the module doc)."""

    def __init__(self, cell: Cell, label: str, lab: LabNames, tainted: Set[str], own: Set[str], lines: List[str]):
        self.cell, self.label, self.lab, self.tainted, self.own, self.lines = cell, label, lab, tainted, own, lines
        self.findings: List[Finding] = []
        self.deferred = 0  # > 0 inside a function, lambda or class body (runs when graded)
        self.imported_modules: Set[str] = set()
        self.module_paths: Dict[str, str] = {}
        self.scopes: List[Tuple[str, Set[str]]] = []  # ("function" | "class" | "comprehension", local names)

    def _local(self, name: str) -> bool:
        """Is ``name`` a local of an enclosing function, comprehension or (directly) class body?"""
        for depth, (kind, names) in enumerate(reversed(self.scopes)):
            if kind == "class" and depth > 0:
                continue  # a method does not see its class body's names
            if name in names:
                return True
        return False

    # -- reporting
    def flag(self, node: ast.AST, rule: str, scope: str = TODO) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if self.cell.kind != ANSWER:
            scope = BELOW
        self.findings.append(Finding(self.cell.index, self.label, line, text[:160], rule, scope))

    # -- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(node, alias.name, alias.asname or alias.name.split(".")[0], alias.asname is not None)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, "relative imports are not allowed in a graded notebook", BELOW)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, "`import *` hides what the cell uses: import names one by one", BELOW)
                continue
            full = f"{module}.{alias.name}"
            bound = alias.asname or alias.name
            if module.split(".")[0] == "paged_kv":
                obj = _resolve(full)
                if (
                    obj is None
                    or isinstance(obj, types.ModuleType)
                    or alias.name in DENIED_COURSE_NAMES
                    or _leads_to(obj, self.lab.reference_codes)
                ):
                    self.flag(
                        node,
                        f"imports {full} from the course package, which leads to paged_kv's "
                        "implementation of a TODO: use the lab's given code and your own",
                    )
                continue
            self._import(node, module, None, False, check_only=True)
            self._rebinds_import(node, bound, full)
        self.generic_visit(node)

    def _import(self, node, path: str, bound: Optional[str], aliased: bool, check_only: bool = False) -> None:
        top = path.split(".")[0]
        if top == "paged_kv":
            self.flag(
                node,
                f"imports {path}: the course package's implementation is not yours to use; the lab's "
                "setup imports what you need",
            )
            return
        if (
            top not in ALLOWED_MODULES
            or any(path == d or path.startswith(d + ".") for d in DENIED_SUBMODULES)
            or any(part.startswith("_") for part in path.split(".")[1:])
        ):
            scope = (
                BELOW
                if top
                in (
                    "IPython",
                    "ipykernel",
                    "autograder",
                    "sys",
                    "gc",
                    "ctypes",
                    "importlib",
                    "builtins",
                    "inspect",
                    "types",
                    "os",
                )
                else TODO
            )
            self.flag(
                node,
                f"imports {path}, which a graded notebook may not use (it can reach the grading "
                "machinery or the reference): the lab needs only Python, numpy, torch and triton",
                scope,
            )
            return
        if not check_only and bound:
            self.imported_modules.add(bound)
            self.module_paths[bound] = path if aliased else top
            self._rebinds_import(node, bound, path if aliased else top)

    def _rebinds_import(self, node, bound: str, path: str) -> None:
        """Replacing a name the lab's setup imports (``triton``, ``torch``, ``Request``) changes what the
        given code and the lab's launchers run: only the same import again is allowed."""
        given = self.lab.given_imports.get(bound)
        if given is not None and given != path and not self.deferred:
            self.flag(node, f"rebinds `{bound}`, which the lab's setup imports ({given}), to {path}", BELOW)

    # -- names
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if isinstance(node.ctx, ast.Load) and self._local(name):
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not self.deferred and name in self.lab.given_imports:
            self.flag(node, f"rebinds `{name}`, which the lab's setup imports ({self.lab.given_imports[name]})", BELOW)
            return
        if isinstance(node.ctx, ast.Load):
            if name in DENIED_NAMES or _HISTORY.match(name):
                what = (
                    "IPython's internals"
                    if name in ("get_ipython", "In", "Out") or name.startswith("_")
                    else "dynamic code or the kernel"
                )
                self.flag(node, f"uses `{name}` ({what}): not allowed in a graded notebook", BELOW)
            elif self.deferred and name not in self.own:
                if name in self.lab.reference_bearing:
                    self.flag(
                        node,
                        f"uses `{name}` inside your code: it leads to paged_kv's implementation of a "
                        "TODO, which earns nothing (write it yourself)",
                    )
                elif (
                    name in self.lab.given
                    and name not in self.lab.given_imports
                    and name not in self.lab.given_functions
                ):
                    self.flag(
                        node,
                        f"uses `{name}`, a variable of a given or test cell, inside your code: "
                        "make your own objects instead",
                    )
                elif name in self.tainted:
                    self.flag(
                        node,
                        f"uses `{name}`, which holds something taken from a given or test cell's "
                        "objects: write your TODO from your own code only",
                    )

    # -- attributes
    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.attr, node.value, isinstance(node.ctx, (ast.Store, ast.Del)))
        self.generic_visit(node)

    def _attribute(self, node, attr: str, value: ast.AST, store: bool) -> None:
        root = _root(value)
        if attr.startswith("__") and attr.endswith("__") and attr not in MODEL_DUNDERS:
            self.flag(node, f"reads `.{attr}` (introspection): it can reach code that is not yours", BELOW)
        elif _FRAME_ATTRIBUTE.match(attr) or attr in DENIED_ATTRIBUTES:
            self.flag(
                node, f"reads `.{attr}` (frames, code objects or modules): not allowed in a graded notebook", BELOW
            )
        elif attr.startswith("_") and root in (self.lab.module_names | self.imported_modules):
            self.flag(node, f"reads `{root}.{attr}`, a private part of a library", BELOW)
        elif (
            root in self.lab.module_names | self.imported_modules
            and (self._module_path(root), attr) in DENIED_MODULE_CALLS
        ):
            self.flag(node, f"`{root}.{attr}` loads pickled objects, which can run any code", BELOW)
        if (
            store
            and root is not None
            and root not in self.own
            and root not in ("self", "cls")
            and not self._local(root)
            and (root in self.lab.given or root in self.imported_modules)
        ):
            self.flag(
                node,
                f"changes `{root}`'s attribute `{attr}`: monkeypatching a library, a given class or "
                "the course package is not allowed",
                BELOW,
            )

    def _module_path(self, name: Optional[str]) -> str:
        path = self.module_paths.get(name or "") or self.lab.given_imports.get(name or "", name or "")
        return path.split(".")[0]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node.value)
            if root is not None and root not in self.own and not self._local(root) and root in self.lab.given_imports:
                self.flag(node, f"changes the contents of `{root}`, which the lab's setup imports", BELOW)
        self.generic_visit(node)

    # -- calls
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "delattr", "hasattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(
                    node,
                    f"{func.id}() with a computed name hides which attribute it reaches: use a string "
                    "literal (or the attribute itself)",
                    BELOW,
                )
            elif node.args:
                self._attribute(node, name.value, node.args[0], func.id in ("setattr", "delattr"))
        self.generic_visit(node)

    # -- where code runs later
    def _deferred(self, node, extra: Sequence[ast.AST] = ()) -> None:
        for part in extra:
            self.deferred += 1
            self.visit(part)
            self.deferred -= 1
        kind = "class" if isinstance(node, ast.ClassDef) else "function"
        self.scopes.append((kind, _scope_locals(node)))
        self.deferred += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.deferred -= 1
        self.scopes.pop()

    def _comprehension(self, node) -> None:
        names = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append(("comprehension", names))
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _defines(self, node) -> None:
        if not self.deferred and node.name in self.lab.given_imports:
            self.flag(
                node,
                f"redefines `{node.name}`, which the lab's setup imports ({self.lab.given_imports[node.name]})",
                BELOW,
            )

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._defines(node)
        self._deferred(
            node,
            [
                *node.decorator_list,
                *node.args.defaults,
                *[d for d in node.args.kw_defaults if d],
                *([node.returns] if node.returns else []),
                *[a.annotation for a in node.args.args if a.annotation],
            ],
        )

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._deferred(node, [*node.args.defaults])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._defines(node)
        self._deferred(node, [*node.decorator_list, *node.bases, *[k.value for k in node.keywords]])


def _scope_locals(node: ast.AST) -> Set[str]:
    """The names local to a function, lambda or class body: its parameters and what its own body binds
    (not the bodies of functions nested in it), minus names declared ``global``/``nonlocal``."""
    names: Set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                names.add(a.arg)
    body = node.body if isinstance(node.body, list) else [node.body]
    declared: Set[str] = set()
    stack = list(body)
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.Global, ast.Nonlocal)):
            declared |= set(current.names)
            continue
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(current.name)
            continue
        if isinstance(current, ast.Lambda):
            continue
        if isinstance(current, ast.Name) and isinstance(current.ctx, (ast.Store, ast.Del)):
            names.add(current.id)
        elif isinstance(current, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in current.names}
        elif isinstance(current, ast.ExceptHandler) and current.name:
            names.add(current.name)
        elif isinstance(current, ast.NamedExpr) and isinstance(current.target, ast.Name):
            names.add(current.target.id)
        stack.extend(ast.iter_child_nodes(current))
    return names - declared


def _root(node: ast.AST) -> Optional[str]:
    """``a`` for ``a.b``, ``a[1].b``, ``a.b(...).c``; ``self`` for ``super().x``; None otherwise."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        return "self" if node.id == "super" else node.id
    return None


def _taints(node: ast.stmt, dangerous: Set[str]) -> Set[str]:
    """Names a module-level statement binds or changes when it reads a dangerous name (at module level:
    what a function or class body reads is checked where it is read)."""
    from autograder.verdict.notebook import _module_level_nodes

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return set()
    reads = {n.id for n in _module_level_nodes(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if not reads & dangerous:
        return set()
    out = statement_binds(node)
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(getattr(sub, "ctx", None), ast.Store):
            root = _root(sub)
            if root:
                out.add(root)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            root = _root(sub.func.value)
            if root:
                out.add(root)
    return out


# ---- the whole submission ------------------------------------------------------------------------------------
def check_submission(cells: Sequence[Cell], lab: LabNames) -> List[Finding]:
    """Every finding in the student's cells (answer cells and added cells), in notebook order; and, for a
    test cell that reads a name some statement filled from a given cell's objects, that statement."""
    findings: List[Finding] = []
    tainted: Dict[str, Finding] = {}
    own: Set[str] = set()
    for cell in cells:
        if cell.kind == GRADED and cell.tree is not None:
            from autograder.verdict.notebook import free_names

            for name in sorted(free_names(cell.tree) & set(tainted)):
                origin = tainted[name]
                findings.append(
                    Finding(
                        origin.cell_index,
                        origin.cell_label,
                        origin.line,
                        origin.code,
                        f"gives `{name}`, which the tests use, something taken from a given or "
                        "test cell's objects (paged_kv's implementation earns nothing)",
                        BELOW,
                    )
                )
            continue
        if not cell.student:
            continue
        label = (
            f"your answer cell `{cell.grade_id}`"
            if cell.kind == ANSWER and cell.grade_id
            else f"your cell #{cell.index + 1}" + (" (added)" if cell.kind != ANSWER else "")
        )
        source, refused = _magic_free(cell.source)
        lines = cell.source.splitlines()
        for number, text in refused:
            findings.append(
                Finding(
                    cell.index,
                    label,
                    number,
                    text[:160],
                    "IPython magics and shell commands (other than %time, %timeit, %matplotlib) "
                    "are not allowed in a graded notebook",
                    BELOW,
                )
            )
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # a syntax error defines nothing: the tests fail on their own
        reader = _Reader(cell, label, lab, set(tainted), own, lines)
        variables = {n for n in lab.given if n not in lab.given_imports and n not in lab.given_functions}
        for node in tree.body:  # statement by statement: a name a statement taints is tainted below it
            reader.visit(node)
            line = getattr(node, "lineno", 0)
            for name in _taints(node, (lab.reference_bearing | variables | set(tainted)) - own):
                text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
                tainted.setdefault(name, Finding(cell.index, label, line, text[:160], "", BELOW))
                reader.tainted.add(name)
                own.discard(name)
            own |= statement_binds(node) - lab.given - set(tainted)
        findings += reader.findings
        findings += _todo_bindings(cell, tree, lab, label, lines)
    return _unique(findings)


def _unique(findings: List[Finding]) -> List[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.cell_index, f.line, f.rule)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _todo_bindings(cell: Cell, tree: ast.Module, lab: LabNames, label: str, lines: List[str]) -> List[Finding]:
    """A TODO's name bound by anything but ``def``/``class`` (an assignment, an import, a loop)."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in sorted(statement_binds(node) & lab.todo_names):
            line = getattr(node, "lineno", 0)
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            out.append(
                Finding(
                    cell.index,
                    label,
                    line,
                    text[:160],
                    f"binds the TODO's name `{name}` without def or class: write the TODO as code",
                    TODO if cell.kind == ANSWER else BELOW,
                )
            )
    return out


# ---- pasted reference code (reported, not penalised) ---------------------------------------------------------
def normalized_tokens(function: ast.AST) -> List[str]:
    """A function's syntax as a token list with names, constants and docstrings erased."""
    node = _strip_docstrings(ast.parse(ast.unparse(function)))
    tokens: List[str] = []
    for sub in ast.walk(node):
        tokens.append(type(sub).__name__)
        if isinstance(sub, ast.Attribute):
            tokens.append("." + sub.attr)
        elif isinstance(sub, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.AugAssign)):
            tokens.append(type(getattr(sub, "op", None) or sub.ops[0]).__name__)
    return tokens


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def similar_to_reference(
    cells: Sequence[Cell], references: Iterable[Any], threshold: float = 0.92
) -> List[Tuple[str, str, float]]:
    """``(TODO function, reference, similarity)`` for each written TODO whose body is nearly a reference's."""
    refs = {}
    for ref in references:
        code = _code_of(ref)
        if code is None:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(getattr(ref, "__func__", getattr(ref, "fget", ref))))
            refs[code.co_name] = (f"{getattr(ref, '__qualname__', code.co_name)}", normalized_tokens(ast.parse(source)))
        except (OSError, TypeError, SyntaxError):
            continue
    out = []
    for cell in cells:
        if cell.kind != ANSWER or cell.tree is None:
            continue
        for node in ast.walk(cell.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in refs:
                name, tokens = refs[node.name]
                mine = normalized_tokens(node)
                if len(mine) < 12:
                    continue
                ratio = difflib.SequenceMatcher(None, mine, tokens, autojunk=False).ratio()
                if ratio >= threshold:
                    out.append((node.name, name, round(ratio, 3)))
    return out


def python(source: str) -> str:  # kept for callers that want the IPython-transformed text
    return python_of(source)
