"""The last pass over a feedback page: an allow-list sanitiser that leaves it inert, whatever reached it.

``inert_page(html)`` rebuilds the page: a head of its own (charset, a ``Content-Security-Policy`` meta that
forbids every script and every load but ``data:`` images, the escaped title, the page's style sheets
through ``inert_css``) and the body through ``nh3`` (the ammonia sanitiser) with an allow-list of tags and
attributes: text, tables, lists, code, ``<details>``, links (http, https, mailto, relative) and images
whose source is a base64 PNG, JPEG or GIF. Scripts, styles and templates inside the body go with their
content; event handlers, ``srcdoc``, forms, frames, objects, ``<base>`` and ``<meta>`` are never kept.

``inert_css(text)`` keeps a style sheet's rules but no ``@import`` (nor any at-rule other than ``@media``,
``@supports``, ``@keyframes``, ``@font-face`` and ``@page``) and no declaration that loads anything but a
``data:image/`` URL; a ``<`` becomes a CSS escape, so nothing in it can end its ``<style>`` element.

``InertHTMLExporter`` is nbconvert's ``HTMLExporter`` whose output goes through ``inert_page``:
``nbgrader_config.py`` makes it ``GenerateFeedback.exporter_class``.
"""

from __future__ import annotations

import html as html_lib
import re
from functools import lru_cache
from html.parser import HTMLParser
from typing import List, Optional

import nh3
import tinycss2
from nbconvert.exporters import HTMLExporter

PAGE_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'"
TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "caption",
    "center",
    "cite",
    "code",
    "col",
    "colgroup",
    "dd",
    "del",
    "details",
    "dfn",
    "div",
    "dl",
    "dt",
    "em",
    "figcaption",
    "figure",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "img",
    "ins",
    "kbd",
    "li",
    "mark",
    "ol",
    "p",
    "pre",
    "q",
    "s",
    "samp",
    "small",
    "span",
    "strike",
    "strong",
    "sub",
    "summary",
    "sup",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "tr",
    "tt",
    "u",
    "ul",
    "var",
    "wbr",
}
DROPPED_WITH_CONTENT = {
    "script",
    "style",
    "template",
    "title",
    "noscript",
    "textarea",
    "xmp",
    "noembed",
    "noframes",
    "iframe",
    "object",
    "embed",
    "applet",
    "select",
    "option",
    "svg",
    "math",
}
ATTRIBUTES = {
    "*": {"class", "id", "title", "lang", "dir", "style", "align"},
    "a": {"href", "name"},
    "img": {"src", "alt", "width", "height"},
    "ol": {"start", "type"},
    "td": {"colspan", "rowspan", "valign"},
    "th": {"colspan", "rowspan", "valign", "scope"},
    "col": {"span"},
    "colgroup": {"span"},
    "details": {"open"},
}
STYLE_PROPERTIES = {
    "color",
    "background-color",
    "font-weight",
    "font-style",
    "font-family",
    "font-size",
    "text-decoration",
    "text-align",
    "vertical-align",
    "white-space",
    "width",
    "height",
    "max-width",
    "min-width",
    "margin",
    "margin-left",
    "margin-right",
    "margin-top",
    "margin-bottom",
    "padding",
    "padding-left",
    "padding-right",
    "padding-top",
    "padding-bottom",
    "border",
    "border-collapse",
    "border-spacing",
    "display",
    "overflow",
    "overflow-x",
}
STYLE_FUNCTIONS = {"rgb", "rgba", "hsl", "hsla", "calc"}  # a style attribute calls nothing else (no url, no expression)
IMAGE_SOURCE = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/]+={0,2}$")
LINK = re.compile(r"^(https?:|mailto:|#|[^:]*$)", re.IGNORECASE)
AT_RULES = {"media", "supports", "keyframes", "-webkit-keyframes", "font-face", "page"}
NESTED_AT_RULES = {"media", "supports"}


def _attribute(tag: str, name: str, value: str) -> Optional[str]:
    """nh3's last word on an attribute the allow-list kept: image sources only base64 raster data,
    links only http(s), mailto or relative (no scheme at all), style only colours and sizes (no function but
    ``STYLE_FUNCTIONS``, no escapes)."""
    compact = re.sub(r"[\x00-\x20]+", "", value)
    if tag == "img" and name == "src":
        return value if IMAGE_SOURCE.match(compact) else None
    if name == "href":
        return value if LINK.match(compact) else None
    if name == "style":
        calls = {c.lower() for c in re.findall(r"([A-Za-z_-]+)\s*\(", value)}
        return value if calls <= STYLE_FUNCTIONS and "\\" not in value else None
    return value


