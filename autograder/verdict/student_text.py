"""The autograder's texts a student reads, in the notebook's language: the *Grading notes*, what a limit shows in a
cell, what collection repaired. Instructor-facing text (logs, reports, the insight page) stays English.

English is the source: each text is written in English where it is made, marked ``for_student(text, language)``
(or ``N_`` where a constant is defined, then ``for_student`` where it is shown), and translated from the catalog
``locale/<language>.po`` beside this module, compiled to ``locale/<language>/LC_MESSAGES/autograder.mo``
(``python -m tools.translations update``). A text may be an f-string: its template matches the finished text
(``paged_kv.lab.i18n``). The language is always given: the trusted side takes it from the notebook it grades (its
release's metadata, ``language_of``), never from the environment of the student's code.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from paged_kv.lab.i18n import SOURCE, SUPPORTED, Catalog, N_, catalog_path  # noqa: F401 (N_: the modules mark with it)

LOCALE_DIR = Path(__file__).resolve().with_name("locale")
DOMAIN = "autograder"


def _checked(language: str) -> str:
    if language not in SUPPORTED:
        raise ValueError(f"language must be one of {', '.join(SUPPORTED)}, not {language!r}")
    return language


@lru_cache(maxsize=None)
def catalog(language: str) -> Catalog:
    """The autograder's translations into ``language`` (read once)."""
    return Catalog.from_mo(catalog_path(language, LOCALE_DIR).with_name(f"{DOMAIN}.mo"))


def for_student(text: str, language: str) -> str:
    """``text`` (the autograder's English) in ``language``; ``text`` itself in English or where there is no
    translation. ValueError for a language the course does not have."""
    if _checked(language) == SOURCE or not text:
        return text
    return catalog(language).translate(text)


def language_of(nb: Any) -> str:
    """The language of a graded notebook, as its metadata says (``paged_kv.language``: set by the course's
    release, which the notebook to grade is rebuilt from); English when it says none or one the course lacks."""
    metadata = nb.get("metadata", {}) if isinstance(nb, dict) else getattr(nb, "metadata", {})
    course = metadata.get("paged_kv") if isinstance(metadata, dict) else None
    language = course.get("language") if isinstance(course, dict) else None
    return language if language in SUPPORTED else SOURCE
