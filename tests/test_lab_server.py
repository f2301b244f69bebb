"""`make lab`'s server starts and serves the course notebooks (what a student sees first)."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab_on_course(tmp_path, **env_extra):
    """A JupyterLab server on course/ (no token, a private config and runtime folder); yields its URL."""
    port = free_port()
    command = [sys.executable, "-m", "jupyterlab", "--notebook-dir", str(ROOT / "course"), "--no-browser",
               "--ip", "127.0.0.1", f"--port={port}", "--ServerApp.token=", "--ServerApp.password="]
    if os.geteuid() == 0:
        command.append("--allow-root")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               **env_extra)
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def fetch_when_up(url: str, seconds: float = 60) -> bytes:
    """The body at ``url``, retried until the server answers (AssertionError after ``seconds``)."""
    for _ in range(int(seconds * 2)):
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"JupyterLab did not answer {url} within {seconds:.0f} s")


def test_jupyterlab_starts_on_course_and_lists_the_labs(tmp_path):
    with jupyterlab_on_course(tmp_path) as url:
        listing = json.loads(fetch_when_up(f"{url}/api/contents/02-atomic-prefill"))
        names = [item["name"] for item in listing["content"]]
        assert names == ["atomic_prefill.ipynb"]
        with urllib.request.urlopen(f"{url}/lab", timeout=5) as r:
            assert r.status == 200 and b"JupyterLab" in r.read()
