"""Is this feedback page inert? ``live_markup(html)`` lists everything in it that a browser could run or
that could load or send something: the check the class simulation runs on every student's feedback.

Found, each as one line saying what and where (the line number in the page):

- elements that run or embed: ``script``, ``iframe``, ``frame``, ``frameset``, ``object``, ``embed``,
  ``applet``, ``form``, ``base``, ``link``, ``svg``, ``math``, ``portal``, and ``meta`` other than the
  charset and the page's own ``Content-Security-Policy`` (``http-equiv="refresh"`` navigates);
- attributes: any event handler (``on...``), ``srcdoc``, ``formaction``; an attribute that loads (``src``,
  ``data``, ``poster``, ``background``, ``srcset``, ...) anything but a ``data:`` PNG, JPEG or GIF image; a
  link (``href``, ``action``, ``xlink:href``, ...) whose scheme is ``javascript:``, ``vbscript:`` or ``data:``;
- style that loads or runs: ``expression(``, ``behavior:``, ``-moz-binding``, ``@import``, or a ``url(`` other than a
  ``data:image/`` one, in a ``style`` attribute or a ``<style>`` element.

The page is read with the standard library's HTML tokenizer, which decodes character references in
attribute values as browsers do; the pages it checks are written by ``autograder.feedback.inert_html``,
whose output is well-formed, so what it sees is what a browser sees.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import List, Union

LIVE_ELEMENTS = {
    "script",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "applet",
    "form",
    "base",
    "link",
    "svg",
    "math",
    "portal",
    "noscript",
    "template",
}
LOADS = {"src", "data", "poster", "background", "srcset", "codebase", "manifest", "ping", "dynsrc", "lowsrc", "icon"}
LINKS = {"href", "action", "xlink:href", "cite", "longdesc", "usemap", "formaction"}
RAW_IMAGE = re.compile(r"^data:image/(png|jpeg|gif);", re.IGNORECASE)
BAD_SCHEME = re.compile(r"^(javascript|vbscript|data|livescript|mocha):", re.IGNORECASE)
STYLE_URL = re.compile(r"url\s*\(\s*['\"]?\s*([^'\")\s]*)", re.IGNORECASE)
STYLE_LIVE = re.compile(r"expression\s*\(|@import|behavior\s*:|-moz-binding", re.IGNORECASE)


def _scheme_text(value: str) -> str:
    """A URL as a browser reads its scheme: control characters and spaces removed."""
    return re.sub(r"[\x00-\x20\x7f]+", "", value)


def _style_problems(style: str) -> List[str]:
    found = [f"style that runs or loads: {m.group(0)!r}" for m in STYLE_LIVE.finditer(style)]
    found += [
        f"style that loads {url[:60]!r}"
        for url in STYLE_URL.findall(style)
        if not _scheme_text(url).lower().startswith("data:image/")
    ]
    return found


class _Scanner(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: List[str] = []
        self._style = False

    def _say(self, what: str) -> None:
        self.found.append(f"line {self.getpos()[0]}: {what}")

    def handle_starttag(self, tag, attrs):
        self._check(tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._check(tag, attrs)

    def _check(self, tag, attrs):
        values = {name: (value or "") for name, value in attrs}
        if tag in LIVE_ELEMENTS:
            self._say(f"<{tag}> element")
        if tag == "meta":
            equiv = values.get("http-equiv", "").strip().lower()
            if equiv and equiv != "content-security-policy":
                self._say(f"<meta http-equiv={equiv!r}>")
        if tag == "style":
            self._style = True
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self._say(f"event handler {name}= on <{tag}>")
            elif name in ("srcdoc", "formaction"):
                self._say(f"{name}= on <{tag}>")
            for url in value.split(",") if name == "srcset" else [value]:
                url = _scheme_text(url)
                if name in LOADS and not RAW_IMAGE.match(url):
                    self._say(f"{name}={url[:40]!r} on <{tag}> (loads what is not a data: image)")
                elif name in LINKS and BAD_SCHEME.match(url):
                    self._say(f"{name}={url[:40]!r} on <{tag}>")
            if name == "style":
                for problem in _style_problems(value):
                    self._say(f"{problem} on <{tag}>")

    def handle_endtag(self, tag):
        if tag == "style":
            self._style = False

    def handle_data(self, data):
        if self._style:
            for problem in _style_problems(data):
                self._say(f"{problem} in <style>")


def live_markup(page: Union[str, Path]) -> List[str]:
    """What in ``page`` (HTML text, or the path of an HTML file) could run or load: one line each, empty
    when the page is inert (see the module doc)."""
    if isinstance(page, Path):
        page = page.read_text(errors="replace")
    if not isinstance(page, str):
        raise TypeError(f"live_markup reads HTML text or a Path, got {type(page).__name__}")
    scanner = _Scanner()
    scanner.feed(page)
    scanner.close()
    return scanner.found
