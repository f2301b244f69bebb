"""Start the course hub the way `make hub` does (``python -m hub up``), for tests, and log people in.

``running_hub(students, log)`` yields a ``Hub`` once JupyterHub answers and, on exit, stops it and runs
``python -m hub clean`` (accounts, homes and the hub folder removed), then checks that nothing is left.
Accounts start with ``TEST_PREFIX``, so a demo hub on the same machine (``pkv-``) is never touched.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

from lab_server import ROOT, free_port, stop, wait_until_up

TEST_PREFIX = "pkvt-"


@dataclass
class Hub:
    url: str
    folder: Path
    instructor: str
    students: List[str]
    process: subprocess.Popen
    password: str

    def step(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``python -m hub --dir FOLDER --prefix TEST_PREFIX ARGS`` (release, grade, clean)."""
        return subprocess.run(
            [sys.executable, "-m", "hub", "--dir", str(self.folder), "--prefix", TEST_PREFIX, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)


def leftovers(folder: Path, names: List[str]) -> List[str]:
    """What a cleaned-up hub left behind: its folder, accounts, homes, processes of those accounts."""
    left = [str(folder)] if folder.exists() else []
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        left.append(f"account {name}")
        uid = entry.pw_uid
        left += [f"process {p.name} of {name}" for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == uid]
    left += [f"home {h}" for h in Path("/home").glob(f"{TEST_PREFIX}*")]
    return left


def _uid(proc: Path):
    try:
        return proc.stat().st_uid
    except FileNotFoundError:
        return None


def login(context, hub: Hub, user: str, timeout_s: float = 120):
    """A page of ``context`` logged in as ``user`` through the hub's login form, once JupyterLab shows."""
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_selector(".jp-LabShell", timeout=timeout_s * 1000)
    return page


@contextmanager
def running_hub(students: int, log: Path, settings: dict = None, startup_s: float = 300) -> Iterator[Hub]:
    """The hub, with ``students`` students; ``settings`` (JupyterLab user settings) put in every home."""
    from hub.layout import DEMO_PASSWORD

    folder = Path(tempfile.mkdtemp(prefix="paged-kv-hub-test-", dir="/tmp"))
    os.chmod(folder, 0o755)
    port = free_port()
    instructor = f"{TEST_PREFIX}instructor"
    names = [f"{TEST_PREFIX}student{i}" for i in range(1, students + 1)]
    output = open(log, "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hub",
            "--dir",
            str(folder),
            "--prefix",
            TEST_PREFIX,
            "up",
            "--students",
            str(students),
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    hub = Hub(f"http://127.0.0.1:{port}", folder, instructor, names, process, DEMO_PASSWORD)

    def answers():
        with urllib.request.urlopen(f"{hub.url}/hub/api", timeout=2) as answer:
            json.loads(answer.read())

    try:
        wait_until_up(answers, process, startup_s, log, "the hub")
        for user in [instructor, *names]:
            _put_settings(hub.home(user), user, settings or {})
        yield hub
    finally:
        stop(process, 60)
        output.close()
        cleaned = subprocess.run(
            [sys.executable, "-m", "hub", "--dir", str(folder), "--prefix", TEST_PREFIX, "clean"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if cleaned.returncode != 0 and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(f"python -m hub clean failed:\n{cleaned.stdout}{cleaned.stderr}")


def _put_settings(home: Path, user: str, settings: dict) -> None:
    entry = pwd.getpwnam(user)
    folder = home / ".jupyter" / "lab" / "user-settings"
    for plugin, values in settings.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    for path in [home / ".jupyter", *(home / ".jupyter").rglob("*")] if settings else []:
        os.chown(path, entry.pw_uid, entry.pw_gid)
