"""Build an edition of the course package: a copy of ``paged_kv/`` whose chosen functions have no body.

``build_edition(lab, part=None)`` returns a folder holding ``paged_kv/``: the repository's package with
every function of ``manifest.stubs_for(lab, part)`` rewritten, from the source text, as a stub that keeps
its signature and docstring and raises ``TodoNotWritten`` (a Triton kernel becomes a
``paged_kv.cache.todo.stub_kernel``). Nothing is patched at run time and no comment or line of a stubbed
body survives. ``paged_kv/cache/edition.py`` says which edition it is. ``lab=None`` is the whole course.

Editions are cached by content (the package's files, the stubs, this builder's version) under
``editions_dir()``: a folder owned by this user that no other account may enter (a folder another account
could write would let it plant a package with the answers in it; one it could read would show a grading kernel
the editions of later labs, which hold the reference of its lab's TODOs). A box gets a copy of its one edition.
"""

from __future__ import annotations

import ast
import compileall
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from autograder.editions.manifest import BY_LAB, Stub, lab_index, stubs_for

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "paged_kv"
BUILDER_VERSION = "2"  # 2: with byte-code
TODO_MODULE = "_pkv_todo"  # how an edited module names paged_kv.cache.todo
LEFT_OUT = "this edition of the course package leaves it out"  # in every stub's message (the grader looks for it)
SKIPPED_PARTS = ("__pycache__", ".ipynb_checkpoints")


class EditionError(RuntimeError):
    """An edition could not be built: a stub target is missing, or the cache folder is unsafe."""


# ---- where editions live ------------------------------------------------------------------------------
def editions_dir() -> Path:
    """``PAGED_KV_EDITIONS``, else ``/var/cache/paged-kv-editions`` (root) or ``~/.cache/paged-kv-editions``;
    made if missing, refused if another user owns it or may write it."""
    chosen = os.environ.get("PAGED_KV_EDITIONS")
    if chosen:
        folder = Path(chosen)
    elif os.geteuid() == 0:
        folder = Path("/var/cache/paged-kv-editions")
    else:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "paged-kv-editions"
    folder.mkdir(parents=True, exist_ok=True)
    info = folder.lstat()
    if folder.is_symlink() or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise EditionError(
            f"{folder} must be a folder of this user that nobody else may write (owner uid "
            f"{info.st_uid}, mode {oct(info.st_mode & 0o777)}): remove it or set PAGED_KV_EDITIONS"
        )
    os.chmod(folder, 0o700)  # a kernel gets a copy of its one edition (autograder.box.kernel_lib), never this
    return folder


