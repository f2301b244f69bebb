"""Find Debian's Chromium for the browser tests, installing it with apt when the user is root.

Playwright's own browser download cannot work on the course's machines (no internet beyond the
package registries), so the tests drive the distribution's ``chromium`` package instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

HOW_TO_INSTALL = (
    "Chromium is missing, so the browser tests cannot run. Install Debian's package with "
    "`sudo apt-get install chromium` (Ubuntu: `sudo snap install chromium`), or point "
    "PAGED_KV_CHROMIUM at a Chromium or Chrome binary."
)

# As root Chromium needs --no-sandbox; the other flags keep it from calling Google's servers, which
# the closed network refuses (and which would show up as errors the test does not want to see).
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> Optional[str]:
    """The Chromium binary to use: $PAGED_KV_CHROMIUM, else the first one on PATH, else None."""
    override = os.environ.get("PAGED_KV_CHROMIUM")
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise FileNotFoundError(f"PAGED_KV_CHROMIUM={override!r} is not an executable file")
        return override
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def install_chromium(log: Path) -> None:
    """apt-get install chromium (root only); raises RuntimeError with apt's output when it fails."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(log, "wb") as out:
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
        ):
            result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900)
            if result.returncode != 0:
                raise RuntimeError(f"`{' '.join(command)}` failed:\n" + log.read_text(errors="replace")[-3000:])


def chromium_or_reason(log: Path) -> tuple:
    """``(path, None)`` when Chromium is there (installed now if root), else ``(None, why)``."""
    path = find_chromium()
    if path:
        return path, None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, HOW_TO_INSTALL
    from autograder.box.sandbox import apt_lock

    with apt_lock():  # another test file may be installing it right now (make test runs files side by side)
        if find_chromium() is None:
            install_chromium(log)
    path = find_chromium()
    if path is None:
        raise RuntimeError("apt-get installed chromium but no chromium binary is on PATH")
    return path, None
