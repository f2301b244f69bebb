"""The catalogs of the texts the course's running code shows a student: messages, hints, pictures, Grading notes.

Three sources, each extracted from the code (English is the source; the English text, or an f-string's template,
is the gettext ``msgid``: see ``paged_kv.lab.i18n``):

- **the labs' code cells**: every string literal or f-string a code cell of ``solutions/<lab>/`` passes to a text
  parameter (``TEXT_PARAMETERS``: a check's case, problem and hint, a picture's title, what ``say`` prints, ...) of
  a function of ``paged_kv.lab``, and every text it marks with ``paged_kv.lab.i18n.N_`` (a picture's series named in
  a loop). They go into the lab's catalog, ``solutions/<lab>/<language>.po``, as entries without
  ``msgctxt`` (the markdown cells' entries, keyed by cell id, are ``tools.translations``'); each entry's reference
  names the notebook and the cells that pass it.
- **the teaching aids' own texts**: every ``_(...)`` and ``N_(...)`` of ``paged_kv/lab/*.py`` (feedback's wording,
  the hints of the trace and kernel helpers, the pictures' labels), and the messages of the mechanisms below them
  (``paged_kv/cache``, ``kernels``, ``engine``: every exception made with a literal or an f-string, every
  ``assert``'s message, every ``N_`` of ``paged_kv.cache.messages``), which the teaching aids show:
  ``paged_kv/lab/locale/<language>.po``.
- **the autograder's student-facing texts**: every ``for_student(...)``, ``N_(...)`` and ``_(...)`` of the shipped
  ``autograder/`` modules (the Grading notes, what a limit shows, the hidden checks' cases, problems and hints in
  ``autograder/labs/``): ``autograder/verdict/locale/<language>.po``.

``update_lab`` (called by ``python -m tools.translations update``) and ``update_own`` bring the entries in line
with the code: a new text gets an empty entry, a text no longer used becomes obsolete (``#~``, its translation kept
for a text that comes back). ``compile_all`` writes the compiled forms the code reads at run time (gettext ``.mo``):
``paged_kv/lab/locale/<language>/LC_MESSAGES/paged_kv_course.mo`` (the teaching aids' texts and every lab's code
cells' texts: a Colab or ModelScope install has no ``solutions/``) and
``autograder/verdict/locale/<language>/LC_MESSAGES/autograder.mo``. ``python -m tools.message_catalogs status``
lists what is left to translate; ``check`` fails when a compiled form is stale.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from paged_kv.lab.i18n import N_, as_template, catalog_path  # noqa: E402

LANGUAGES = ("zh_CN",)
PACKAGE_DIR = ROOT / "paged_kv" / "lab"
MECHANISM_DIRS = [ROOT / "paged_kv" / layer for layer in ("cache", "kernels", "engine")]  # below the teaching aids
AUTOGRADER_DIR = ROOT / "autograder"
AUTOGRADER_LOCALE = AUTOGRADER_DIR / "verdict" / "locale"
AUTOGRADER_DOMAIN = "autograder"
# A code cell's argument to one of these parameters of a paged_kv.lab function is text the student reads.
TEXT_PARAMETERS = ("case", "problem", "hint", "title", "todo", "label", "ours_label", "paper_label", "message")
LABELLED_PARAMETERS = ("runs",)  # a mapping whose keys label a picture's lines: a dict literal's keys are texts
PACKAGE_MARKS = ("_", "N_")
AUTOGRADER_MARKS = ("for_student", "N_", "_")  # _: a hidden check's text (autograder.labs.checking)
EXCEPTION_CLASS = re.compile(r"[A-Z]\w*(Error|Exception)$")  # a class a mechanism's message is made with
CODE_STRING = "code-string"  # the flag-free comment that says an entry of a lab's catalog is a code cell's text


@dataclass(frozen=True)
class Message:
    """One text to translate: its template (the msgid), where it is used, and how."""

    msgid: str
    where: str
    note: str = ""


# -- templates from code ------------------------------------------------------------------------------------
def _field(node: ast.FormattedValue) -> str:
    text = ast.unparse(node.value)
    if node.conversion != -1:
        text += "!" + chr(node.conversion)
    if node.format_spec is not None:
        text += ":" + "".join(
            as_template(part.value) if isinstance(part, ast.Constant) else "{" + _field(part) + "}"
            for part in node.format_spec.values
        )
    return text


def template_of(node: ast.AST) -> Optional[str]:
    """The template of a string literal or an f-string (its fields as written); None for anything else.
    Implicitly concatenated pieces are one string already; ``"a" + "b"`` of literals is read as one text too."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return as_template(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            as_template(part.value) if isinstance(part, ast.Constant) else "{" + _field(part) + "}"
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template_of(node.left), template_of(node.right)
        return None if left is None or right is None else left + right
    return None


