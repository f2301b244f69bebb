"""What a translated cell must keep of its English: the facts, the markup's skeleton and the glossary's terms.

A translation says what the English says, in the reader's language: so everything a reader could copy, check or
follow stays exactly as it is (``facts``): numbers (``2,048``, ``3.7.1``, ``bb823b3``'s digits), code spans,
identifiers written in prose (``nano-vllm``'s ``BlockManager``, ``sm_90``, ``fp16``, ``H100``), links, math, fenced
code, HTML tags; and the markup's skeleton (headings and their levels, each table's rows and columns, list items).
``differences`` names what a translation lost or added. ``glossary_misses`` names the glossary's checked terms
(``docs/glossary-zh_CN.md``, column *checked* = ``yes``) whose English is in a cell and whose Chinese is not in its
translation. Both are read by the catalog tests (``tests/i18n/``) and by ``python -m tools.translations status``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Tuple

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary-zh_CN.md"

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<(https?://[^>\s]+)>|(?<![(<\w])(https?://[^\s)<>\]]+)")
_TAG = re.compile(r"</?([a-zA-Z][a-zA-Z0-9]*)\b[^>]*>")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*[A-Za-z0-9_]|[A-Za-z]")
_HEADING = re.compile(r"^(#{1,6})\s", re.M)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+")
_NUMBERED = re.compile(r"^[ \t]*(\d+)\.[ \t]+")


@dataclass
class Facts:
    """What a cell's text states that a translation keeps exactly."""

    numbers: Counter
    code: Counter
    identifiers: set
    links: Counter
    math: Counter
    fences: List[str]
    tags: List[str]
    headings: List[int]
    tables: List[Tuple[int, int]]
    items: int


def _is_identifier(word: str) -> bool:
    """A word of prose a translation keeps as it is: a name with ``_`` or digits, CamelCase, or all capitals."""
    core = word.strip(".-+")
    if len(core) < 2:
        return False
    return (
        "_" in core
        or any(ch.isdigit() for ch in core)
        or re.search(r"[a-z][A-Z]", core) is not None
        or (core.isupper() and core.isalpha())
    )


def _identifiers(prose: str) -> set:
    """The names of ``prose`` (``_is_identifier``): a hyphenated name stays whole when it is a product's or a model's
    (``Llama-3.1-8B``, ``FlashAttention-2``, ``SHA-256``), else only its name-like parts count (``ShareGPT-shaped``
    keeps ``ShareGPT``, ``Width-4`` nothing: the rest is English to translate)."""
    found = set()
    for word in _WORD.findall(prose):
        word = word.strip(".-+")
        parts = word.split("-")
        later_named = all(_is_identifier(p) or p[:1].isupper() or re.fullmatch(r"[\d.]+", p) for p in parts[1:])
        versioned = any(re.search(r"[A-Za-z]", p) and re.search(r"\d", p) for p in parts[1:])
        if len(parts) > 1 and later_named and (_is_identifier(parts[0]) or versioned):
            found.add(word)
            continue
        found |= {p for p in parts if _is_identifier(p) and not re.fullmatch(r"[\d.,]+", p)}
    return found


def facts(text: str) -> Facts:
    """The facts of a markdown cell's ``text`` (see the module doc)."""
    fences = [block.strip() for block in _FENCE.findall(text)]
    rest = _FENCE.sub(" ", text)
    code = Counter(m.group(2).strip() for m in _CODE.finditer(rest))
    rest = _CODE.sub(" ", rest)
    math = Counter(m.strip() for m in _MATH.findall(rest))
    rest = _MATH.sub(" ", rest)
    links = Counter(next(g for g in m.groups() if g) for m in _LINK.finditer(rest))
    prose = _LINK.sub(" ", rest)
    tags = [m.group(1).lower() for m in _TAG.finditer(prose)]
    prose = _TAG.sub(" ", prose)
    numbers = Counter(_NUMBER.findall(prose))
    identifiers = _identifiers(prose)
    return Facts(
        numbers=numbers,
        code=code,
        identifiers=identifiers,
        links=links,
        math=math,
        fences=fences,
        tags=tags,
        headings=[len(m.group(1)) for m in _HEADING.finditer(rest)],
        tables=_tables(rest),
        items=_items(rest),
    )


def _items(text: str) -> int:
    """How many list items ``text`` has, as CommonMark reads them: a numbered line inside a paragraph (a wrapped
    "16. Lab 05 ...") starts no item unless it is numbered 1; inside a list, wrapped lines continue the item."""
    count, in_list, after_blank = 0, False, True
    for line in text.split("\n"):
        if not line.strip():
            after_blank = True
            continue
        numbered = _NUMBERED.match(line)
        item = bool(_BULLET.match(line)) or bool(numbered and (numbered.group(1) == "1" or after_blank or in_list))
        if item:
            in_list = True
        elif after_blank and not line.startswith((" ", "\t")):
            in_list = False
        count += item
        after_blank = False
    return count


def _tables(text: str) -> List[Tuple[int, int]]:
    """(rows, columns) of each markdown table (its separator row not counted)."""
    shapes, rows, columns = [], 0, 0
    for line in text.split("\n") + [""]:
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                rows += 1
                columns = max(columns, len(cells))
        elif rows:
            shapes.append((rows, columns))
            rows, columns = 0, 0
    return shapes


