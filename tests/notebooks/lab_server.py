"""Start JupyterLab the way `make lab` does, on a free loopback port, for tests.

`running_jupyterlab(root_dir, scratch)` yields a `LabServer` (its base URL and token) once the server
answers, and stops it afterwards. Settings and workspaces live under `scratch`, so a test never
reads or writes the user's JupyterLab configuration.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
# What `make lab` adds to JUPYTER_CONFIG_PATH for students (ROLE=student, its default).
STUDENT_CONFIG = ROOT / "student-lab"

# Settings a test run needs (user settings files, one per plugin). Nothing here changes what a
# student sees: no news or update checks (they fetch from the internet, which CI cannot reach),
# no autosave (the test saves when it wants to read the file), and every cell kept in the page
# (JupyterLab's default hides cells scrolled out of view from the DOM queries the test makes).
TEST_SETTINGS: Dict[str, dict] = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabServer:
    url: str  # http://127.0.0.1:PORT
    token: str  # "" when the server runs without a token
    process: subprocess.Popen

    def api(self, path: str, method: str = "GET", timeout: float = 10) -> Optional[dict]:
        """Call the server's REST API (``path`` like ``/api/kernels``); JSON answer or None."""
        request = urllib.request.Request(self.url + path, method=method)
        if self.token:
            request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None


def _write_settings(settings_dir: Path, settings: Dict[str, dict]) -> None:
    for plugin, values in settings.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@contextmanager
def running_jupyterlab(
    root_dir: Path,
    scratch: Path,
    token: Optional[str] = None,
    settings: Optional[Dict[str, dict]] = None,
    env: Optional[Dict[str, str]] = None,
    startup_s: float = 90,
    package: Optional[Path] = None,
) -> Iterator[LabServer]:
    """JupyterLab serving ``root_dir`` (as `make lab` serves course/), stopped on exit.

    ``token=None`` makes a random token; ``""`` runs without one. ``env`` adds environment variables
    (``JUPYTER_CONFIG_PATH``, say). ``package``: a folder holding the ``paged_kv`` the kernels import (a handout's
    edition) instead of the repository's. Raises RuntimeError with the server's log when it does not answer
    within ``startup_s`` seconds.
    """
    token = secrets.token_hex(16) if token is None else token
    port = free_port()
    scratch.mkdir(parents=True, exist_ok=True)
    _write_settings(scratch / "user-settings", settings or {})
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--notebook-dir={root_dir}",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--ServerApp.token={token}",
        "--ServerApp.password=",
        f"--LabApp.user_settings_dir={scratch / 'user-settings'}",
        f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    environment = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        JUPYTER_CONFIG_DIR=str(scratch / "config"),
        JUPYTER_DATA_DIR=str(scratch / "data"),
        **(env or {}),
    )
    # Kernels see the repository (as `make lab` gives them through PYTHONPATH).
    paths = ([str(package)] if package else []) + [str(ROOT)] + environment.get("PYTHONPATH", "").split(os.pathsep)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in dict.fromkeys(paths) if p)
    log = open(scratch / "jupyterlab.log", "wb")
    process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
    server = LabServer(f"http://127.0.0.1:{port}", token, process)
    try:
        wait_until_up(
            lambda: server.api("/api/status", timeout=2), process, startup_s, scratch / "jupyterlab.log", "JupyterLab"
        )
        yield server
    finally:
        stop(process, 30)
        log.close()


def wait_until_up(
    probe: Callable[[], object], process: subprocess.Popen, startup_s: float, log: Path, what: str
) -> None:
    """Call ``probe`` until it stops raising OSError/ValueError; RuntimeError with ``log``'s end when
    ``process`` ends first or ``startup_s`` seconds pass."""
    deadline = time.monotonic() + startup_s
    while True:
        try:
            probe()
            return
        except (OSError, urllib.error.URLError, ValueError):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n" + log.read_text(errors="replace")[-3000:])
            time.sleep(0.3)


def stop(process: subprocess.Popen, wait_s: float) -> None:
    """SIGTERM ``process``, then SIGKILL it if it has not ended after ``wait_s`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
