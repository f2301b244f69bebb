"""The course's translation catalogs: one gettext ``.po`` file per lab and language, beside the lab's source notebook.

``solutions/<lab>/<language>.po`` (e.g. ``solutions/02-atomic-prefill/zh_CN.po``) holds one entry per markdown
cell of the lab's English source notebook: ``msgctxt`` is the cell's id, ``msgid`` the cell's English text as it is
in ``solutions/``, ``msgstr`` its translation. English is the source; a catalog is never the place to change what a
lab says.

``python -m tools.translations update [--language zh_CN] [LAB ...]`` brings the catalogs in line with the notebooks:
a new cell gets an empty entry, a cell whose English changed keeps its translation but is marked ``fuzzy`` (stale)
with the English it was translated from as ``#| msgid`` (gettext's own convention, which translators' tools show as
a diff), and an entry whose cell is gone becomes obsolete (``#~``). A second run changes nothing.
``python -m tools.translations status`` lists, per lab, the cells still to translate and every translation that loses
its English's facts or the glossary's terms (``checked``: what the catalog tests check).

``python -m tools.translations release [--check]`` (``make release`` runs it after nbgrader) generates each
translated release, ``course/<language>/<lab>/<notebook>``, from the English release (``course/<lab>/``) and the
lab's catalog (``translated_release``): never edit them by hand. ``--check`` writes nothing and exits 1 when one
is out of date.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Dict, List, Optional

import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autograder.course import handed_out, languages  # noqa: E402 (the repository on the path first)
from tools import message_catalogs  # noqa: E402 (the running code's texts: a module of its own)

SOURCE_LANGUAGE = languages.SOURCE
LANGUAGES = languages.TRANSLATIONS  # the course's translations; English (solutions/) is the source of every one
LANGUAGE_NAMES = {"zh_CN": "Chinese (Simplified)"}
from tools import sync_colab  # noqa: E402

BADGE_MARK = "[![Open In Colab](...)](...)"  # what a Colab badge counts as when English and a translation are compared


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
        elif without_badge(entry.msgid) == without_badge(cell["source"]):
            # only the Colab badge's address changed (make sync-colab): nothing to translate
            entry.msgid = cell["source"]
        else:
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


def without_badge(text: str) -> str:
    """``text`` with its Colab badge (whose address ``make sync-colab`` may change) as ``BADGE_MARK``: a new address
    makes no translation stale."""
    return sync_colab._BADGE.sub(BADGE_MARK, text)


def read_catalog(lab_dir: Path, language: str) -> Optional[polib.POFile]:
    """The lab's ``language`` catalog, or None when it has none."""
    path = catalog_path(lab_dir, language)
    return polib.pofile(str(path), wrapwidth=0) if path.exists() else None


def usable(entry: Optional[polib.POEntry], english: str) -> bool:
    """Whether ``entry`` translates ``english`` as it is now: translated, not fuzzy (stale), and made from this
    English text (a catalog not yet updated after the cell changed is stale too). gettext's own rule: a fuzzy
    entry is never used."""
    return (
        entry is not None
        and not entry.obsolete
        and bool(entry.msgstr)
        and "fuzzy" not in entry.flags
        and without_badge(entry.msgid) == without_badge(english)
    )


def to_translate(lab_dir: Path, language: str) -> List[str]:
    """The ids of the markdown cells of ``lab_dir``'s notebook whose ``language`` translation is missing or stale
    (no entry, an empty one, a fuzzy one, or one made from other English than the cell's now)."""
    catalog = read_catalog(lab_dir, language)
    by_context = {e.msgctxt: e for e in catalog or [] if not e.obsolete}
    return [
        cell["id"]
        for notebook in sorted(lab_dir.glob("*.ipynb"))
        for cell in markdown_cells(notebook)
        if not usable(by_context.get(cell["id"]), cell["source"])
    ]


def checked(lab_dir: Path, language: str) -> Dict[str, List[str]]:
    """``{cell id: problems}`` for each current translation (``usable``) of the lab that loses its English's facts or
    the glossary's checked terms (``tools.translation_facts``; the catalog tests fail on the same)."""
    from tools import translation_facts

    terms = translation_facts.read_glossary()
    english = {c["id"]: c["source"] for n in sorted(lab_dir.glob("*.ipynb")) for c in markdown_cells(n)}
    found = {}
    for entry in read_catalog(lab_dir, language) or []:
        if entry.msgctxt not in english or not usable(entry, english[entry.msgctxt]):
            continue  # not translated, or stale: to translate again (above)
        text = english[entry.msgctxt]
        problems = translation_facts.differences(without_badge(text), without_badge(entry.msgstr))  # badges: ours
        problems += translation_facts.glossary_misses(text, entry.msgstr, terms)
        if problems:
            found[entry.msgctxt] = problems
    return found