def _counted(what: str, english: Counter, translated: Counter) -> List[str]:
    lost = sorted((english - translated).elements())
    added = sorted((translated - english).elements())
    out = []
    if lost:
        out.append(f"{what} missing: {', '.join(map(repr, lost))}")
    if added:
        out.append(f"{what} not in the English: {', '.join(map(repr, added))}")
    return out


_MONTHS = ("January February March April May June July August September October November December").split()
_MONTH = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b")
# A number with a scale word, and the factor that restates it in the Chinese unit a reader expects: billion → 亿
# (10**8), million → 万 (10**4), thousand and K → 万.
_SCALED = re.compile(r"(?<![A-Za-z0-9_.])(\d+(?:\.\d+)?)(?:\s*(billion|million|thousand)\b|(K)\b)")
_RESTATED = {"billion": 10, "million": 100, "thousand": Decimal("0.1"), "K": Decimal("0.1")}


def _restated_numbers(english: str, english_numbers: Counter, translated_numbers: Counter) -> Counter:
    """``english_numbers`` as a Chinese writer may restate them: a month's name as its number (``April 2026`` →
    ``2026 年 4 月``) and a scaled number in 亿 or 万 (``2.1 billion`` → ``21 亿``, ``853 thousand`` →
    ``85.3 万``), each only where the translation does so; every other number stays as written."""
    numbers = Counter(english_numbers)
    prose = _CODE.sub(" ", _FENCE.sub(" ", english))
    for name in _MONTH.findall(prose):
        month = str(_MONTHS.index(name) + 1)
        if translated_numbers[month] > numbers[month]:
            numbers[month] += 1
    for value, word, k in _SCALED.findall(prose):
        restated = format((Decimal(value) * _RESTATED[word or k]).normalize(), "f")
        if numbers[value] > translated_numbers[value] and translated_numbers[restated] > numbers[restated]:
            numbers[value] -= 1
            numbers[restated] += 1
    return +numbers


def differences(english: str, translated: str) -> List[str]:
    """What ``translated`` lost or added of ``english``'s facts and skeleton; empty when it keeps them all."""
    en, tr = facts(english), facts(translated)
    out = []
    out += _counted("numbers", _restated_numbers(english, en.numbers, tr.numbers), tr.numbers)
    out += _counted("code spans", en.code, tr.code)
    out += _counted("links", en.links, tr.links)
    out += _counted("math", en.math, tr.math)
    lost = sorted(w for w in en.identifiers if w not in translated)
    if lost:
        out.append(f"names missing: {', '.join(map(repr, lost))}")
    if en.fences != tr.fences:
        out.append("fenced code differs (it stays exactly as in English)")
    if en.tags != tr.tags:
        out.append(f"HTML tags differ: {en.tags} in English, {tr.tags} translated")
    if en.headings != tr.headings:
        out.append(f"headings differ: levels {en.headings} in English, {tr.headings} translated")
    if en.tables != tr.tables:
        out.append(f"tables differ: (rows, columns) {en.tables} in English, {tr.tables} translated")
    if en.items != tr.items:
        out.append(f"list items differ: {en.items} in English, {tr.items} translated")
    return out


# ---- the glossary ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    english: str
    chinese: str
    checked: bool


def read_glossary(path: Path = GLOSSARY) -> List[Term]:
    """The glossary's rows (its first table whose header starts ``| English |``); ValueError on a malformed row."""
    terms: List[Term] = []
    in_table = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            if in_table:
                break
            continue
        if cells[0] == "English":
            in_table = True
            continue
        if not in_table or all(set(c) <= set("-: ") for c in cells):
            continue
        if len(cells) != 4 or not cells[0] or not cells[1] or cells[2] not in ("yes", "no"):
            raise ValueError(
                f"{path.name} line {number}: a row is | English | 简体中文 | yes/no | note |, got {line!r}"
            )
        terms.append(Term(cells[0], cells[1], cells[2] == "yes"))
    if not terms:
        raise ValueError(f"{path.name}: no table of terms (a header row starting `| English |`)")
    return terms


def _prose(text: str) -> str:
    """``text`` without what is never translated (fenced code, code spans, math, links' targets)."""
    text = _FENCE.sub(" ", text)
    text = _CODE.sub(" ", text)
    text = _MATH.sub(" ", text)
    return _LINK.sub(" ", text)


def term_pattern(term: str) -> re.Pattern:
    """The English term as prose uses it: any case, whole words, with the usual endings (s, es, ed, d, ing)."""
    words = r"\s+".join(re.escape(w) for w in term.split())
    return re.compile(rf"(?<![\w-]){words}(?:s|es|ed|d|ing)?(?![\w-])", re.I)


def glossary_misses(english: str, translated: str, terms: List[Term]) -> List[str]:
    """The checked terms whose English ``english`` uses and whose Chinese ``translated`` lacks (spaces ignored)."""
    prose, target = _prose(english), re.sub(r"\s+", "", translated)
    return [
        f"{t.english!r} is {t.chinese!r}"
        for t in terms
        if t.checked and term_pattern(t.english).search(prose) and re.sub(r"\s+", "", t.chinese) not in target
    ]


def glossary_by_english(terms: List[Term]) -> Dict[str, Term]:
    return {t.english: t for t in terms}
