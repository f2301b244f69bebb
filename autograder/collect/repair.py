"""Put a submitted notebook back into the release's shape before nbgrader grades it.

Students' notebooks arrive edited in every way Jupyter, Colab and a text editor allow: test cells
changed or deleted, cells reordered, nbgrader metadata stripped, cell ids dropped (Colab), a newer
format minor version, broken JSON. ``repair`` rebuilds the notebook from the release:

- every cell of the release comes back from the release, in the release's order: test cells, given
  code, text. Only answer cells keep the student's code;
- a student's cell is matched to a release cell by cell id, then by nbgrader ``grade_id``, then by
  identical text, then (answer cells) by defining the names the answer cell must define, then
  (other cells) by similar text;
- cells the student added are kept, after the release cell they followed, without nbgrader metadata;
- the TODO names the tests call (a class, a function, the class's TODO methods) are checked, and a
  rename is reported (not repaired: the tests call the name the lab asked for);
- what was changed or noticed goes to the instructor's log and, when it matters to the student, to
  a "Grading notes" cell at the top of the graded notebook (and so of the feedback), in the language of the
  release (its metadata's ``paged_kv.language``; the log stays English).
"""

from __future__ import annotations

import ast
import copy
import difflib
import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import nbformat
from nbformat.notebooknode import NotebookNode, from_dict

from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.verdict.scoring import NOTES_CELL_ID, notes_heading
from autograder.verdict.plain_text import note_lines
from autograder.verdict.student_text import N_, for_student, language_of
from autograder.course.notebook import normalized

SIMILAR = 0.6  # text similarity above which an edited cell is taken for the release cell it came from


