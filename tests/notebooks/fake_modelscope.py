"""A throwaway ModelScope (魔搭) notebook instance, for the ModelScope tests (ModelScope cannot be reached from here).

Built from what modelscope_image.py says an instance holds:

- the image's packages at its versions where this machine's Python can install them, no course package
  (fake_runtime's runtime, cached under .cache/fake-modelscope/);
- the instance's pip configuration (its user pip.conf, as ``pip config set`` writes it), with local stand-ins
  for the indexes it names: ``pypi_mirror`` for Aliyun's PyPI mirror (the wheels the course's setup cell may
  need and no image has: the build backend pyproject.toml names, the ``gpu`` extra's Triton) and an empty index
  for PyPI; this machine's own pip settings (its variables, /etc/xdg's file) are kept out;
- the instance's environment (``MODELSCOPE_ENVIRONMENT``, ``MODELSCOPE_CACHE``);
- no route out: every proxy variable points at a closed local port, so neither GitHub nor any index on the
  internet answers (pip and git reach the stand-ins through file:// addresses).

The course's ModelScope mirror is `git_mirror`: a git repository holding this checkout's package files on the
mirror's branch, which the setup cell's ``git+https://www.modelscope.cn/...`` address is pointed at.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List

from fake_runtime import ROOT, course_source, run_in_runtime, runtime_dir, runtime_env, runtime_python
from modelscope_image import ENVIRONMENT, FAKE_MODELSCOPE_REQUIREMENTS, PIP_CONFIG

from tools.sync_colab import TRITON_EXTRA, read_toml

CLOSED_PORT = "http://127.0.0.1:9"  # the discard port, closed here: a connection there is refused at once
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
MIRROR_INDEX, PYPI_INDEX = PIP_CONFIG["global"]["index-url"], PIP_CONFIG["global"]["extra-index-url"]


def fake_modelscope_python() -> Path:
    """The fake instance's python, built on first use and reused while its requirements stay the same."""
    return runtime_python("modelscope", FAKE_MODELSCOPE_REQUIREMENTS)


def mirror_requirements() -> List[str]:
    """What the stand-in for the instance's PyPI mirror holds: what building the course from source needs
    (pyproject.toml's build-system) and what its setup cell installs that no image has (the Triton extra)."""
    data = read_toml(ROOT / "pyproject.toml")
    return list(data["build-system"]["requires"]) + list(data["project"]["optional-dependencies"][TRITON_EXTRA])


def _simple_index(root: Path, files: Iterable[Path]) -> Path:
    """A PEP 503 index of ``files`` at ``root``/simple (pip reads one from a file:// address)."""
    by_project: Dict[str, List[Path]] = {}
    for path in files:
        project = path.name.split("-")[0].lower().replace("_", "-").replace(".", "-")
        by_project.setdefault(project, []).append(path)
    simple = root / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    for project, paths in by_project.items():
        (simple / project).mkdir(exist_ok=True)
        links = "".join(f'<a href="{p.as_uri()}">{p.name}</a>\n' for p in sorted(paths))
        (simple / project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    names = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(by_project))
    (simple / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{names}</body></html>\n")
    return simple


def pypi_mirror() -> Path:
    """The stand-in for Aliyun's PyPI mirror: a local index of the newest wheels of ``mirror_requirements``
    (fetched once with this machine's pip settings, then cached while the requirements stay the same)."""
    wanted = mirror_requirements()
    stamp = hashlib.sha256(json.dumps(wanted).encode()).hexdigest()[:16]
    root = runtime_dir("modelscope") / f"pypi-mirror-{stamp}"
    if not (root / ".complete").exists():
        for old in runtime_dir("modelscope").glob("pypi-mirror-*"):
            shutil.rmtree(old, ignore_errors=True)
        files = root / "files"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            + ["--dest", str(files), *wanted],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        _simple_index(root, files.iterdir())
        (root / ".complete").write_text(json.dumps(wanted))
    return root / "simple"


def empty_index(root: Path) -> Path:
    """An index with nothing in it: the stand-in for PyPI, which the instance's pip names second."""
    return _simple_index(root, [])


def git_mirror(work: Path, branch: str) -> Path:
    """The course's ModelScope mirror: a bare git repository whose ``branch`` holds this checkout's package
    files, as a push of the repository to ModelScope holds them."""
    source = course_source(work / "mirror-source")
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.invalid", "-c", "init.defaultBranch=x"]
    subprocess.run(git + ["init", "--quiet", str(source)], check=True)
    subprocess.run(git + ["-C", str(source), "checkout", "--quiet", "-b", branch], check=True)
    subprocess.run(git + ["-C", str(source), "add", "--all"], check=True)
    subprocess.run(git + ["-C", str(source), "commit", "--quiet", "-m", "the course's mirror"], check=True)
    bare = work / "mirror.git"
    subprocess.run(git + ["clone", "--quiet", "--bare", str(source), str(bare)], check=True)
    return bare


def instance_home() -> Path:
    """The instance's home (kept between runs: matplotlib's font cache), with the instance's pip.conf: its
    settings, each index pointed at its stand-in."""
    home = runtime_dir("modelscope") / "home"
    stand_ins = {MIRROR_INDEX: pypi_mirror().as_uri(), PYPI_INDEX: empty_index(home / "pypi-org").as_uri()}
    config = configparser.ConfigParser()
    for section, settings in PIP_CONFIG.items():
        config[section] = {key: stand_ins.get(value, value) for key, value in settings.items()}
    (home / ".config" / "pip").mkdir(parents=True, exist_ok=True)
    (home / "no-site-config").mkdir(exist_ok=True)
    with open(home / ".config" / "pip" / "pip.conf", "w") as out:
        config.write(out)
    return home


def instance_env(home: Path) -> Dict[str, str]:
    """The environment a kernel of the fake instance runs in (``fake_runtime.run_in_runtime``'s ``env``)."""
    return {
        **ENVIRONMENT,
        **{name: CLOSED_PORT for name in PROXY_VARIABLES},
        "no_proxy": "",
        "NO_PROXY": "",
        "HOME": str(home),
        "XDG_CONFIG_DIRS": str(home / "no-site-config"),  # not this machine's /etc/xdg/pip/pip.conf
    }


def host_settings() -> List[str]:
    """This machine's variables that would reach the instance's pip or git: left out of its environment."""
    return [name for name in os.environ if name.startswith(("PIP_", "GIT_", "XDG_CONFIG_HOME"))]


def run_like_modelscope(
    python: Path, notebooks: Dict[str, List[str]], work: Path, stop_on_error: Iterable[str] = (), timeout_s=1200
) -> dict:
    """``fake_runtime.run_in_runtime`` in the fake instance."""
    return run_in_runtime(
        python,
        notebooks,
        work,
        "modelscope",
        env=instance_env(instance_home()),
        drop_env=host_settings(),
        stop_on_error=stop_on_error,
        timeout_s=timeout_s,
    )


def in_instance(python: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``python args`` in the fake instance's environment (its pip, its network): what its terminal runs."""
    env = runtime_env(python, instance_env(instance_home()), host_settings())
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=timeout_s)
