"""A graded notebook made inert before nbconvert renders it: what a student controls becomes text.

``InertCells`` is an nbconvert preprocessor (``nbgrader_config.py`` puts it in ``HTMLExporter.preprocessors``,
so it runs for ``nbgrader generate_feedback`` and for Formgrader's submission view alike). It keeps, by an
allow-list, only what renders as text or as a raster image:

- a markdown cell is rendered as markdown only when its text is, exactly, a markdown cell of the lab's
  source notebook (``source_dir/<lab>/<notebook>.ipynb``: the course's own prose, tables, ``<details>``) or of
  one of its translated releases (``release_dir/<language>/<lab>/``, generated from the catalogs in ``solutions/``)
  or the grader's *Grading notes* (built from escaped text, ``autograder.verdict.plain_text``); every
  other markdown cell and every raw cell becomes preformatted text showing what was written;
- an output keeps ``text/plain``, ``image/png`` and ``image/jpeg`` (base64 only); HTML, markdown and LaTeX
  become their text; SVG, JavaScript, widgets and any other type are dropped, with a note when nothing
  is left; streams and errors stay (nbconvert escapes them); output metadata is dropped, except an
  image's whole-number width and height;
- cell metadata keeps only well-formed nbgrader metadata (Formgrader writes ``grade_id`` into its page
  as it is); cell ids, execution counts and the notebook's metadata are reset to plain values; cell
  attachments are dropped (a course cell gets its source's back).

When the lab's source notebook cannot be found, no markdown cell counts as the course's: all are text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from nbconvert.preprocessors import Preprocessor
from nbformat import from_dict
from traitlets import Unicode

from autograder.verdict.plain_text import html_text
from autograder.verdict.scoring import NOTES_CELL_ID

SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
CELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BASE64 = re.compile(r"^[A-Za-z0-9+/\s]*={0,2}\s*$")
IMAGES = ("image/png", "image/jpeg")
AS_TEXT = ("text/html", "text/markdown", "text/latex")
NBGRADER_KEYS = {
    "grade": bool,
    "solution": bool,
    "locked": bool,
    "task": bool,
    "schema_version": int,
    "grade_id": str,
    "points": (int, float),
    "cell_type": str,
    "checksum": str,
}
DROPPED_NOTE = "[{kinds} output not shown in the feedback: it can only show text and PNG or JPEG images]"


class InertCells(Preprocessor):
    """See the module doc. ``source_dir``: the course's source notebooks (``solutions/``)."""

    source_dir = Unicode("", help="folder of the labs' source notebooks: <source_dir>/<lab>/<notebook>.ipynb").tag(
        config=True
    )
    release_dir = Unicode(
        "",
        help="folder of the releases, whose translations' prose is the course's too: <release_dir>/<language>/<lab>/",
    ).tag(config=True)

    def preprocess(self, nb, resources):
        lab, notebook = _lab_and_notebook(resources or {})
        course = course_markdown(self.source_dir, lab, notebook)
        course.update(translated_markdown(self.release_dir, lab, notebook))
        nb.metadata = from_dict(_notebook_metadata(nb.get("metadata", {})))
        seen = set()
        for index, cell in enumerate(nb.cells):
            nb.cells[index] = inert_cell(cell, index, course, seen)
        return nb, resources


