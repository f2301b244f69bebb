"""Throwaway environments that pretend to be a notebook platform's runtime (Colab, a ModelScope instance), for
the tests that prove the course runs there without reaching the platform.

A runtime is a virtual environment (cached under .cache/fake-<platform>/, git-ignored) holding the platform
image's versions of the packages the course touches (``requirements``: colab_image.py, modelscope_image.py),
but not the course package. `run_in_runtime` runs notebooks' code cells there in an IPython shell
(fake_runtime_kernel.py), in the platform's environment (``env``; with ``google.colab`` imported for Colab),
so a setup cell takes that platform's branch and its ``%pip install`` really runs. The course package comes
from this checkout (`course_source`): a wheel of it (`build_course_wheel`) stands in for the GitHub repository,
a git repository of it for ModelScope's mirror (fake_modelscope.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional

ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = ROOT / ".cache"
RUNNER = Path(__file__).with_name("fake_runtime_kernel.py")
PLATFORMS = ("colab", "modelscope")


def _base_python() -> str:
    """The interpreter .venv was made from (a venv inside a venv would inherit nothing anyway)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def runtime_dir(platform: str) -> Path:
    """Where ``platform``'s fake runtime and what it is built from are cached."""
    if platform not in PLATFORMS:
        raise ValueError(f"no fake runtime for {platform!r}; the platforms are {PLATFORMS}")
    return CACHE_ROOT / f"fake-{platform}"


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


def runtime_python(platform: str, requirements: List[str]) -> Path:
    """The fake ``platform`` runtime's python, built on first use (``requirements`` installed with this
    machine's pip settings) and reused while its requirements stay the same."""
    cache = runtime_dir(platform)
    stamp_text = json.dumps([sys.version, requirements])
    stamp = hashlib.sha256(stamp_text.encode()).hexdigest()[:16]
    venv = cache / f"venv-{stamp}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        for old in cache.glob("venv-*"):  # what else is cached there (a platform's mirrors) stays
            shutil.rmtree(old, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "build.log").unlink(missing_ok=True)
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
        _pip(python, "install", "--quiet", *requirements, log=cache / "build.log")
        (venv / ".complete").write_text(stamp_text)
    return python


def fresh_runtime(python: Path) -> None:
    """Remove what a setup cell installs (the course package, Triton): a fresh runtime on a CPU image.

    Files an interrupted install left behind (an older layout of ``paged_kv``, no longer in any RECORD) go
    too: pip would leave them, and Python would import them instead of the new install's."""
    _pip(python, "uninstall", "--yes", "--quiet", "paged-kv-course", "triton", log=python.parents[2] / "build.log")
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


def changed_packages(before: Dict[str, str], after: Dict[str, str]) -> Dict[str, tuple]:
    """``{name: (version before, version after)}`` for each package `freeze` found added, removed or changed."""
    return {
        name: (before.get(name), after.get(name))
        for name in set(before) | set(after)
        if before.get(name) != after.get(name)
    }


def course_source(out_dir: Path) -> Path:
    """A clean copy of this checkout's package files (what pip builds the course from), in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "paged_kv", out_dir / "paged_kv", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, out_dir / name)
    return out_dir


def build_course_wheel(out_dir: Path) -> Path:
    """A wheel of the course package, built from a clean copy of this checkout's package files."""
    source = course_source(out_dir / "source")
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


def runtime_env(python: Path, env: Optional[Mapping[str, str]] = None, drop_env: Iterable[str] = ()) -> Dict[str, str]:
    """The environment a process of the runtime of ``python`` runs in: this process's, less PYTHONPATH,
    VIRTUAL_ENV, this machine's MODELSCOPE_* variables and the names in ``drop_env``, with the runtime's bin
    first on PATH, plus ``env`` (the platform's own variables)."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", *drop_env}
    composed = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("MODELSCOPE_")}
    composed.update(
        MPLBACKEND="Agg",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PATH=os.pathsep.join([str(python.parent), composed.get("PATH", "")]),
    )
    composed.update(env or {})
    return composed


def run_in_runtime(
    python: Path,
    notebooks: Dict[str, List[str]],
    work: Path,
    platform: str,
    env: Optional[Mapping[str, str]] = None,
    drop_env: Iterable[str] = (),
    stop_on_error: Iterable[str] = (),
    timeout_s: float = 1200,
) -> dict:
    """Run each notebook's code cells (``{name: [cell source, ...]}``) in the fake ``platform`` runtime, in order,
    in ``runtime_env(python, env, drop_env)``.

    Returns ``{name: [{"ok": bool, "error": str, "shown": printed text}, ...]}``; the notebooks named in
    ``stop_on_error`` stop at their first failing cell, like Run All. Everything the shell printed is also in
    ``work/kernel.log``. Each notebook starts with a fresh namespace, like a fresh runtime (packages installed
    by an earlier notebook stay: one machine here, one per notebook on the platform).
    """
    runtime_dir(platform)  # a known platform
    work.mkdir(parents=True, exist_ok=True)
    stop = set(stop_on_error)
    spec = {name: {"cells": cells, "stop_on_error": name in stop} for name, cells in notebooks.items()}
    (work / "notebooks.json").write_text(json.dumps(spec))
    command = [str(python), str(RUNNER), str(work / "notebooks.json"), str(work / "report.json")]
    with open(work / "kernel.log", "wb") as log:
        subprocess.run(
            command + (["--colab"] if platform == "colab" else []),
            cwd=work,
            env=runtime_env(python, env, drop_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=True,
        )
    return json.loads((work / "report.json").read_text())