@dataclass
class Repaired:
    """The notebook to grade, the instructor's log lines (``kind: detail``) and the student's notes (in
    ``language``)."""

    notebook: NotebookNode
    log: List[Tuple[str, str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    language: str = ""  # by default the notebook's (its release's metadata): ``language_of``

    def __post_init__(self) -> None:
        self.language = self.language or language_of(self.notebook)

    def record(self, kind: str, detail: str, note: Optional[str] = None) -> None:
        """Log ``kind: detail``; tell the student ``note`` (English, marked ``N_``), in their language."""
        self.log.append((kind, detail))
        if note:
            self.notes.append(for_student(note, self.language))


# ---- reading what was submitted ------------------------------------------------------------------
def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source or "")


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata") or {}
    value = meta.get("nbgrader") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def read_cells(raw: bytes, result: Repaired) -> Optional[List[dict]]:
    """The submission's cells as plain dicts, or None (with the reason logged) when it is no notebook."""
    text = raw.decode("utf-8-sig", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = json.loads(text, strict=False)  # raw control characters inside strings (hand edits)
            result.record("json", "control characters in strings accepted")
        except ValueError as error:
            result.record(
                "invalid-json",
                str(error),
                N_(
                    f"Your file is not a valid notebook (JSON error: {error}), so none of it could be "
                    "graded. Open it in Jupyter to check it, save it again and resubmit."
                ),
            )
            return None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        result.record(
            "not-a-notebook",
            "no list of cells",
            N_("Your file is JSON but not a notebook (no cells), so none of it could be graded."),
        )
        return None
    major, minor = data.get("nbformat"), data.get("nbformat_minor")
    if major == 3:
        data = nbformat.reads(json.dumps(data), as_version=4)
        result.record("format", "nbformat 3 converted to 4")
    elif major != 4:
        result.record(
            "format",
            f"nbformat {major}.{minor}: read as version 4",
            N_(f"Your notebook uses format {major}.{minor}; it was read as format 4."),
        )
    elif isinstance(minor, int) and minor > 5:
        result.record("format-minor", f"nbformat 4.{minor}, newer than this nbformat knows: read as 4.5")
    metadata = data.get("metadata") or {}
    if "colab" in metadata or any("colab" in (c.get("metadata") or {}) for c in data["cells"]):
        result.record(
            "saved-by",
            "Google Colab",
            N_(
                "Your notebook was saved by Google Colab; its cells were matched to the original ones by their content."
            ),
        )
    cells = []
    for cell in data["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            continue
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        ids = {i for i in (cell.get("id"), meta.get("id")) if isinstance(i, str)}
        cells.append(
            {
                "type": cell["cell_type"],
                "source": _text(cell.get("source")),
                "ids": ids,
                "grade_id": _nbgrader(cell).get("grade_id"),
            }
        )
    return cells


# ---- matching cells --------------------------------------------------------------------------------


def defined_names(source: str) -> Tuple[Dict[str, Set[str]], Optional[str]]:
    """``{top-level name: names of its methods}`` for defs, classes and assignments; and a syntax error."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return {}, f"line {error.lineno}: {error.msg}"
    names: Dict[str, Set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            names[node.name] |= {
                t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.Assign):
            names.update({t.id: set() for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
    return names, None


def _required(release_cell) -> Dict[str, Set[str]]:
    """What an answer cell must define: its classes (with their methods) and functions."""
    names, _ = defined_names(release_cell.source)
    tree = ast.parse(release_cell.source)
    kept = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    return {name: methods for name, methods in names.items() if name in kept}


def match_cells(release: List[NotebookNode], cells: List[dict]) -> Dict[int, int]:
    """``{release index: submission index}``, each submission cell used at most once."""
    matched: Dict[int, int] = {}
    used: Set[int] = set()

    def take(r: int, s: int) -> None:
        matched[r] = s
        used.add(s)

    for r, cell in enumerate(release):  # by cell id, then by nbgrader grade_id
        s = next((i for i, c in enumerate(cells) if i not in used and cell.get("id") in c["ids"]), None)
        grade_id = nbgrader_meta(cell).get("grade_id")
        if s is None and grade_id:
            s = next((i for i, c in enumerate(cells) if i not in used and c["grade_id"] == grade_id), None)
        if s is not None:
            take(r, s)
    for r, cell in enumerate(release):  # by identical text
        if r not in matched:
            texts = _as_handed_out(cell.source)
            s = next(
                (
                    i
                    for i, c in enumerate(cells)
                    if i not in used
                    and c["type"] == cell.cell_type
                    and normalized(c["source"]) in texts
                    and cell.source.strip()
                ),
                None,
            )
            if s is not None:
                take(r, s)
    for r, cell in enumerate(release):  # answer cells: the cell that defines what the answer must define
        if r not in matched and nbgrader_meta(cell).get("solution"):
            needed = set(_required(cell))
            s = next(
                (
                    i
                    for i, c in enumerate(cells)
                    if i not in used and c["type"] == "code" and needed and needed <= set(defined_names(c["source"])[0])
                ),
                None,
            )
            if s is not None:
                take(r, s)
    for r, cell in enumerate(release):  # edited copies of locked cells
        if r not in matched and nbgrader_meta(cell).get("locked") and cell.source.strip():
            scores = [
                (difflib.SequenceMatcher(None, cell.source, c["source"]).ratio(), i)
                for i, c in enumerate(cells)
                if i not in used and c["type"] == cell.cell_type
            ]
            if scores and max(scores)[0] >= SIMILAR:
                take(r, max(scores)[1])
    return matched


# ---- rebuilding ---------------------------------------------------------------------------------
def _label(cell) -> str:
    meta = nbgrader_meta(cell)
    return meta.get("grade_id") or cell.get("id") or "a cell"


def repair(
    raw: bytes, release: NotebookNode, file_name: str = "", expected_name: str = "", language: str = ""
) -> Repaired:
    """The notebook to grade for one submission (see the module doc). ``release`` is not modified. The notes
    are in ``language``, by default the release's (``language_of``)."""
    result = Repaired(notebook=copy.deepcopy(release), language=language)
    if file_name and expected_name and file_name != expected_name:
        result.record(
            "file-name",
            f"{file_name} graded as {expected_name}",
            N_(f"Your file was named `{file_name}`; it was graded as `{expected_name}`."),
        )
    cells = read_cells(raw, result)
    if cells is None:
        _finish(result)
        return result
    if not any(c["grade_id"] for c in cells):
        result.record(
            "metadata",
            "no nbgrader metadata: cells matched by id and content",
            N_(
                "Your notebook had lost its grading metadata; cells were matched to the original ones by "
                "their id and content."
            ),
        )
    matched = match_cells(release.cells, cells)
    order = [matched[r] for r in sorted(matched)]
    if order != sorted(order):
        result.record(
            "reordered",
            "cells out of the release's order",
            N_("Some cells were moved; they were graded in the original order."),
        )
    out: List[NotebookNode] = []
    added_after: Dict[int, List[int]] = {}
    last_release = -1
    by_submission = {s: r for r, s in matched.items()}
    for s in range(len(cells)):
        if s in by_submission:
            last_release = max(last_release, by_submission[s])
        else:
            added_after.setdefault(last_release, []).append(s)
    release_ids = {c.get("id") for c in release.cells}
    for index in added_after.get(-1, []):
        out.append(_added(cells[index], index, release_ids))
    for r, cell in enumerate(release.cells):
        out.append(_rebuilt(cell, cells[matched[r]] if r in matched else None, result))
        for index in added_after.get(r, []):
            out.append(_added(cells[index], index, release_ids))
    added = sum(len(v) for v in added_after.values())
    if added:
        result.record("added-cells", f"{added} cell(s) added by the student kept")
    result.notebook.cells = out
    _check_todo_names(release, result)
    _finish(result)
    return result


def _rebuilt(cell: NotebookNode, submitted: Optional[dict], result: Repaired) -> NotebookNode:
    new = copy.deepcopy(cell)
    meta = nbgrader_meta(cell)
    label = _label(cell)
    if meta.get("solution"):
        if submitted is None:
            result.record(
                "missing-answer",
                label,
                N_(
                    f"The answer cell `{label}` was not found in your notebook; it was graded "
                    "as the unanswered starter code."
                ),
            )
        else:
            new.source = submitted["source"]
            if submitted["type"] != "code" and cell.cell_type == "code":
                result.record(
                    "answer-type",
                    label,
                    N_(f"Your answer cell `{label}` had been turned into a text cell; it was graded as code."),
                )
        return new
    kind = "test" if meta.get("grade") else ("cell" if cell.cell_type == "code" else None)
    if kind is None:
        return new
    if submitted is None:
        if kind == "test":
            note = N_(f"The test cell `{label}` was missing; the original was put back.")
        else:
            note = N_(f"The given code cell `{label}` was missing; the original was put back.")
        result.record(f"restored-{kind}", label, note)
    elif normalized(submitted["source"]) not in _as_handed_out(cell.source) and (
        meta.get("locked") or meta.get("grade")
    ):
        if kind == "test":
            note = N_(f"The test cell `{label}` had been edited; it was graded as originally written.")
        else:
            note = N_(f"The given code cell `{label}` had been edited; it was graded as originally written.")
        result.record(f"edited-{kind}", label, note)
    elif kind == "cell":  # as the student was handed it (a class's setup cell): kept so, for the feedback too
        new.source = _as_handed_out(cell.source).get(normalized(submitted["source"]), cell.source)
    return new


def _as_handed_out(source: str) -> Dict[str, str]:
    """``{normalised text: text}`` of the forms a given cell may have without being edited: the release's, a
    translation's setup cell, a class handout's (its setup cell installs the class's edition on Colab):
    ``autograder.course.handed_out.given_forms``."""
    from autograder.course.handed_out import given_forms

    return {normalized(form): form for form in reversed(given_forms(source))}


def _added(cell: dict, index: int, taken: Set[Optional[str]]) -> NotebookNode:
    """A cell the student added: kept as it is, with no nbgrader metadata and a fresh unique id."""
    own = next((i for i in sorted(cell["ids"]) if i not in taken and i != NOTES_CELL_ID), None)
    new_id = own or f"student-added-{index}"
    taken.add(new_id)
    if cell["type"] == "code":
        made = nbformat.v4.new_code_cell(cell["source"])
    elif cell["type"] == "markdown":
        made = nbformat.v4.new_markdown_cell(cell["source"])
    else:
        made = nbformat.v4.new_raw_cell(cell["source"])
    made["id"] = new_id
    return made


def _check_todo_names(release: NotebookNode, result: Repaired) -> None:
    """Report answers whose class, function or TODO method no longer has the name the tests call."""
    defined: Dict[str, Set[str]] = {}
    for cell in result.notebook.cells:
        if cell.cell_type != "code":
            continue
        names, error = defined_names(cell.source)
        meta = nbgrader_meta(cell)
        if error and meta.get("solution"):
            label = _label(cell)
            result.record(
                "syntax-error",
                f"{label} {error}",
                N_(f"Your answer cell `{label}` has a syntax error ({error}), so it defines nothing."),
            )
        for name, methods in names.items():
            defined.setdefault(name, set()).update(methods)
    for cell in release.cells:
        if not nbgrader_meta(cell).get("solution"):
            continue
        for name, methods in _required(cell).items():
            if name not in defined:
                others = ", ".join(sorted(n for n in defined if n not in _all_release_names(release)))
                seen = f" (your notebook defines {others})" if others else ""
                if others:
                    note = N_(
                        f"Your notebook does not define `{name}` (your notebook defines {others}). The tests call "
                        f"`{name}`, so they could not run your code: keep the names the lab gives."
                    )
                else:
                    note = N_(
                        f"Your notebook does not define `{name}`. The tests call `{name}`, so they "
                        "could not run your code: keep the names the lab gives."
                    )
                result.record("renamed-todo", f"{name} missing{seen}", note)
                continue
            lost = sorted(methods - defined[name])
            if lost:
                methods_lost = ", ".join(f"`{m}`" for m in lost)
                result.record(
                    "renamed-todo",
                    f"{name} lacks {', '.join(lost)}",
                    N_(
                        f"Your class `{name}` does not define {methods_lost}, which "
                        "the tests call: keep the method names the lab gives."
                    ),
                )


def _all_release_names(release: NotebookNode) -> Set[str]:
    names: Set[str] = set()
    for cell in release.cells:
        if cell.cell_type == "code":
            names |= set(defined_names(cell.source)[0])
    return names


def _finish(result: Repaired) -> None:
    """Put the student's notes in a "Grading notes" cell at the top (the feedback shows it)."""
    cells = [c for c in result.notebook.cells if c.get("id") != NOTES_CELL_ID]
    if result.notes:
        text = notes_heading(result.language) + "\n\n"
        cells.insert(
            0,
            from_dict(
                {
                    "cell_type": "markdown",
                    "id": NOTES_CELL_ID,
                    "metadata": {},
                    "source": text + note_lines(f"- {n}" for n in result.notes),
                }
            ),
        )
    result.notebook.cells = cells


def add_note(result: Repaired, kind: str, detail: str, note: str) -> None:
    """Record ``kind: detail`` for the instructor and ``note`` for the student in a notebook already
    repaired (collection's own findings, such as a refused file): the Grading notes cell is rebuilt."""
    result.record(kind, detail, note)
    _finish(result)
