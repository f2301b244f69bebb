"""The course's translation catalogs: one gettext ``.po`` file per lab and language, beside the lab's source notebook.

``solutions/<lab>/<language>.po`` (e.g. ``solutions/02-atomic-prefill/zh_CN.po``) holds one entry per markdown
cell of the lab's English source notebook: ``msgctxt`` is the cell's id, ``msgid`` the cell's English text as it is
in ``solutions/``, ``msgstr`` its translation. English is the source; a catalog is never the place to change what a
lab says.

``python -m tools.translations update [--language zh_CN] [LAB ...]`` brings the catalogs in line with the notebooks:
a new cell gets an empty entry, a cell whose English changed keeps its translation but is marked ``fuzzy`` (stale)
with the English it was translated from as ``#| msgid`` (gettext's own convention, which translators' tools show as
a diff), and an entry whose cell is gone becomes obsolete (``#~``). A second run changes nothing.
``python -m tools.translations status`` lists, per lab, the cells still to translate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List

import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import message_catalogs  # noqa: E402 (the running code's texts: a module of its own)

SOURCE_LANGUAGE = "en"
LANGUAGES = ("zh_CN",)  # the course's translations; English (solutions/) is the source of every one
LANGUAGE_NAMES = {"zh_CN": "Chinese (Simplified)"}


def catalog_path(lab_dir: Path, language: str) -> Path:
    """Where ``language``'s catalog of the lab in ``lab_dir`` (a folder of solutions/) lives."""
    return lab_dir / f"{language}.po"


def markdown_cells(notebook: Path) -> List[Dict]:
    """``[{"id", "source", "grade_id"}]`` for each markdown cell of ``notebook``, in order."""
    nb = nbformat.read(notebook, as_version=4)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        found.append({"id": cell["id"], "source": cell.source, "grade_id": grade_id})
    return found


def _new_catalog(lab: str, language: str) -> polib.POFile:
    catalog = polib.POFile(wrapwidth=0)
    catalog.metadata = {
        "Project-Id-Version": f"paged-kv-course {lab}",
        "Language": language,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    catalog.header = (
        f"{LANGUAGE_NAMES.get(language, language)} translation of lab {lab}'s notebook.\n"
        "msgctxt: the cell's id; msgid: its English text in solutions/ (the source); msgstr: the translation.\n"
        "Update with `python -m tools.translations update`; the glossary is docs/glossary-zh_CN.md."
    )
    return catalog


def update(lab_dir: Path, language: str) -> Dict[str, List[str]]:
    """Bring ``lab_dir``'s ``language`` catalog in line with its notebook; returns what changed, by kind."""
    notebooks = sorted(lab_dir.glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"{lab_dir} must hold exactly one notebook, found {[n.name for n in notebooks]}")
    path = catalog_path(lab_dir, language)
    catalog = polib.pofile(str(path), wrapwidth=0) if path.exists() else _new_catalog(lab_dir.name, language)
    code_strings = [entry for entry in catalog if message_catalogs.is_code_string(entry)]  # message_catalogs' own
    by_context = {entry.msgctxt: entry for entry in catalog if not entry.obsolete and entry.msgctxt is not None}
    changes: Dict[str, List[str]] = {"new": [], "stale": [], "obsolete": []}
    ordered = []
    seen = set()
    for cell in markdown_cells(notebooks[0]):
        seen.add(cell["id"])
        entry = by_context.get(cell["id"])
        if entry is None:
            entry = polib.POEntry(msgctxt=cell["id"], msgid=cell["source"], msgstr="")
            changes["new"].append(cell["id"])
        elif entry.msgid != cell["source"]:
            if entry.msgstr and "fuzzy" not in entry.flags:
                entry.previous_msgid = entry.msgid
                entry.flags.append("fuzzy")
            entry.msgid = cell["source"]
            changes["stale"].append(cell["id"])
        entry.comments = f"markdown cell {cell['grade_id']}".strip() if cell["grade_id"] else "markdown cell"
        ordered.append(entry)
    for entry in catalog:
        if entry.msgctxt is not None and entry.msgctxt not in seen and not entry.obsolete:
            entry.obsolete = True
            changes["obsolete"].append(entry.msgctxt)
    ordered += [entry for entry in catalog if entry.obsolete and entry.msgctxt is not None]
    fresh = _new_catalog(lab_dir.name, language)
    fresh.metadata = catalog.metadata or fresh.metadata
    fresh.header = catalog.header or fresh.header
    fresh.extend(ordered + code_strings)
    # The texts the code cells pass to the teaching aids (messages, hints, titles): tools/message_catalogs.py
    changes.update({f"code {k}": v for k, v in message_catalogs.update_lab(fresh, notebooks[0]).items()})
    text = str(fresh)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return changes


def to_translate(lab_dir: Path, language: str) -> List[str]:
    """The ids of the cells of ``lab_dir`` whose ``language`` translation is missing or stale."""
    path = catalog_path(lab_dir, language)
    if not path.exists():
        return [cell["id"] for notebook in lab_dir.glob("*.ipynb") for cell in markdown_cells(notebook)]
    catalog = polib.pofile(str(path), wrapwidth=0)
    return [
        e.msgctxt for e in catalog if e.msgctxt is not None and not e.obsolete and (not e.msgstr or "fuzzy" in e.flags)
    ]


def _labs(names: List[str]) -> List[Path]:
    from autograder.course.layout import SOURCE_DIR, discover_labs

    labs = list(discover_labs(SOURCE_DIR))
    unknown = [n for n in names if n not in labs]
    if unknown:
        raise SystemExit(f"no such lab: {', '.join(unknown)} (labs: {', '.join(labs)})")
    return [SOURCE_DIR / lab for lab in (names or labs)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "status"))
    parser.add_argument("labs", nargs="*", help="lab folders of solutions/ (default: every lab)")
    parser.add_argument("--language", default=LANGUAGES[0], choices=LANGUAGES)
    args = parser.parse_args(argv)
    for lab_dir in _labs(args.labs):
        if args.command == "update":
            changes = update(lab_dir, args.language)
            said = ", ".join(f"{len(v)} {k}" for k, v in changes.items() if v)
            print(f"{lab_dir.name}: {said or 'up to date'}")
        else:
            left = to_translate(lab_dir, args.language)
            print(f"{lab_dir.name}: {len(left)} to translate" + (f" ({', '.join(left)})" if left else ""))
    if args.command == "update":  # the running code's texts: the teaching aids', the autograder's, compiled
        message_catalogs.main(["update", "--language", args.language])
    else:
        message_catalogs.main(["status", "--language", args.language])
    return 0


if __name__ == "__main__":
    sys.exit(main())
