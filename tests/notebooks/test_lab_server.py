"""`make lab`'s server starts and serves the course notebooks (what a student sees first)."""

import contextlib
import time
import urllib.error
import urllib.request

import pytest

from autograder.course.layout import LABS, RELEASE_DIR
from lab_server import running_jupyterlab


@contextlib.contextmanager
def jupyterlab_on_course(tmp_path, **env_extra):
    """A JupyterLab server on course/ (no token, a private config and runtime folder); yields its URL."""
    with running_jupyterlab(RELEASE_DIR, tmp_path, token="", env=env_extra) as server:
        yield server.url


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
    with running_jupyterlab(RELEASE_DIR, tmp_path) as server:
        for lab, notebook in LABS.items():
            listing = server.api(f"/api/contents/{lab}")
            names = [item["name"] for item in listing["content"]]
            assert [n for n in names if n.endswith(".ipynb")] == [notebook], names  # and a lab's facts.md, if any
        page = server.api("/api/contents")
        assert {item["name"] for item in page["content"] if item["type"] == "directory"} >= set(LABS)
        with urllib.request.urlopen(f"{server.url}/lab?token={server.token}", timeout=10) as response:
            assert response.status == 200 and b"JupyterLab" in response.read()


def test_jupyterlab_refuses_a_request_without_its_token(tmp_path):
    with running_jupyterlab(RELEASE_DIR, tmp_path) as server:
        anonymous = type(server)(server.url, "", server.process)
        with pytest.raises(urllib.error.HTTPError) as refused:
            anonymous.api("/api/contents")
        assert refused.value.code == 403
