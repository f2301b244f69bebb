"""Root pytest configuration: notebook kernels started by nbval see the repository on their path."""

import os
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent)
_parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if ROOT not in _parts:
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + _parts)
os.environ.setdefault("MPLBACKEND", "Agg")

# Triton must learn its mode (interpreter on CPU) before anything imports it.
from paged_kv.kernels.triton_mode import configure  # noqa: E402

configure()


import pytest  # noqa: E402 (after the Triton mode is set)
from hypothesis import settings  # noqa: E402

SEEDS_DIR = Path(os.environ.get("PAGED_KV_SEEDS", Path(ROOT).parent / "shared" / "seeds"))

# Property tests run at least 200 examples each, in CI and locally.
settings.register_profile("course", max_examples=200, deadline=None)
settings.load_profile("course")


@pytest.fixture
def seeds_dir() -> Path:
    """The folder of the seed documents (``../shared/seeds``); tests that need it skip without it."""
    if not (SEEDS_DIR / "paged-attention-tutorial.txt").exists():
        pytest.skip(f"the seed documents are not at {SEEDS_DIR} (set PAGED_KV_SEEDS to their folder)")
    return SEEDS_DIR
