"""A throwaway environment that pretends to be a Colab runtime, for the Colab tests.

It is a virtual environment (cached under .cache/fake-colab/, git-ignored) holding torch and
Colab's versions of the packages the course touches (ipywidgets 7.7.1, IPython 7.34, matplotlib,
numpy, xxhash: see colab_image.py), but not the course package. `run_like_colab` runs notebooks'
code cells there in an IPython shell with ``google.colab`` imported, as Colab's kernel has it, so a
setup cell takes its Colab branch and its ``%pip install`` really runs. The course package comes
from a wheel built from this checkout (standing in for the GitHub repository).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List

from colab_image import FAKE_COLAB_REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "fake-colab"
RUNNER = Path(__file__).with_name("fake_colab_kernel.py")


def _base_python() -> str:
    """The interpreter .venv was made from (a venv inside a venv would inherit nothing anyway)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _pip(python: Path, *args: str, log: Path) -> None:
    with open(log, "ab") as out:
        result = subprocess.run(
            [str(python), "-m", "pip", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1800,
            env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
        )
    if result.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed:\n" + log.read_text(errors="replace")[-3000:])


def fake_colab_python() -> Path:
    """The fake Colab's python, built on first use and reused while its requirements stay the same."""
    stamp_text = json.dumps([sys.version, FAKE_COLAB_REQUIREMENTS])
    stamp = hashlib.sha256(stamp_text.encode()).hexdigest()[:16]
    venv = CACHE / f"venv-{stamp}"
    python = venv / "bin" / "python"
    log = CACHE / "build.log"
    if not (venv / ".complete").exists():
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE.mkdir(parents=True)
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
        _pip(python, "install", "--quiet", *FAKE_COLAB_REQUIREMENTS, log=log)
        (venv / ".complete").write_text(stamp_text)
    return python


def fresh_runtime(python: Path) -> None:
    """Remove what a setup cell installs (the course package, Triton): a fresh Colab CPU runtime.

    Files an interrupted install left behind (an older layout of ``paged_kv``, no longer in any RECORD) go
    too: pip would leave them, and Python would import them instead of the wheel's."""
    _pip(python, "uninstall", "--yes", "--quiet", "paged-kv-course", "triton", log=CACHE / "build.log")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for leftover in Path(site).glob("paged_kv*"):
        shutil.rmtree(leftover, ignore_errors=True)


def freeze(python: Path) -> Dict[str, str]:
    """``{distribution name: version}`` installed in the environment of ``python``."""
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(out)}


def build_course_wheel(out_dir: Path) -> Path:
    """A wheel of the course package, built from a clean copy of this checkout's package files."""
    source = out_dir / "source"
    shutil.copytree(ROOT / "paged_kv", source / "paged_kv", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out_dir),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return next(out_dir.glob("paged_kv_course-*.whl"))


def run_like_colab(
    python: Path,
    notebooks: Dict[str, List[str]],
    work: Path,
    stop_on_error: Iterable[str] = (),
    timeout_s: float = 1200,
) -> dict:
    """Run each notebook's code cells (``{name: [cell source, ...]}``) in the fake Colab, in order.

    Returns ``{name: [{"ok": bool, "error": str, "shown": printed text}, ...]}``; the notebooks
    named in ``stop_on_error`` stop at their first failing cell, like Run All. Everything the shell
    printed is also in ``work/kernel.log``. Each notebook starts with a fresh namespace, like a
    fresh Colab runtime (packages installed by an earlier notebook stay: one machine here, one per
    notebook in Colab).
    """
    work.mkdir(parents=True, exist_ok=True)
    stop = set(stop_on_error)
    spec = {name: {"cells": cells, "stop_on_error": name in stop} for name, cells in notebooks.items()}
    (work / "notebooks.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        MPLBACKEND="Agg",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PATH=os.pathsep.join([str(python.parent), env.get("PATH", "")]),
    )
    with open(work / "kernel.log", "wb") as log:
        subprocess.run(
            [str(python), str(RUNNER), str(work / "notebooks.json"), str(work / "report.json")],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=True,
        )
    return json.loads((work / "report.json").read_text())
