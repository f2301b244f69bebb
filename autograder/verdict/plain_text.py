"""Text a student controls, written into markdown or HTML so that it can only ever be read as text.

``markdown_text(text)`` turns every character that markdown or HTML could read as markup (everything but
letters, digits and spaces) into a numeric character reference, and line ends into spaces: the result,
put anywhere in a markdown cell, renders as exactly ``text``, so a backtick cannot close a code span, a
``<`` cannot open a tag and a ``$`` cannot start math. ``html_text(text)`` is the same for an HTML element's
content, line ends kept. ``note_lines(lines)`` is the *Grading notes* cell's list, built from them.
"""

from __future__ import annotations

from typing import Iterable


def _check(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text to show must be a str, got {type(text).__name__}: check what built this note")
    return text


def _reference(char: str) -> str:
    return char if char.isascii() and (char.isalnum() or char == " ") else f"&#{ord(char)};"


def markdown_text(text: str) -> str:
    """``text`` as markdown that renders as exactly that text, on one line (see the module doc)."""
    return "".join(_reference(c) for c in " ".join(_check(text).splitlines()))


def html_text(text: str) -> str:
    """``text`` as the content of an HTML element (a ``<pre>``): every character but letters, digits,
    spaces and line ends as a character reference."""
    return "\n".join("".join(_reference(c) for c in line) for line in _check(text).split("\n"))


def note_lines(lines: Iterable[str]) -> str:
    """Markdown for the Grading notes: a line starting with ``- `` is a list item, the rest a paragraph
    line; everything after that marker is text (``markdown_text``)."""
    out = []
    for line in lines:
        line = _check(line)
        if line.startswith("- "):
            out.append("- " + markdown_text(line[2:]))
        else:
            out.append(markdown_text(line))
    return "\n".join(out)
