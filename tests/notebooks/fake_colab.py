"""The fake Colab runtime (fake_runtime.py, built from colab_image.py): torch and Colab's versions of the
packages the course touches (ipywidgets 7.7.1, IPython 7.34, matplotlib, numpy, xxhash), no course package,
and ``google.colab`` imported in its kernel, so a setup cell takes its Colab branch."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List

from colab_image import FAKE_COLAB_REQUIREMENTS
from fake_runtime import build_course_wheel, fresh_runtime, freeze, run_in_runtime, runtime_python

__all__ = ["build_course_wheel", "fake_colab_python", "fresh_runtime", "freeze", "run_like_colab"]


def fake_colab_python() -> Path:
    """The fake Colab's python, built on first use and reused while its requirements stay the same."""
    return runtime_python("colab", FAKE_COLAB_REQUIREMENTS)


def run_like_colab(
    python: Path, notebooks: Dict[str, List[str]], work: Path, stop_on_error: Iterable[str] = (), timeout_s=1200
) -> dict:
    """``fake_runtime.run_in_runtime`` in the fake Colab (this machine's pip settings: Colab's pip reaches PyPI)."""
    return run_in_runtime(python, notebooks, work, "colab", stop_on_error=stop_on_error, timeout_s=timeout_s)
