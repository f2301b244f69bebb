"""How a message block's lines are laid out, in any script: aligned ``label: text`` fields and wrapped hints.

A notebook shows a block as monospaced text: a CJK character takes two columns, and a hint may wrap between two
Chinese characters as between two words, but never inside an identifier, a number or a code span.
"""

from __future__ import annotations

import re
import textwrap

from paged_kv.lab.i18n import SOURCE, N_, _, language

HINT_WIDTH = 100  # columns per line of a rendered hint
LABEL_WIDTH = 10  # columns of a field's label, its colon and the spaces after it
_WIDE = "\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6"
_IS_WIDE = re.compile(f"[{_WIDE}]")
_TOKENS = re.compile(f"[{_WIDE}]|\\s+|[^\\s{_WIDE}]+")  # one wide character, a run of spaces, or a word
LABELS = (N_("expected:"), N_("got:"), N_("hint:"), N_("where:"), N_("before:"))  # the fields' labels
_NO_START = "，。；：！？、）」』》】,.;:!?)"  # signs that never begin a line


def width(text: str) -> int:
    """Columns ``text`` takes in a notebook's output (a CJK character or a fullwidth sign takes two)."""
    return sum(2 if _IS_WIDE.match(char) else 1 for char in text)


def field(label: str, text: str) -> str:
    """One ``  label: text`` line of a block (``label`` is the English ``"expected:"``, ``"hint:"``...), the
    label translated and padded so that the texts of a block's fields start in one column."""
    label = _(label)
    return "  " + label + " " * max(1, LABEL_WIDTH - width(label)) + text


def wrap(line: str, columns: int = HINT_WIDTH, indent: int = 2 + LABEL_WIDTH) -> str:
    """``line`` wrapped to ``columns``, later lines indented by ``indent``: between words (English: as
    ``textwrap``), and in Chinese also between two CJK characters, never before a closing sign."""
    if language() == SOURCE:
        return "\n".join(
            textwrap.wrap(line, columns, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False)
        )
    lines, current = [], ""
    for token in _TOKENS.findall(line):
        full = current.strip() and width(current) + width(token.rstrip()) > columns
        if full and not token.isspace() and token[0] not in _NO_START:
            lines.append(current.rstrip())
            current = " " * indent
        if not (token.isspace() and current.isspace()):
            current += token
    lines.append(current.rstrip())
    return "\n".join(lines)
