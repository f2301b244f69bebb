"""Runs the tutorial chapter's own test block (read from the seed file at test time, never copied)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

START_MARKER = "def _legacy_paged_attention_manager"
END_MARKER = "test_paged_attention_manager()"


def tutorial_test_source(seeds_dir: Path) -> str:
    """The Python block that follows the tutorial's Step 4 code, up to its final call."""
    text = (seeds_dir / "paged-attention-tutorial.txt").read_text(encoding="utf-8")
    start = text.index(START_MARKER)
    start = text.rindex("\n", 0, start) + 1
    end = text.index("\n" + END_MARKER, start) + 1 + len(END_MARKER)
    # Keep the comment line right above the first function as well (it belongs to the block).
    comment_start = text.rindex("\n#", 0, start)
    return text[comment_start + 1 : end] + "\n"


def run_tutorial_tests(seeds_dir: Path, names: Dict[str, Any]) -> None:
    """Execute the tutorial's tests with ``names`` (Request, KVCacheManager, estimate_kv_cache_bytes)."""
    import typing

    import torch

    namespace: Dict[str, Any] = {"torch": torch, "Dict": typing.Dict, "List": typing.List, "Tuple": typing.Tuple}
    namespace.update(names)
    code = compile(tutorial_test_source(seeds_dir), "<tutorial tests>", "exec")
    exec(code, namespace)  # ends by calling test_paged_attention_manager()
    namespace["_legacy_paged_attention_manager"]()
