"""nbgrader's Validate button as a student's ``make lab`` serves it (``student-lab/``): a failed test cell is named
by its first line and the course's short message follows, not the cell's whole source
(``paged_kv.lab.validate_message``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from paged_kv.lab.validate_message import shorten

REPO = Path(__file__).resolve().parents[2]


def test_shorten_keeps_a_failed_cells_first_line_and_leaves_everything_else():
    result = {
        "success": True,
        "value": {
            "failed": [{"source": "# Visible tests, part 2\nm = M(6, 4)\n\nattempt()", "error": "short message"}]
        },
    }
    assert shorten(result)["value"]["failed"] == [{"source": "# Visible tests, part 2\n...", "error": "short message"}]
    for other in (
        {"success": False, "value": "a traceback"},
        {"success": True, "value": {"changed": [{"source": "x"}]}},
    ):
        assert shorten(json.loads(json.dumps(other))) == other


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_validate_in_the_students_server_shows_the_message_after_the_cells_title(tmp_path):
    """A real Jupyter server with the student settings validates the untouched release of lab 02: one failed cell,
    its source one title line, its error the course's "TODO not written yet" block."""
    shutil.copy(REPO / "course" / "02-atomic-prefill" / "atomic_prefill.ipynb", tmp_path / "atomic_prefill.ipynb")
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(REPO / "student-lab"), PYTHONPATH=str(REPO))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "server",
            f"--port={port}",
            "--IdentityProvider.token=t",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={tmp_path}",
            "--allow-root",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=t", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "the Jupyter server did not start"
                time.sleep(0.2)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/assignments/validate?token=t", data=b"path=atomic_prefill.ipynb", method="POST"
        )
        answer = json.loads(urllib.request.urlopen(request, timeout=300).read())
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    assert answer["success"] is True, (answer, log[-2000:])
    [failed] = answer["value"]["failed"]
    assert failed["source"].splitlines()[0].startswith("# Visible tests") and len(failed["source"].splitlines()) <= 2
    assert "TODO not written yet" in failed["raw_error"] and "Traceback" not in failed["raw_error"]
