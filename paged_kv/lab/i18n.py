"""The language a notebook speaks to its student: its messages, hints and pictures (teaching aids only).

English is the source of every text. A translated notebook (``course/zh_CN/...``) says its language once, in its
setup cell (``set_language("zh_CN")``); a grading box says it with ``PAGED_KV_LANG`` (read from the notebook's
metadata by the grader). ``translate(text)`` returns ``text`` in the current language, or ``text`` itself where no
translation is known, so an untranslated string is English, never an error.
"""

from __future__ import annotations

import os
from typing import Optional

SOURCE = "en"
SUPPORTED = ("en", "zh_CN")
_chosen: Optional[str] = None


def set_language(language: str) -> None:
    """Make ``language`` (one of ``SUPPORTED``) the notebook's language for what follows in this kernel."""
    global _chosen
    if not isinstance(language, str) or language not in SUPPORTED:
        raise ValueError(f"language must be one of {', '.join(SUPPORTED)}, not {language!r}")
    _chosen = language


def language() -> str:
    """The current language: what ``set_language`` chose, else ``PAGED_KV_LANG`` where it names a supported one,
    else English."""
    if _chosen is not None:
        return _chosen
    wanted = os.environ.get("PAGED_KV_LANG", "")
    return wanted if wanted in SUPPORTED else SOURCE


def translate(text: str) -> str:
    """``text`` in the current language (``text`` itself where there is no translation)."""
    return text
