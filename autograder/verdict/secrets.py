"""No hidden-test or grader text comes back from a grading kernel, whatever route a message takes.

The box cannot read the hidden tests or the graders (``autograder.box.trust`` checks it before grading), so a
kernel has no such text to send. As defence in depth, every message that reaches the feedback, a platform's
results or the instructor's log passes ``scrub``: a line that carries one of the lab's **secret lines** is
replaced by ``REMOVED``. The secret lines are the distinctive lines of the source notebook's hidden-test
regions and the code lines of the grader modules those regions import (with the other modules of their lab's
folder: ``grader_files``); a line any student can see (elsewhere
in the notebook), a short one, a comment or an import, and the graders' message text (in quotes: the hints a
failed check shows) are not secret.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import Iterable, Tuple

from autograder.course.notebook import cell_text, checks_modules, grader_files, hidden_regions, without_hidden

REMOVED = "[a line of the grader's hidden tests was removed here]"
MIN_HIDDEN = 16  # characters: shorter hidden-test lines (``grader.x(M)``) are too common to be a secret
MIN_GRADER = 24  # characters of a grader's code line
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@functools.lru_cache(maxsize=64)
def _secret_lines(path: str, _mtime: float) -> Tuple[str, ...]:
    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    texts = [cell_text(c.get("source")) for c in cells]
    visible = "\n".join(without_hidden(t) for t in texts)
    lines, modules = set(), set()
    for region in (r for t in texts for r in hidden_regions(t)):
        for line in region.splitlines():
            code = line.strip()
            if len(code) >= MIN_HIDDEN and not code.startswith("#") and code not in visible:
                lines.add(code)
        try:
            tree = ast.parse(region)
        except SyntaxError:
            continue
        modules |= checks_modules(tree)
    for name in sorted(modules):
        try:
            sources = [path.read_text(encoding="utf-8") for path in grader_files(name)]
        except (ImportError, OSError, TypeError):
            continue
        for source in sources:
            lines |= _grader_lines(source, visible)
    return tuple(sorted(lines, key=len, reverse=True))


def _grader_lines(source: str, visible: str) -> set:
    """The secret lines of one grader module's ``source``: its code lines (not its message text) no student saw."""
    texts_at = _string_lines(source)
    lines = set()
    for number, line in enumerate(source.splitlines(), start=1):
        code = line.strip()
        if (
            number not in texts_at
            and len(code) >= MIN_GRADER
            and '"' not in code
            and "'" not in code
            and not code.startswith(("#", "from ", "import "))
            and code not in visible
        ):
            lines.add(code)
    return lines


def _string_lines(source: str) -> set:
    """Line numbers inside a string of several lines (a docstring, a message): text a check may show, not code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.end_lineno
        and node.end_lineno > node.lineno
        for n in range(node.lineno, node.end_lineno + 1)
    }


def secret_lines(source_notebook: Path) -> Tuple[str, ...]:
    """The secret lines of the lab whose source notebook is ``source_notebook`` (cached per file version)."""
    path = Path(source_notebook)
    return _secret_lines(str(path), path.stat().st_mtime)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every line that carries a secret line replaced by ``REMOVED`` (colours ignored)."""
    secrets = tuple(secrets)
    if not secrets or not text:
        return text
    out = []
    for line in str(text).split("\n"):
        plain = _ANSI.sub("", line)
        out.append(REMOVED if any(s in plain for s in secrets) else line)
    return "\n".join(out)


def scrub_outputs(cells, secrets: Iterable[str]) -> int:
    """Scrub every code cell's outputs in place (streams, errors, their tracebacks, plain text); returns how many
    lines were removed."""
    secrets = tuple(secrets)
    removed = 0
    if not secrets:
        return 0

    def clean(value):
        nonlocal removed
        if isinstance(value, list):
            return [clean(v) for v in value]
        if not isinstance(value, str):
            return value
        result = scrub(value, secrets)
        removed += result.count(REMOVED) - value.count(REMOVED)
        return result

    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", []):
            for key in ("text", "evalue", "ename", "traceback"):
                if key in output:
                    output[key] = clean(output[key])
            data = output.get("data")
            if isinstance(data, dict):
                for kind in ("text/plain", "text/markdown", "text/html", "text/latex"):
                    if kind in data:
                        data[kind] = clean(data[kind])
    return removed
