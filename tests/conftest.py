"""Shared fixtures and paths for the package tests."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SEEDS_DIR = Path(os.environ.get("PAGED_KV_SEEDS", REPO_ROOT.parent / "shared" / "seeds"))

# CI runs every property test with at least 200 examples (the bar); locally too.
settings.register_profile("course", max_examples=200, deadline=None)
settings.load_profile("course")


@pytest.fixture
def seeds_dir() -> Path:
    if not (SEEDS_DIR / "paged-attention-tutorial.txt").exists():
        pytest.skip(f"the seed documents are not at {SEEDS_DIR} (set PAGED_KV_SEEDS to their folder)")
    return SEEDS_DIR
