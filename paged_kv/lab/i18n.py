"""The language a notebook speaks to its student: its messages, hints and pictures (teaching aids only).

English is the source of every text. A translated notebook (``course/zh_CN/...``) says its language once, in its
setup cell (``set_language("zh_CN")``); a grading box says it with ``PAGED_KV_LANG`` (read from the notebook's
metadata by the grader); trusted code that serves several languages says it for a block of its own code with
``speaking(language)``. ``translate(text)`` (also spelled ``_``) returns ``text`` in the current language, or
``text`` itself where no translation is known, so an untranslated string is English, never an error.

Translations are gettext's: the English text is the key (``msgid``). A key may be a *template*: the text of an
f-string with its ``{...}`` fields as written in the code (``"seq_len={n}: blocks taken"``; a literal brace is
doubled, as in ``str.format``). A finished text matches a template when the template's literal parts match it
exactly and each field matches something; the translation gets the same fields filled with what they matched, each
itself translated where the catalog knows it (a message shown inside another: ``"raised {name}: {error}"`` with a
package's ``ValueError`` in ``{error}``, a check's case inside ``"{case}: seq_len"``). So
``_(f"seq_len={n}: blocks taken")`` and a code cell's ``expect_equal(f"seq_len={n}: ...", ...)`` are translated
without the code changing. The translations the package reads are compiled into ``locale/<language>/LC_MESSAGES/
paged_kv_course.mo`` (gettext's binary form, read with the standard library) from the ``.po`` catalogs by
``python -m tools.translations update`` (``tools/message_catalogs.py``).
"""

from __future__ import annotations

import gettext
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

SOURCE = "en"
SUPPORTED = ("en", "zh_CN")
DOMAIN = "paged_kv_course"
LOCALE_DIR = Path(__file__).resolve().with_name("locale")
MIN_LITERAL = 4  # non-space characters of literal text a template needs (a bare "{x}" would match anything)
FIELD_DEPTH = 3  # how deep a field's text is itself translated (a message in a message in a message)
_chosen: Optional[str] = None
_speaking: ContextVar[Optional[str]] = ContextVar("paged_kv_speaking", default=None)


def _checked(language: str) -> str:
    if not isinstance(language, str) or language not in SUPPORTED:
        raise ValueError(f"language must be one of {', '.join(SUPPORTED)}, not {language!r}")
    return language


def set_language(language: str) -> None:
    """Make ``language`` (one of ``SUPPORTED``) the notebook's language for what follows in this kernel.

    In Chinese, the course's pictures also get the CJK font the package ships (``paged_kv.lab.figure``)."""
    global _chosen
    _chosen = _checked(language)


def language() -> str:
    """The current language: ``speaking``'s inside its block, else what ``set_language`` chose, else
    ``PAGED_KV_LANG`` where it names a supported one, else English."""
    spoken = _speaking.get()
    if spoken is not None:
        return spoken
    if _chosen is not None:
        return _chosen
    wanted = os.environ.get("PAGED_KV_LANG", "")
    return wanted if wanted in SUPPORTED else SOURCE


@contextmanager
def speaking(language: str) -> Iterator[str]:
    """Within the block, ``language`` is the current language (of this thread or task only); then what it was."""
    token = _speaking.set(_checked(language))
    try:
        yield language
    finally:
        _speaking.reset(token)


# -- templates ----------------------------------------------------------------------------------------------
def template_pieces(template: str) -> List[Tuple[str, bool]]:
    """``template`` cut into ``(text, is_field)`` pieces: literal text (``{{``/``}}`` read as one brace) and the
    fields' inner text (``"n"`` for ``{n}``, ``"x!r:>4"`` for ``{x!r:>4}``; nested braces are kept whole)."""
    pieces: List[Tuple[str, bool]] = []
    literal, i = [], 0
    while i < len(template):
        char = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            literal.append(char)
            i += 2
            continue
        if char != "{":
            literal.append(char)
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(template) and depth:
            depth += {"{": 1, "}": -1}.get(template[j], 0)
            j += 1
        if depth:  # an unclosed brace is text
            literal.append(template[i:])
            break
        if literal:
            pieces.append(("".join(literal), False))
            literal = []
        pieces.append((template[i + 1 : j - 1], True))
        i = j
    if literal:
        pieces.append(("".join(literal), False))
    return pieces


def fields(template: str) -> List[str]:
    """The fields of ``template`` in order (each as written between its braces)."""
    return [text for text, is_field in template_pieces(template) if is_field]