def _lab_and_notebook(resources: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """(lab, notebook name) from nbgrader's resources (feedback) or Formgrader's (submission view)."""
    nbgrader = resources.get("nbgrader") or {}
    return (
        nbgrader.get("assignment") or resources.get("assignment_id"),
        nbgrader.get("notebook") or resources.get("notebook_id"),
    )


def course_markdown(source_dir: str, lab: Optional[str], notebook: Optional[str]) -> Dict[str, dict]:
    """``{text: attachments}`` of the markdown cells of the lab's source notebook (empty when it cannot be
    read: then no markdown counts as the course's)."""
    if not (
        source_dir
        and isinstance(lab, str)
        and isinstance(notebook, str)
        and SAFE_NAME.match(lab)
        and SAFE_NAME.match(notebook)
    ):
        return {}
    path = Path(source_dir) / lab / f"{notebook}.ipynb"
    try:
        cells = json.loads(path.read_text()).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            out[_text(cell.get("source", ""))] = cell.get("attachments") or {}
    return out


def translated_markdown(release_dir: str, lab: Optional[str], notebook: Optional[str]) -> Dict[str, dict]:
    """``{text: {}}`` of the markdown cells of the lab's translated releases (``autograder.course.languages``: the
    course's own prose, in another language); empty when there is none or the names are odd."""
    from autograder.course.languages import translated_releases

    if not (release_dir and isinstance(lab, str) and isinstance(notebook, str)):
        return {}
    if not (SAFE_NAME.match(lab) and SAFE_NAME.match(notebook)):
        return {}
    out: Dict[str, dict] = {}
    for translated in translated_releases(Path(release_dir), lab, f"{notebook}.ipynb").values():
        for cell in translated["cells"]:
            if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
                out[_text(cell.get("source", ""))] = {}
    return out


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def inert_cell(cell, index: int, course: Dict[str, dict], seen: set):
    """One cell as the module doc says; ``seen``: the cell ids used so far (made unique)."""
    kind = cell.get("cell_type")
    source = _text(cell.get("source", ""))
    cell_id = cell.get("id")
    if not (isinstance(cell_id, str) and CELL_ID.match(cell_id)) or cell_id in seen:
        cell_id = f"cell-{index}"
    seen.add(cell_id)
    metadata = _cell_metadata(cell.get("metadata", {}))
    if kind == "markdown" and (source in course or (cell_id == NOTES_CELL_ID and _notes_are_text(source))):
        made = {"cell_type": "markdown", "id": cell_id, "metadata": metadata, "source": source}
        if course.get(source):
            made["attachments"] = course[source]
        return from_dict(made)
    if kind != "code":
        return from_dict(
            {"cell_type": "markdown", "id": cell_id, "metadata": metadata, "source": as_preformatted(source)}
        )
    count = cell.get("execution_count")
    return from_dict(
        {
            "cell_type": "code",
            "id": cell_id,
            "metadata": metadata,
            "source": source,
            "execution_count": count if isinstance(count, int) and not isinstance(count, bool) else None,
            "outputs": [o for o in map(inert_output, cell.get("outputs", []) or []) if o is not None],
        }
    )


def _notes_are_text(source: str) -> bool:
    """The Grading notes as the grader writes them: its title, then lines of escaped text (no ``<``, no
    backtick, no ``$``: ``plain_text``), so a student's quoted line is text whatever it holds."""
    return source.startswith("## Grading notes\n") and not any(c in source for c in "<>`$[]\\")


def as_preformatted(text: str) -> str:
    """Markdown that shows ``text`` as it was written, in a ``<pre>`` block (every markup character a
    character reference, so nothing inside is read as HTML, markdown or math)."""
    return f'<pre class="pkv-as-text">{html_text(text)}</pre>' if text.strip() else ""


def _cell_metadata(metadata) -> dict:
    """Only the nbgrader metadata, and only when every field has its type (a ``grade_id`` a safe name)."""
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    if not isinstance(nbgrader, dict):
        return {}
    kept = {}
    for key, value in nbgrader.items():
        wanted = NBGRADER_KEYS.get(key)
        if wanted is None:
            continue
        if not isinstance(value, wanted) or (wanted is not bool and isinstance(value, bool)):
            return {}
        if isinstance(value, str) and not SAFE_NAME.match(value):
            return {}
        kept[key] = value
    return {"nbgrader": kept} if kept else {}


def _notebook_metadata(metadata) -> dict:
    """A Python notebook's metadata and nothing else (no widget state, no title, no custom lexer)."""
    version = (metadata.get("language_info") or {}).get("version") if isinstance(metadata, dict) else None
    info = {"name": "python", "pygments_lexer": "ipython3", "mimetype": "text/x-python", "file_extension": ".py"}
    if isinstance(version, str) and re.fullmatch(r"[0-9.]{1,16}", version):
        info["version"] = version
    return {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}, "language_info": info}


def inert_output(output) -> Optional[dict]:
    """One output as the module doc says, or None when nothing of it may stay."""
    kind = output.get("output_type")
    if kind == "stream":
        return from_dict(
            {
                "output_type": "stream",
                "name": "stderr" if output.get("name") == "stderr" else "stdout",
                "text": _text(output.get("text", "")),
            }
        )
    if kind == "error":
        traceback = output.get("traceback", [])
        return from_dict(
            {
                "output_type": "error",
                "ename": str(output.get("ename", "")),
                "evalue": str(output.get("evalue", "")),
                "traceback": [str(line) for line in traceback] if isinstance(traceback, list) else [],
            }
        )
    if kind not in ("display_data", "execute_result"):
        return None
    data = output.get("data", {}) if isinstance(output.get("data"), dict) else {}
    kept: Dict[str, str] = {}
    metadata: Dict[str, dict] = {}
    for mime in IMAGES:
        image = data.get(mime)
        if isinstance(image, str) and _is_base64(image):
            kept[mime] = re.sub(r"\s+", "", image)
            size = _image_size(output.get("metadata", {}), mime)
            if size:
                metadata[mime] = size
    if isinstance(data.get("text/plain"), (str, list)):
        kept["text/plain"] = _text(data["text/plain"])
    else:
        for mime in AS_TEXT:
            if isinstance(data.get(mime), (str, list)):
                kept["text/plain"] = html_to_text(_text(data[mime])) if mime == "text/html" else _text(data[mime])
                break
    dropped = sorted(set(data) - set(kept) - {"text/plain", *AS_TEXT})
    if not kept:
        kept["text/plain"] = DROPPED_NOTE.format(kinds=", ".join(dropped) or "An empty")
    made = {"output_type": kind, "data": kept, "metadata": metadata}
    if kind == "execute_result":
        count = output.get("execution_count")
        made["execution_count"] = count if isinstance(count, int) and not isinstance(count, bool) else None
    return from_dict(made)


def _is_base64(text: str) -> bool:
    if not BASE64.match(text):
        return False
    try:
        base64.b64decode(re.sub(r"\s+", "", text), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _image_size(metadata, mime: str) -> dict:
    entry = metadata.get(mime) if isinstance(metadata, dict) else None
    if not isinstance(entry, dict):
        return {}
    return {
        k: entry[k]
        for k in ("width", "height")
        if isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool) and 0 < entry[k] <= 10000
    }


class _Text(HTMLParser):
    """The text an HTML output shows (no script or style content), cells and blocks on their own lines."""

    SKIP = {"script", "style", "template", "noscript", "iframe", "object", "svg", "math", "head", "title"}
    BREAK = {"br", "p", "div", "tr", "li", "table", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "ul", "ol"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: List[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BREAK:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("\t")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BREAK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """What an HTML output says, as plain text (tags dropped, script and style content too)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t]*\n[ \t\n]*", "\n", "".join(parser.parts))
    return text.strip()