def _calls(tree: ast.AST) -> List[ast.Call]:
    """The calls in ``tree``, in the order of the source."""
    return sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def marked_texts(source: str, marks: Tuple[str, ...], where: str) -> List[Message]:
    """The texts ``source`` passes as first argument to a call of one of ``marks``. A call of ``_`` on another
    expression translates a text marked elsewhere (a code cell's, or an ``N_`` constant's); ``N_`` itself
    needs a literal."""
    found = []
    for node in _calls(ast.parse(source)):
        if _callee(node) in marks and node.args:
            template = template_of(node.args[0])
            if template is None and _callee(node) != "N_":
                continue
            if template is None:
                raise ValueError(
                    f"{where}:{node.lineno}: N_() marks a string literal or an f-string, so that its text can be "
                    "extracted"
                )
            if template.strip():
                found.append(Message(template, where))
    return found


def mechanism_texts(source: str, where: str) -> List[Message]:
    """The messages ``source`` (a module of the mechanisms) gives its exceptions: the first argument of every
    exception class it calls (``ValueError(f"...")``, raised or returned), when a literal or an f-string; every
    ``assert``'s message; every ``N_`` text (``paged_kv.cache.messages``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        text = None
        if (
            isinstance(node, ast.Call)
            and node.args
            and (EXCEPTION_CLASS.fullmatch(_callee(node)) or _callee(node) == "N_")
        ):
            text = template_of(node.args[0])
        elif isinstance(node, ast.Assert) and node.msg is not None:
            text = template_of(node.msg)
        if text and text.strip():
            found.append(Message(text, f"{where}:{node.lineno}"))
    return sorted(found, key=lambda m: int(m.where.rpartition(":")[2]))


def package_messages() -> List[Message]:
    """The teaching aids' own texts (``paged_kv/lab/*.py``), then the mechanisms' messages they show."""
    found = []
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        if path.name != "i18n.py":
            found += marked_texts(path.read_text(encoding="utf-8"), PACKAGE_MARKS, str(path.relative_to(ROOT)))
    for path in sorted(p for folder in MECHANISM_DIRS for p in folder.glob("*.py")):
        where = str(path.relative_to(ROOT))
        found += [Message(m.msgid, where) for m in mechanism_texts(path.read_text(encoding="utf-8"), where)]
    return found


def autograder_messages() -> List[Message]:
    """The autograder's student-facing texts (its shipped modules; tests left out)."""
    found = []
    for path in sorted(AUTOGRADER_DIR.rglob("*.py")):
        parts = path.relative_to(AUTOGRADER_DIR).parts
        if "tests" in parts or "work" in parts or parts[-1] == "student_text.py":
            continue
        found += marked_texts(path.read_text(encoding="utf-8"), AUTOGRADER_MARKS, str(path.relative_to(ROOT)))
    return found


# -- the labs' code cells -----------------------------------------------------------------------------------
def _lab_functions() -> Dict[str, Dict[str, Callable]]:
    """``{module: {name: callable}}`` for the public functions and classes of every ``paged_kv.lab`` module."""
    import importlib
    import pkgutil

    import paged_kv.lab

    table: Dict[str, Dict[str, Callable]] = {}
    for info in pkgutil.iter_modules(paged_kv.lab.__path__):
        name = f"paged_kv.lab.{info.name}"
        module = importlib.import_module(name)
        table[name] = {k: v for k, v in vars(module).items() if callable(v) and not k.startswith("__")}
    return table


