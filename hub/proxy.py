"""JupyterHub's proxy, ``configurable-http-proxy`` (a Node.js program from npm): found, or installed.

``find_or_install_proxy(prefix)`` returns the program: from PATH, else from ``prefix`` (where an earlier
run installed it), else, as root with npm, ``npm install --prefix PREFIX`` of the pinned ``PACKAGE``.
Otherwise it raises ``ProxyMissing`` saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

PACKAGE = "configurable-http-proxy@5.3.0"  # needs Node.js 20 or newer
PROGRAM = "configurable-http-proxy"


class ProxyMissing(RuntimeError):
    """No configurable-http-proxy here, and this process cannot install it."""


def installed_in(prefix: Path) -> Path:
    return Path(prefix) / "node_modules" / ".bin" / PROGRAM


def find_or_install_proxy(prefix: Path, may_install: Optional[bool] = None) -> Path:
    """The proxy program (see the module's docstring); ``may_install`` defaults to "running as root"."""
    on_path = shutil.which(PROGRAM)
    if on_path:
        return Path(on_path)
    if installed_in(prefix).exists():
        return installed_in(prefix)
    if may_install is None:
        may_install = os.geteuid() == 0
    npm = shutil.which("npm")
    if not (may_install and npm):
        raise ProxyMissing(
            f"{PROGRAM} is missing: JupyterHub needs it. Install Node.js 20+ and "
            f"`npm install -g {PACKAGE}`" + ("" if npm else " (npm is not on PATH either)")
        )
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), PACKAGE],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not installed_in(prefix).exists():
        raise ProxyMissing(f"`npm install {PACKAGE}` failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return installed_in(prefix)