def inert_body(fragment: str) -> str:
    """``fragment`` (any HTML, a whole page included) as the allow-list keeps it (see the module doc)."""
    if not isinstance(fragment, str):
        raise TypeError(f"HTML to sanitise must be a str, got {type(fragment).__name__}")
    return nh3.clean(
        fragment,
        tags=TAGS,
        clean_content_tags=DROPPED_WITH_CONTENT,
        attributes=ATTRIBUTES,
        attribute_filter=_attribute,
        url_schemes={"http", "https", "mailto", "data"},
        filter_style_properties=STYLE_PROPERTIES,
        strip_comments=True,
    )


class _Head(HTMLParser):
    """The page's title and the ``<style>`` sheets that come before its ``<body>`` (the template's)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title: List[str] = []
        self.styles: List[str] = []
        self._in: Optional[str] = None
        self.body = False

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.body = True
        if not self.body and tag in ("title", "style"):
            self._in = tag
            if tag == "style":
                self.styles.append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self.body or self._in is None:
            return
        if self._in == "title":
            self.title.append(data)
        else:
            self.styles[-1] += data


def inert_page(page: str) -> str:
    """A whole inert HTML page rebuilt from ``page`` (see the module doc)."""
    if not isinstance(page, str):
        raise TypeError(f"the page to sanitise must be a str, got {type(page).__name__}")
    head = _Head()
    head.feed(page)
    head.close()
    title = html_lib.escape(" ".join("".join(head.title).split()))
    styles = "".join(f"<style>\n{inert_css(sheet)}\n</style>\n" for sheet in head.styles if sheet.strip())
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{PAGE_POLICY}\">\n"
        f"<title>{title}</title>\n{styles}</head>\n<body>\n{inert_body(page)}\n</body>\n</html>\n"
    )


def _loads_only_images(tokens) -> bool:
    """True when no token of ``tokens`` (nested blocks and functions included) loads anything but a
    ``data:image/`` URL."""
    for token in tokens:
        if token.type == "url" and not _image_url(token.value):
            return False
        if token.type == "function":
            if token.lower_name in ("url", "src", "image-set", "image", "cross-fade", "element"):
                strings = [t.value for t in token.arguments if t.type == "string"]
                if token.lower_name in ("url", "src") and not (len(strings) == 1 and _image_url(strings[0])):
                    return False
            if token.lower_name == "expression" or not _loads_only_images(token.arguments):
                return False
        if token.type in ("() block", "[] block", "{} block") and not _loads_only_images(token.content):
            return False
    return True


def _image_url(url: str) -> bool:
    return re.sub(r"\s+", "", url).lower().startswith("data:image/")


def _rules(rules) -> List[str]:
    out = []
    for rule in rules:
        if rule.type == "qualified-rule":
            if not _loads_only_images(rule.prelude):
                continue
            declarations = [
                d
                for d in tinycss2.parse_declaration_list(rule.content, skip_comments=True, skip_whitespace=True)
                if d.type == "declaration" and _loads_only_images(d.value)
            ]
            body = "; ".join(
                f"{d.name}: {tinycss2.serialize(d.value).strip()}" + (" !important" if d.important else "")
                for d in declarations
            )
            out.append(f"{tinycss2.serialize(rule.prelude).strip()} {{ {body} }}")
        elif rule.type == "at-rule" and rule.lower_at_keyword in AT_RULES and _loads_only_images(rule.prelude):
            prelude = tinycss2.serialize(rule.prelude).strip()
            if rule.content is None:
                continue
            if rule.lower_at_keyword in NESTED_AT_RULES:
                inner = _rules(tinycss2.parse_rule_list(rule.content, skip_comments=True, skip_whitespace=True))
                out.append(f"@{rule.at_keyword} {prelude} {{\n" + "\n".join(inner) + "\n}")
            elif _loads_only_images(rule.content):
                out.append(f"@{rule.at_keyword} {prelude} {{{tinycss2.serialize(rule.content)}}}")
    return out


@lru_cache(maxsize=16)
def inert_css(text: str) -> str:
    """``text`` (a style sheet) as the module doc says. Cached: every feedback page of a lab has the same."""
    if not isinstance(text, str):
        raise TypeError(f"a style sheet must be a str, got {type(text).__name__}")
    rules = tinycss2.parse_stylesheet(text, skip_comments=True, skip_whitespace=True)
    return "\n".join(_rules(rules)).replace("<", "\\3c ")


class InertHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter (same templates and options) whose page goes through ``inert_page``."""

    def from_notebook_node(self, nb, resources=None, **kw):
        output, resources = super().from_notebook_node(nb, resources, **kw)
        return inert_page(output), resources