def _imports(tree: ast.AST, known: Dict[str, Dict[str, Callable]], names: Dict[str, Callable], modules: Dict) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name): None for a in node.names if (a.asname or a.name) not in names})
        if isinstance(node, ast.ImportFrom) and node.module in known:
            for alias in node.names:
                if alias.name in known[node.module]:
                    names[alias.asname or alias.name] = known[node.module][alias.name]
        elif isinstance(node, ast.ImportFrom) and node.module == "paged_kv.lab":
            for alias in node.names:
                if f"paged_kv.lab.{alias.name}" in known:
                    modules[alias.asname or alias.name] = known[f"paged_kv.lab.{alias.name}"]


def _text_arguments(node: ast.Call, function: Callable) -> Iterable[Tuple[str, ast.AST]]:
    """``(parameter, argument)`` for each argument of ``node`` bound to a text parameter of ``function``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    params = list(signature.parameters.values())
    bound = []
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            bound.append((params[i].name, arg))
    bound += [(k.arg, k.value) for k in node.keywords if k.arg]
    return [(name, arg) for name, arg in bound if name in TEXT_PARAMETERS + LABELLED_PARAMETERS]


def code_cells(notebook: Path) -> List[Tuple[str, str]]:
    """``(cell id, Python source)`` of each code cell (IPython's magics made Python)."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    nb = nbformat.read(notebook, as_version=4)
    return [(c.get("id", ""), transform(c.source)) for c in nb.cells if c.cell_type == "code"]


def _assignments(tree: ast.AST) -> Dict[str, List[ast.AST]]:
    """``{name: [value, ...]}`` for every ``name = value`` in ``tree`` (at any depth)."""
    found: Dict[str, List[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node.value)
    return found


def _templates(node: ast.AST, assigned: Dict[str, List[ast.AST]], depth: int = 0) -> List[str]:
    """The templates ``node`` can stand for: itself, or what a name assigned in the same cell is set to, or a
    ``+`` of such pieces (each combination)."""
    template = template_of(node)
    if template is not None:
        return [template]
    if depth > 4:
        return []
    if isinstance(node, ast.Name):
        return [t for value in assigned.get(node.id, []) for t in _templates(value, assigned, depth + 1)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _templates(node.left, assigned, depth + 1), _templates(node.right, assigned, depth + 1)
        return [a + b for a in left for b in right]
    return []


def _keys(node: ast.AST, assigned: Dict[str, List[ast.AST]]) -> List[str]:
    """The templates of the keys of a dict literal, or of the dict literals a name is assigned in the cell."""
    dicts = [node] if isinstance(node, ast.Dict) else assigned.get(getattr(node, "id", ""), [])
    return [t for d in dicts if isinstance(d, ast.Dict) for k in d.keys if k is not None for t in [template_of(k)] if t]


def cell_messages(notebook: Path, unread: Optional[List[str]] = None) -> List[Message]:
    """The texts the code cells of ``notebook`` pass to text parameters of the teaching aids, in order.

    ``unread`` (a list) receives a line for each text argument that is not a literal or an f-string (a
    variable): its text cannot be extracted where it is passed (a call's result is marked where it is made)."""
    known = _lab_functions()
    names: Dict[str, Optional[Callable]] = {}  # what the cells imported (None: not a paged_kv.lab function)
    modules: Dict[str, Dict[str, Callable]] = {}
    bound: set = set()  # the names the cells assign (an object, as a case of lab 06)
    found = []
    for cell_id, source in code_cells(notebook):
        tree = ast.parse(source)
        _imports(tree, known, names, modules)
        assigned = _assignments(tree)
        bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in _calls(tree):
            func = node.func
            function = None
            if isinstance(func, ast.Name):
                function = names.get(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                function = modules.get(func.value.id, {}).get(func.attr)
            if function is None:
                continue
            if function is N_ and node.args:  # a text the cell marks, to be translated where a teaching aid shows it
                found += [Message(t, f"{notebook.name}:{cell_id}", "N_") for t in _templates(node.args[0], assigned)]
                continue
            for param, arg in _text_arguments(node, function):
                if param in LABELLED_PARAMETERS:
                    found += [
                        Message(t, f"{notebook.name}:{cell_id}", f"{_callee(node)}({param} key)")
                        for t in _keys(arg, assigned)
                    ]
                    continue
                templates = _templates(arg, assigned)
                # an object, a constant, or what a call returns (a text marked where that function makes it)
                given = isinstance(arg, ast.Name) and (arg.id in bound or arg.id in names) or isinstance(arg, ast.Call)
                if not templates and unread is not None and not given and not isinstance(arg, ast.Constant):
                    unread.append(f"{notebook.name} cell {cell_id}: {_callee(node)}({param}={ast.unparse(arg)})")
                for template in templates:
                    if template.strip():
                        found.append(Message(template, f"{notebook.name}:{cell_id}", f"{_callee(node)}({param})"))
    return found


# -- catalogs -----------------------------------------------------------------------------------------------
def new_catalog(title: str, language: str) -> polib.POFile:
    catalog = polib.POFile(wrapwidth=0)
    catalog.metadata = {
        "Project-Id-Version": "paged-kv-course",
        "Language": language,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    catalog.header = (
        f"{title}\nmsgid: the English text (a template where it has {{fields}}: keep every field, as written, in "
        "the translation); msgstr: its translation.\nUpdate with `python -m tools.translations update`; the "
        "glossary is docs/glossary-zh_CN.md."
    )
    return catalog


def _grouped(messages: Iterable[Message]) -> Dict[str, List[Message]]:
    grouped: Dict[str, List[Message]] = {}
    for message in messages:
        grouped.setdefault(message.msgid, []).append(message)
    return grouped


def sync(entries: List[polib.POEntry], messages: Iterable[Message], comment: str = "") -> Tuple[list, dict]:
    """The entries (no ``msgctxt``) that ``messages`` need, in their order, reusing ``entries``' translations;
    the entries no message needs become obsolete. Returns ``(entries, {"new": [...], "obsolete": [...]})``."""
    by_id = {e.msgid: e for e in entries}
    changes: Dict[str, List[str]] = {"new": [], "obsolete": []}
    kept = []
    for msgid, uses in _grouped(messages).items():
        entry = by_id.pop(msgid, None)
        if entry is None:
            entry = polib.POEntry(msgid=msgid, msgstr="")
            changes["new"].append(msgid)
        entry.obsolete = False
        entry.occurrences = [(where, "") for where in dict.fromkeys(use.where for use in uses)]
        notes = sorted({use.note for use in uses if use.note})
        entry.comment = "; ".join(([comment] if comment else []) + notes)
        if "{" in msgid and "python-brace-format" not in entry.flags:
            entry.flags.append("python-brace-format")
        kept.append(entry)
    for entry in by_id.values():
        if not entry.obsolete:
            changes["obsolete"].append(entry.msgid)
        entry.obsolete = True
        entry.occurrences = []
    gone = sorted((e for e in by_id.values() if e.msgstr), key=lambda e: e.msgid)  # an untranslated one is dropped
    return kept + gone, changes


def is_code_string(entry: polib.POEntry) -> bool:
    """An entry of a lab's catalog that this module keeps (a code cell's text), not a markdown cell's."""
    return entry.msgctxt is None


def update_lab(catalog: polib.POFile, notebook: Path) -> Dict[str, List[str]]:
    """Bring the code cells' entries of a lab's ``catalog`` (a ``polib.POFile``) in line with ``notebook``, in
    place, after its markdown cells' entries; returns what changed."""
    markdown = [e for e in catalog if not is_code_string(e)]
    code, changes = sync([e for e in catalog if is_code_string(e)], cell_messages(notebook), CODE_STRING)
    live = [e for e in markdown if not e.obsolete] + [e for e in code if not e.obsolete]
    gone = [e for e in markdown if e.obsolete] + [e for e in code if e.obsolete]
    del catalog[:]
    catalog.extend(live + gone)
    return changes


def own_catalog_path(kind: str, language: str) -> Path:
    """The source catalog (``.po``) of the teaching aids (``"package"``) or the autograder (``"autograder"``)."""
    return (PACKAGE_DIR / "locale" if kind == "package" else AUTOGRADER_LOCALE) / f"{language}.po"


def _read(path: Path, title: str, language: str) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=0) if path.exists() else new_catalog(title, language)


def _write(catalog: polib.POFile, path: Path) -> bool:
    text = str(catalog)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


TITLES = {
    "package": "Translation of the texts of the course package's teaching aids (paged_kv/lab/*.py: _() and N_()).",
    "autograder": "Translation of the autograder's student-facing texts (for_student() and N_() in autograder/).",
}


def update_own(kind: str, language: str) -> Dict[str, List[str]]:
    """Bring the teaching aids' (``"package"``) or the autograder's catalog in line with their code."""
    path = own_catalog_path(kind, language)
    catalog = _read(path, TITLES[kind], language)
    messages = package_messages() if kind == "package" else autograder_messages()
    entries, changes = sync(list(catalog), messages)
    del catalog[:]
    catalog.extend(entries)
    _write(catalog, path)
    return changes


def lab_catalogs(language: str) -> List[Path]:
    return sorted((ROOT / "solutions").glob(f"*/{language}.po"))


def translated(entries: Iterable[polib.POEntry]) -> Dict[str, str]:
    """``{msgid: msgstr}`` of the live, translated, not stale entries."""
    return {e.msgid: e.msgstr for e in entries if not e.obsolete and e.msgstr and "fuzzy" not in e.flags}


def runtime_pairs(language: str) -> Dict[str, str]:
    """What the package reads at run time: the teaching aids' translations and every lab's code cells'."""
    pairs = translated(_read(own_catalog_path("package", language), "", language))
    for path in lab_catalogs(language):
        pairs.update(translated(e for e in polib.pofile(str(path), wrapwidth=0) if is_code_string(e)))
    return pairs


def compiled(pairs: Dict[str, str], language: str) -> bytes:
    """``pairs`` as a gettext ``.mo`` file (the same bytes for the same pairs)."""
    catalog = new_catalog("", language)
    catalog.header = ""
    for msgid in sorted(pairs):
        catalog.append(polib.POEntry(msgid=msgid, msgstr=pairs[msgid]))
    return catalog.to_binary()


def compiled_targets(language: str) -> Dict[Path, bytes]:
    """``{path: bytes}`` of every compiled form for ``language``, as the catalogs say they should be."""
    autograder = translated(_read(own_catalog_path("autograder", language), "", language))
    return {
        catalog_path(language): compiled(runtime_pairs(language), language),
        catalog_path(language, AUTOGRADER_LOCALE).with_name(f"{AUTOGRADER_DOMAIN}.mo"): compiled(autograder, language),
    }


def compile_all(language: str) -> List[Path]:
    """Write the compiled forms that differ from the catalogs; returns those written."""
    written = []
    for path, data in compiled_targets(language).items():
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(path)
    return written


def stale_compiled(language: str) -> List[Path]:
    """The compiled forms that are missing or differ from what their catalogs compile to."""
    return [p for p, data in compiled_targets(language).items() if not p.exists() or p.read_bytes() != data]


def untranslated(language: str) -> Dict[str, List[str]]:
    """``{catalog: [msgid, ...]}``: the texts of the running code still to translate (or stale)."""
    left = {}
    for kind in ("package", "autograder"):
        path = own_catalog_path(kind, language)
        left[str(path.relative_to(ROOT))] = [
            e.msgid for e in _read(path, "", language) if not e.obsolete and (not e.msgstr or "fuzzy" in e.flags)
        ]
    for path in lab_catalogs(language):
        left[str(path.relative_to(ROOT))] = [
            e.msgid
            for e in polib.pofile(str(path), wrapwidth=0)
            if is_code_string(e) and not e.obsolete and (not e.msgstr or "fuzzy" in e.flags)
        ]
    return left


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "status", "check"))
    parser.add_argument("--language", default=LANGUAGES[0], choices=LANGUAGES)
    args = parser.parse_args(argv)
    if args.command == "update":
        for kind in ("package", "autograder"):
            changes = update_own(kind, args.language)
            said = ", ".join(f"{len(v)} {k}" for k, v in changes.items() if v)
            print(f"{own_catalog_path(kind, args.language).relative_to(ROOT)}: {said or 'up to date'}")
        for path in compile_all(args.language):
            print(f"wrote {path.relative_to(ROOT)}")
    elif args.command == "status":
        for where, msgids in untranslated(args.language).items():
            print(f"{where}: {len(msgids)} to translate")
    else:
        stale = stale_compiled(args.language)
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run python -m tools.translations update)")
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
