"""The Python that every single-user server and kernel of the hub runs, reachable by every account.

The course's virtual environment is often made from an interpreter in a folder that only its owner
opens (pyenv under ``/root``, say), which another account cannot start. ``build_runtime`` makes
``Layout.runtime``, a virtual environment on an interpreter that every account can run (the course
venv's own base interpreter when it is open to all, else the system's ``python3.X`` of the same
version), which shares the course venv's packages through a ``.pth`` file: no second install of the
lock. It then installs the course kernel (``paged_kv.lab.notebook_kernel``) into that environment.
Where the course venv or the repository sits behind a private folder, the servers reach them through
read-only bind mounts (``hub.mounts``); the repository, which holds the solutions, only the instructor.

``server_environment`` is what a single-user server needs in its environment to find the course
venv's JupyterLab, nbgrader's extensions and the runtime's kernel.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional

from hub.layout import REPO, Layout

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


class RuntimeSetupError(RuntimeError):
    """The hub's runtime cannot be made here; the message says what is missing."""


def open_to_all(path: Path) -> bool:
    """True when any account can reach ``path``: every folder above it searchable by others, the path
    itself readable (and, for a folder or program, searchable/executable) by others."""
    path = Path(path).resolve()
    try:
        for parent in reversed(path.parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0)
    return mode & wanted == wanted


def shared_interpreter(candidates: Optional[List[Path]] = None) -> Path:
    """An interpreter of this Python version that every account can run, with its standard library."""
    if candidates is None:
        candidates = [
            Path(getattr(sys, "_base_executable", sys.executable)),
            Path(f"/usr/bin/python{VERSION}"),
            Path(f"/usr/local/bin/python{VERSION}"),
        ]
    for candidate in candidates:
        if not candidate.exists() or not open_to_all(candidate):
            continue
        stdlib = subprocess.run(
            [
                str(candidate),
                "-c",
                "import sysconfig, sys; print(sysconfig.get_paths()['stdlib']); print('%d.%d' % sys.version_info[:2])",
            ],
            capture_output=True,
            text=True,
        )
        lines = stdlib.stdout.split()
        if stdlib.returncode == 0 and len(lines) == 2 and lines[1] == VERSION and open_to_all(Path(lines[0])):
            return candidate
    raise RuntimeSetupError(
        f"no Python {VERSION} that every account can run: tried "
        f"{', '.join(map(str, candidates))} (install Debian's python{VERSION}, "
        f"or make the course venv from an interpreter outside a private folder)"
    )


def build_runtime(layout: Layout, instructor: str) -> Dict[str, str]:
    """Make (or refresh) ``layout.runtime`` and its course kernel; return the paths the servers use.

    ``{"python", "course_prefix", "student_pythonpath", "instructor_repo"}``: the course venv as every account
    reaches it, the folder of the package edition students import (``hub.package``), and the repository as
    only ``instructor`` reaches it (the real path when it is open already, else a read-only bind mount:
    ``hub.mounts``)."""
    from hub.mounts import reachable

    course_prefix = reachable(layout, Path(sys.prefix), "venv")
    site_packages = course_prefix / Path(sysconfig.get_paths()["purelib"]).resolve().relative_to(
        Path(sys.prefix).resolve()
    )
    from hub.package import first_graded_lab, install_edition, package_dir

    if not (package_dir(layout) / "edition.json").exists():  # nothing released yet: the strictest edition
        install_edition(layout, first_graded_lab())
    student_pythonpath = package_dir(layout)  # one edition of the package (hub.package), never the repository's
    instructor_repo = REPO if open_to_all(REPO / "autograder") else reachable(layout, REPO, "repo", owner=instructor)
    interpreter = shared_interpreter()
    python = layout.runtime / "bin" / "python"
    if not python.exists():
        _run([str(interpreter), "-m", "venv", "--without-pip", str(layout.runtime)])
    runtime_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # addsitedir (not a bare path line) so that the course venv's own .pth files are read too.
    (runtime_site / "paged-kv-course.pth").write_text(f"import site; site.addsitedir({str(site_packages)!r})\n")
    env = dict(os.environ, PYTHONPATH=str(student_pythonpath))
    _run([str(python), "-m", "paged_kv.lab.notebook_kernel", "install"], env=env)
    _run([str(python), "-c", "import jupyterhub.singleuser, nbgrader, paged_kv.cache"], env=env)
    return {
        "python": str(python),
        "course_prefix": str(course_prefix),
        "student_pythonpath": str(student_pythonpath),
        "instructor_repo": str(instructor_repo),
    }


def server_environment(layout: Layout, role: str, paths: Dict[str, str]) -> Dict[str, str]:
    """Environment variables of a ``role`` single-user server; ``paths`` as ``build_runtime`` returns them."""
    course_prefix = Path(paths["course_prefix"])
    return {
        "PYTHONPATH": paths["instructor_repo"] if role == "instructor" else paths["student_pythonpath"],
        "JUPYTER_PATH": os.pathsep.join(
            [str(layout.runtime / "share" / "jupyter"), str(course_prefix / "share" / "jupyter")]
        ),
        "JUPYTER_CONFIG_PATH": os.pathsep.join([str(layout.role_config(role)), str(course_prefix / "etc" / "jupyter")]),
        "JUPYTERLAB_DIR": str(course_prefix / "share" / "jupyter" / "lab"),
        "MPLBACKEND": "Agg",
    }


def _run(command: List[str], env: Optional[Dict[str, str]] = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeSetupError(f"`{' '.join(command)}` failed:\n{(done.stdout + done.stderr)[-2000:]}")
