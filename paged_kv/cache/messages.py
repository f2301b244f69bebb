"""The mechanisms' texts a student reads: the messages of their exceptions, in English.

The mechanisms (``cache``, ``kernels``, ``engine``) never import the teaching aids, so they cannot translate;
the teaching aids show such a message in the notebook's language where they show it (``paged_kv.lab.i18n``
translates a text by its template, and a message inside a teaching aid's own sentence with it).
``tools/message_catalogs.py`` finds the texts by reading the code: the message of every exception made with a
string literal or an f-string (``raise ValueError(f"...")``, ``return RuntimeError("...")``) and of every
``assert``. ``N_`` marks the others (a constant, a piece an f-string fills in); it does nothing.
"""

from __future__ import annotations


def N_(text: str) -> str:
    """Mark ``text`` for the teaching aids' catalog (``tools/message_catalogs.py``); returns it unchanged."""
    return text
