"""Byte-level tokenizer of the tiny model: token id = one UTF-8 byte (vocabulary of 256)."""

from __future__ import annotations

from typing import List, Sequence

VOCAB_SIZE = 256


def encode(text: str) -> List[int]:
    """The UTF-8 bytes of ``text`` as token ids 0..255."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return list(text.encode("utf-8"))


def decode(token_ids: Sequence[int]) -> str:
    """Token ids back to text; bytes that do not form valid UTF-8 show as U+FFFD."""
    ids = list(token_ids)
    bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < VOCAB_SIZE]
    if bad:
        raise ValueError(f"token ids must be ints in 0..{VOCAB_SIZE - 1}, got {bad[:5]}")
    return bytes(ids).decode("utf-8", errors="replace")
