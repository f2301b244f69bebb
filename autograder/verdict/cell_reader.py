"""Reading one student cell for what the provenance checks refuse (``autograder.verdict.provenance`` says what
and why): ``magic_free`` turns the cell's allowed magics into Python and lists the refused ones; ``CellReader``
walks its syntax tree and records a ``Finding`` for each refused construct; ``taints`` says which names a
module-level statement fills from a dangerous one."""

from __future__ import annotations

import ast
import re
import types
from typing import Dict, List, Optional, Sequence, Set, Tuple

from autograder.verdict.given_names import LabNames, leads_to, resolve
from autograder.verdict.notebook import ANSWER, Cell, statement_binds
from autograder.verdict.provenance_rules import (
    ALLOWED_MAGICS,
    ALLOWED_MODULES,
    BELOW,
    DENIED_ATTRIBUTES,
    DENIED_COURSE_NAMES,
    DENIED_MODULE_CALLS,
    DENIED_NAMES,
    DENIED_SUBMODULES,
    FRAME_ATTRIBUTE,
    HISTORY_NAME,
    MODEL_DUNDERS,
    TODO,
    Finding,
)


def magic_free(source: str) -> Tuple[str, List[Tuple[int, str]]]:
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


class CellReader(ast.NodeVisitor):
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
                obj = resolve(full)
                if (
                    obj is None
                    or isinstance(obj, types.ModuleType)
                    or alias.name in DENIED_COURSE_NAMES
                    or leads_to(obj, self.lab.reference_codes)
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
            if name in DENIED_NAMES or HISTORY_NAME.match(name):
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
        elif FRAME_ATTRIBUTE.match(attr) or attr in DENIED_ATTRIBUTES:
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


def taints(node: ast.stmt, dangerous: Set[str]) -> Set[str]:
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