def as_template(text: str) -> str:
    """A plain text as a template with no field (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def literal_text(template: str) -> str:
    """The literal parts of ``template``, joined (what a match must find as it is)."""
    return "".join(text for text, is_field in template_pieces(template) if not is_field)


_NUMBER = r" *[-+]?(?:(?:[0-9][0-9,_]*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|nan)%? *"


def _format_spec(field: str) -> str:
    """The format spec of a field as written (``"6.1%"`` for ``util:6.1%``), "" when it has none: the text after
    the last ``:`` outside brackets and quotes (``bad[:5]`` has none)."""
    depth, quote, cut = 0, "", -1
    for i, char in enumerate(field):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == ":" and depth == 0:
            cut = i
    return field[cut + 1 :] if cut >= 0 else ""


def _field_pattern(field: str) -> str:
    """What a field matches: a number where its format spec makes one (``{ratio:.2f}``, ``{n:,}``), else anything
    (as little as the rest of the template allows)."""
    spec = _format_spec(field)
    if spec and (spec[-1] in "dfFeEgGn%" or spec.endswith(",") or spec.endswith("_")):
        return _NUMBER
    return ".*?"


class _Template:
    def __init__(self, msgid: str, msgstr: str):
        pieces = template_pieces(msgid)
        groups: Dict[str, str] = {}
        pattern = []
        for text, is_field in pieces:
            if not is_field:
                pattern.append(re.escape(text))
            elif text in groups:
                pattern.append(f"(?P={groups[text]})")
            else:
                groups[text] = f"f{len(groups)}"
                pattern.append(f"(?P<{groups[text]}>{_field_pattern(text)})")
        self.regex = re.compile("".join(pattern), re.DOTALL)
        self.groups = groups
        self.anchor = max((t for t, f in pieces if not f), key=len, default="")
        self.weight = sum(len(t) for t, f in pieces if not f)
        self.translation = template_pieces(msgstr)

    def fill(self, match: "re.Match", field_text: Callable[[str], str] = str) -> str:
        """The translation with each field filled with what it matched, passed through ``field_text``."""
        out = []
        for text, is_field in self.translation:
            out.append(field_text(match.group(self.groups[text])) if is_field and text in self.groups else text)
        return "".join(out)


class Catalog:
    """One language's translations: ``{msgid: msgstr}``, msgids being texts or templates (see the module doc)."""

    def __init__(self, pairs: Mapping[str, str]):
        self.exact: Dict[str, str] = {}
        self.templates: List[_Template] = []
        self.by_template: Dict[str, str] = {}  # a template's translation, its fields as written
        for msgid, msgstr in pairs.items():
            if not msgid or not msgstr:
                continue
            self.by_template[msgid] = msgstr
            if fields(msgid):
                if len("".join(literal_text(msgid).split())) >= MIN_LITERAL:
                    self.templates.append(_Template(msgid, msgstr))
            else:
                self.exact[literal_text(msgid)] = literal_text(msgstr)
        self.templates.sort(key=lambda t: -t.weight)  # the first match is the one with the most literal text

    @classmethod
    def from_mo(cls, path: Path) -> "Catalog":
        """The translations compiled at ``path`` (a gettext ``.mo`` file); empty when there is none."""
        try:
            with open(path, "rb") as handle:
                compiled = gettext.GNUTranslations(handle)
        except OSError:
            return cls({})
        return cls({k: v for k, v in compiled._catalog.items() if isinstance(k, str) and k})

    def __len__(self) -> int:
        return len(self.exact) + len(self.templates)

    def lookup(self, text: str, depth: int = 0) -> Optional[str]:
        """The translation of ``text``, or None. A template's fields are translated too, where the catalog knows
        what they matched (``FIELD_DEPTH`` levels deep)."""
        found = self.exact.get(text)
        if found is not None:
            return found
        for template in self.templates:
            if template.anchor in text:
                match = template.regex.fullmatch(text)
                if match:
                    return template.fill(match, lambda value: self._field(value, depth + 1))
        return None

    def _field(self, value: str, depth: int) -> str:
        if depth > FIELD_DEPTH or not value.strip():
            return value
        found = self.lookup(value, depth)
        return value if found is None else found

    def translate(self, text: str) -> str:
        """``text`` translated, or ``text`` itself."""
        found = self.lookup(text)
        return text if found is None else found


def catalog_path(language: str, locale_dir: Path = LOCALE_DIR) -> Path:
    """Where the compiled translations of ``language`` live."""
    return Path(locale_dir) / language / "LC_MESSAGES" / f"{DOMAIN}.mo"


@lru_cache(maxsize=None)
def catalog(language: str) -> Catalog:
    """The package's translations into ``language`` (read once)."""
    return Catalog.from_mo(catalog_path(_checked(language)))


def translate(text: str) -> str:
    """``text`` in the current language (``text`` itself where there is no translation, or in English)."""
    current = language()
    if current == SOURCE or not isinstance(text, str) or not text:
        return text
    return catalog(current).translate(text)


_ = translate  # the conventional name by which the package marks a text to translate where it is used


def told(template: str, text: str) -> bool:
    """Whether ``text`` holds ``template`` (a msgid) filled in, in English or in the current language: how code
    recognises a message made with ``_(f"...")`` in whichever language it was made (each field matches anything)."""
    forms = {template}
    current = language()
    if current != SOURCE:
        forms.add(catalog(current).by_template.get(template, template))
    return any(_Template(form, form).regex.search(text) for form in forms)


def N_(text: str) -> str:
    """Mark ``text`` (a constant defined before the language is known) for the catalogs; it is translated
    where it is used, with ``_``."""
    return text
