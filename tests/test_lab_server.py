"""`make lab`'s server starts and serves the course notebooks (what a student sees first)."""
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


def test_jupyterlab_starts_on_course_and_lists_the_labs(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "jupyterlab", "--notebook-dir", str(ROOT / "course"), "--no-browser",
               "--ip", "127.0.0.1", f"--port={port}", "--ServerApp.token=", "--ServerApp.password="]
    if os.geteuid() == 0:
        command.append("--allow-root")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/02-atomic-prefill", timeout=2) as r:
                    listing = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not answer within 60 s"
        names = [item["name"] for item in listing["content"]]
        assert names == ["atomic_prefill.ipynb"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=5) as r:
            assert r.status == 200 and b"JupyterLab" in r.read()
    finally:
        server.terminate()
        server.wait(timeout=30)