# ---- rewriting one module ------------------------------------------------------------------------------
def _find(tree: ast.Module, qualname: str) -> ast.AST:
    scope: Sequence[ast.stmt] = tree.body
    node: Optional[ast.AST] = None
    for name in qualname.split("."):
        node = next(
            (
                n
                for n in scope
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if node is None:
            raise EditionError(f"{qualname} is not defined at the top of its module (looking for {name!r})")
        scope = node.body
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise EditionError(f"{qualname} is a class, not a function: list its methods instead")
    return node


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (
        isinstance(target, ast.Attribute)
        and target.attr == "jit"
        and isinstance(target.value, ast.Name)
        and target.value.id == "triton"
    )


def _docstring(node: ast.AST) -> Optional[ast.stmt]:
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[0]
    return None


def stub_text(node: ast.FunctionDef, message: str) -> str:
    """The stub of ``node`` (unindented): its decorators (a ``@triton.jit`` becomes ``stub_kernel``), its
    signature, its docstring and one ``raise``."""
    kernel = any(_is_jit(d) for d in node.decorator_list)
    decorators = [d for d in node.decorator_list if not _is_jit(d)]
    mark = ast.parse(f"{TODO_MODULE}.{'stub_kernel' if kernel else 'stub'}", mode="eval").body
    raise_stmt = ast.parse(f"raise {TODO_MODULE}.TodoNotWritten({message!r})").body[0]
    doc = _docstring(node)
    made = type(node)(
        name=node.name,
        args=node.args,
        body=[s for s in (doc, raise_stmt) if s is not None],
        decorator_list=decorators + [mark],
        returns=node.returns,
        type_comment=None,
        **({"type_params": []} if "type_params" in node._fields else {}),
    )
    return ast.unparse(ast.fix_missing_locations(made))


def stub_module(source: str, targets: Sequence[Tuple[str, str]], where: str = "<module>") -> str:
    """``source`` with each ``(qualname, message)`` of ``targets`` rewritten as a stub (see ``stub_text``),
    and the import the stubs need; every other line kept as it is."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: List[Tuple[int, int, str]] = []
    for qualname, message in targets:
        node = _find(tree, qualname)
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        indent = " " * node.col_offset
        text = "".join(indent + line + "\n" if line else "\n" for line in stub_text(node, message).splitlines())
        edits.append((first - 1, node.end_lineno, text))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    at = _import_line(tree)
    lines.insert(at, f"import paged_kv.cache.todo as {TODO_MODULE}  # this edition's stubs\n")
    edited = "".join(lines)
    try:
        compile(edited, where, "exec")
    except SyntaxError as error:  # pragma: no cover - a builder bug, never a student's
        raise EditionError(f"the edition of {where} does not compile: {error}") from None
    return edited


def _import_line(tree: ast.Module) -> int:
    """Index of the line before which the stubs' import goes: after the docstring and __future__ imports."""
    at = 0
    for node in tree.body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node is tree.body[0]
        ):
            at = node.end_lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            at = node.end_lineno
        else:
            break
    return at


def message_for(stub: Stub, owner_lab: str, todo: bool, todo_names: Iterable[str]) -> str:
    number = owner_lab[:2]
    title = BY_LAB[owner_lab].title
    if todo:
        return (
            f"{stub.name} is a TODO of lab {number} ({title}): {LEFT_OUT}, so only your own code can answer "
            f"it. Write it in its answer cell, run that cell, then run this one again."
        )
    names = ", ".join(todo_names)
    return (
        f"{stub.name} ({stub.why}) computes what lab {number}'s TODO ({names}) computes, so {LEFT_OUT}: "
        f"write {names} yourself."
    )


def _messages(stubs: Sequence[Stub]) -> Dict[Stub, str]:
    out: Dict[Stub, str] = {}
    for entry in BY_LAB.values():
        for part in entry.parts:
            names = [t.name for t in part.todos]
            for s in part.todos:
                out[s] = message_for(s, entry.lab, True, names)
            for s in part.equivalents:
                out[s] = message_for(s, entry.lab, False, names)
    return {s: out[s] for s in stubs}


# ---- the whole package -------------------------------------------------------------------------------
def package_files(package: Path = PACKAGE) -> List[Path]:
    """The package's files to copy: sources and data, no caches."""
    return sorted(
        p
        for p in package.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and not any(part in SKIPPED_PARTS for part in p.relative_to(package).parts)
        and p.suffix != ".pyc"
    )


def edition_module(lab: Optional[str], part: Optional[str], stubs: Sequence[Stub]) -> str:
    return (
        f'"""Which edition of the course package this is (written by autograder.editions.build)."""\n'
        f"from typing import FrozenSet, Optional\n\n"
        f"LAB: Optional[str] = {lab!r}\nPART: Optional[str] = {part!r}\n"
        f"STUBBED: FrozenSet[str] = frozenset({sorted(s.dotted for s in stubs)!r})\n\n\n" + _DESCRIBE
    )


_DESCRIBE = '''def describe() -> str:
    """One line for a notebook's setup cell: which TODOs this copy of the package leaves out."""
    if LAB is None:
        return "the whole course (every lab's reference implementation)"
    part = f", part {PART!r} only" if PART else ""
    return f"the edition of lab {LAB}{part}: {len(STUBBED)} implementations left out (its TODOs and later labs')"
'''


def edition_sources(lab: Optional[str], part: Optional[str] = None, package: Path = PACKAGE) -> Dict[str, bytes]:
    """``{path inside paged_kv/: content}`` of the edition (``lab=None``: the package as it is)."""
    stubs = stubs_for(lab, part) if lab else []
    if part and lab:
        BY_LAB[lab].part(part)  # an unknown part says which parts there are
    messages = _messages(stubs)
    by_module: Dict[str, List[Tuple[str, str]]] = {}
    for stub in stubs:
        by_module.setdefault(stub.module, []).append((stub.qualname, messages[stub]))
    out: Dict[str, bytes] = {}
    for path in package_files(package):
        relative = path.relative_to(package).as_posix()
        data = path.read_bytes()
        if relative in by_module:
            data = stub_module(data.decode(), by_module.pop(relative), f"paged_kv/{relative}").encode()
        out[relative] = data
    if by_module:
        raise EditionError(f"stub targets in modules that do not exist: {sorted(by_module)}")
    if lab:
        out["cache/edition.py"] = edition_module(lab, part, stubs).encode()
    return out


def edition_key(sources: Dict[str, bytes]) -> str:
    digest = hashlib.sha256(BUILDER_VERSION.encode())
    for name in sorted(sources):
        digest.update(name.encode() + b"\0" + hashlib.sha256(sources[name]).digest())
    return digest.hexdigest()[:24]


def write_package(sources: Dict[str, bytes], target: Path) -> None:
    """Write ``sources`` as ``target/paged_kv/`` (folders 0755, files 0644)."""
    for relative, data in sources.items():
        path = target / "paged_kv" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, 0o644)
    # Byte-code now, for the interpreter that grades: a box reads the edition read-only, and a kernel that
    # had to compile ~50 modules at every start would pay for it on every notebook.
    compileall.compile_dir(str(target), quiet=1)
    for path in target.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(target, 0o755)


def build_edition(lab: Optional[str], part: Optional[str] = None, *, into: Optional[Path] = None) -> Path:
    """The folder that holds the edition's ``paged_kv/`` (``into``, or a cached one; see the module doc)."""
    if lab is not None:
        lab_index(lab)
    sources = edition_sources(lab, part)
    if into is not None:
        if (Path(into) / "paged_kv").exists():
            shutil.rmtree(Path(into) / "paged_kv")
        write_package(sources, Path(into))
        return Path(into)
    root = editions_dir()
    folder = root / f"{lab or 'course'}{'-' + part if part else ''}-{edition_key(sources)}"
    if folder.is_dir() and not folder.is_symlink() and folder.lstat().st_uid == os.geteuid():
        return folder
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        write_package(sources, scratch)
        try:
            os.rename(scratch, folder)
        except OSError:  # another grader built it first
            if not folder.is_dir():
                raise
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return folder
