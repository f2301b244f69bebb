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


# ---- each lab's marker (``pytest -m lab05``, ``make check LAB=05-prefix-cache``): autograder/labs/markers.py ----
def pytest_configure(config):
    from autograder.labs.markers import lab_ids, marker

    for lab in lab_ids():
        config.addinivalue_line(
            "markers", f"{marker(lab)}: a test of lab {lab} (autograder/labs/markers.py says which)"
        )


# make test hands whole files to its two workers in collection order (Makefile: --dist loadfile
# --no-loadscope-reorder): the class simulation's two halves first, one per worker, then the other slow files,
# longest first (measured on 2 cores), then the rest as collected, so that no long file starts when the other
# worker is nearly done.
SLOW_FIRST = (
    "autograder/tests/test_class_simulation_a.py",
    "autograder/tests/test_class_simulation_b.py",
    "tests/notebooks/test_labs_in_browser.py",
    "autograder/tests/test_leftovers_in_containers.py",
    "tests/notebooks/test_labs_on_editions.py",
    "tests/notebooks/test_colab.py",
    "autograder/tests/test_platform_containers.py",
    "tests/notebooks/test_modelscope.py",
    "autograder/tests/test_release_and_grading.py",
    "autograder/tests/test_graders.py",
    "autograder/tests/test_editions.py",
    "autograder/labs/lab06_triton_paged_attention/tests/test_lab06_graders.py",
    "autograder/tests/test_grading_dies_whole.py",
)


def _slow_first(items) -> None:
    rank = {(Path(ROOT) / name): n for n, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.path), len(SLOW_FIRST)))  # stable: the rest keep their order


def pytest_collection_modifyitems(config, items):
    from autograder.labs.markers import labs_of_params, labs_of_path, marker

    _slow_first(items)

    by_path = {}
    for item in items:
        if item.path not in by_path:
            by_path[item.path] = labs_of_path(item.path)
        labs = set(by_path[item.path])
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            labs |= labs_of_params(callspec.params, callspec.id)
        for lab in sorted(labs):
            item.add_marker(marker(lab))