# ---- the translated releases ----------------------------------------------------------------------------
def translated_release(
    english, catalog: Optional[polib.POFile], language: str, badge: Optional[str] = None
) -> "nbformat.NotebookNode":
    """The ``language`` release of a lab made from its English release ``english`` (an nbformat notebook, not
    changed) and its catalog: each markdown cell's text is its usable translation (``usable``; else the English
    stays, so a lab whose translation is under way still works), with the Colab badge ``badge`` (the translated
    notebook's own) under the title; the setup cell gets the language line (``languages.with_language``); the
    notebook's metadata says the language; nbgrader's checksums of the cells that changed are recomputed
    (``handed_out.reseal``). Every other cell, id and metadata is the English release's, byte for byte."""
    languages.check_language(language)
    if language == languages.SOURCE:
        raise ValueError("English is the source: its release is nbgrader's (course/)")
    nb = copy.deepcopy(english)
    entries = {e.msgctxt: e for e in catalog or [] if not e.obsolete}
    setup = [c for c in nb.cells if languages.is_setup_cell(c)]
    if len(setup) != 1:
        raise ValueError(
            f"the release needs exactly one setup cell (holding {languages.COLAB_TEST!r}), found {len(setup)}"
        )
    setup[0].source = languages.with_language(setup[0].source, language)
    first_markdown = True
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        entry = entries.get(cell.get("id"))
        if usable(entry, cell.source):
            cell.source = entry.msgstr
        if first_markdown and badge is not None:
            cell.source = sync_colab.with_badge(cell.source, badge, f"{language} release, cell {cell.get('id')}")
        first_markdown = False
    nb.metadata.setdefault(languages.METADATA_KEY, {})["language"] = language
    handed_out.reseal(nb)
    return nb


def release(root: Path = ROOT, check: bool = False, language_list=LANGUAGES) -> List[Path]:
    """Write (or, with ``check``, compare) every translated release under ``root``'s release folder: each lab's
    notebook from its English release and catalog (``translated_release``), and the English release folder's other
    files (a lab's ``facts.md``, which its notebook names "beside this notebook") as they are. What is there that no
    lab makes is removed (reported). Returns what was (or would be) written or removed."""
    from autograder.course.layout import RELEASE_DIR, SOURCE_DIR, discover_labs

    import shutil

    settings = sync_colab.load_settings(root / "pyproject.toml")
    source_dir, release_dir = root / SOURCE_DIR.name, root / RELEASE_DIR.name
    labs = discover_labs(source_dir)
    changed: List[Path] = []

    def write(path: Path, data: bytes) -> None:
        if path.is_file() and path.read_bytes() == data:
            return
        changed.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    for language in language_list:
        folder = languages.release_folder(release_dir, language)
        wanted = {}
        for lab, name in labs.items():
            english = nbformat.read(release_dir / lab / name, as_version=4)
            path = folder / lab / name
            badge = settings.badge(path.relative_to(root).as_posix())
            made = translated_release(english, read_catalog(source_dir / lab, language), language, badge)
            write(path, (nbformat.writes(made) + "\n").encode("utf-8"))
            others = [p for p in sorted((release_dir / lab).iterdir()) if p.is_file() and p.name != name]
            for other in others:
                write(folder / lab / other.name, other.read_bytes())
            wanted[lab] = {name} | {p.name for p in others}
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            ours = entry.is_dir() and entry.name in wanted
            strays = [p for p in sorted(entry.iterdir()) if p.name not in wanted[entry.name]] if ours else [entry]
            for stray in strays:
                changed.append(stray)
                if not check:
                    shutil.rmtree(stray) if stray.is_dir() else stray.unlink()
    return changed


def _labs(names: List[str]) -> List[Path]:
    from autograder.course.layout import SOURCE_DIR, discover_labs

    labs = list(discover_labs(SOURCE_DIR))
    unknown = [n for n in names if n not in labs]
    if unknown:
        raise SystemExit(f"no such lab: {', '.join(unknown)} (labs: {', '.join(labs)})")
    return [SOURCE_DIR / lab for lab in (names or labs)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "status", "release"))
    parser.add_argument("labs", nargs="*", help="lab folders of solutions/ (default: every lab)")
    parser.add_argument("--language", default=LANGUAGES[0], choices=LANGUAGES)
    parser.add_argument("--check", action="store_true", help="release: write nothing, exit 1 when one is out of date")
    args = parser.parse_args(argv)
    if args.command == "release":
        if args.labs:
            raise SystemExit("release makes every lab's translated release: name no lab")
        changed = release(check=args.check)
        for path in changed:
            done = "out of date" if args.check else "written" if path.exists() else "removed"
            print(f"{done}: {path.relative_to(ROOT)}")
        if changed and args.check:
            print("run `make release` and commit", file=sys.stderr)
        return 1 if changed and args.check else 0
    for lab_dir in _labs(args.labs):
        if args.command == "update":
            changes = update(lab_dir, args.language)
            said = ", ".join(f"{len(v)} {k}" for k, v in changes.items() if v)
            print(f"{lab_dir.name}: {said or 'up to date'}")
        else:
            left = to_translate(lab_dir, args.language)
            print(f"{lab_dir.name}: {len(left)} to translate" + (f" ({', '.join(left)})" if left else ""))
            for cell, problems in checked(lab_dir, args.language).items():
                print(f"  {cell}: {'; '.join(problems)}")
    if args.command == "update":  # the running code's texts: the teaching aids', the autograder's, compiled
        message_catalogs.main(["update", "--language", args.language])
    else:
        message_catalogs.main(["status", "--language", args.language])
    return 0


if __name__ == "__main__":
    sys.exit(main())
