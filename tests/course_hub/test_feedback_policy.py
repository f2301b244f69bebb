"""The hub serves feedback files and Formgrader's submission views with a restrictive Content-Security-Policy
(``hub/feedback_policy.py``, enabled by ``hub.roles`` in both roles' settings) and leaves JupyterLab's own.

``policy_for`` is checked alone; then a jupyter_server started with each role's generated settings (no hub,
no accounts: a loopback port and a token, about 10 s for both) answers a fetched feedback file, another HTML
file, the lab UI and, for the instructor, Formgrader's view of a submission whose notebook carries live
markup: that view is inert (``InertCells``) and its inline scripts run only if they are Formgrader's own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest

from hub import feedback_policy, roles
from hub.feedback_policy import FEEDBACK_POLICY, formgrader_policy, policy_for
from hub.layout import Layout

# nbgrader's add_submission warns about its own session use (SAWarning); it is not this test's concern.
pytestmark = pytest.mark.filterwarnings("ignore:Object of type:Warning")
LAB, NOTEBOOK, STUDENT = "02-atomic-prefill", "atomic_prefill", "s1"
HOST = "127.0.0.1:8000"


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# ---- which response gets which policy ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, base",
    [
        (
            "/user/pkv-student1/files/02-atomic-prefill/feedback/2026-01-01%2010:00:00/atomic_prefill.html",
            "/user/pkv-student1/",
        ),
        ("/files/paged-kv-course/autograder/work/feedback/s1/02-atomic-prefill/atomic_prefill.html", "/"),
        ("/user/i/formgrader/submissions/3f2a/evil.html", "/user/i/"),
        ("/user/i/formgrader/submissions/3f2a/data/x.svg", "/user/i/"),
    ],
)
def test_feedback_files_and_a_submissions_own_files_get_the_strict_policy(path, base):
    assert policy_for(path, base, HOST, None) == FEEDBACK_POLICY
    assert "default-src 'none'" in FEEDBACK_POLICY and "sandbox" in FEEDBACK_POLICY
    assert "script-src" not in FEEDBACK_POLICY


@pytest.mark.parametrize(
    "path",
    [
        "/lab",
        "/lab/tree/x.ipynb",
        "/api/contents/02/feedback/x.html",
        "/files/notes/page.html",
        "/files/feedback.html",
        "/static/lab/main.js",
        "/formgrader",
        "/formgrader/submissions/3f2a/next",
        "/formgrader/submissions/components/x.js",
        "/other/files/a/feedback/x.html",
    ],
)
def test_jupyterlab_and_formgraders_other_pages_keep_their_own_policy(path):
    assert policy_for(path, "/", HOST, None) is None


def test_the_submission_view_runs_only_formgraders_own_scripts():
    page = (
        b'<html><head><script src="/formgrader/static/js/formgrade.js"></script>'
        b'<script type="text/javascript">\nvar submission_id = "3f2a";\n</script></head><body>'
        b'<span onclick="toggle_name(true);">x</span><div id="notebook" class="border-box-sizing">'
        b'<script>alert(1)</script><b onclick="alert(2)">y</b></div></body></html>'
    )
    policy = policy_for("/formgrader/submissions/3f2a/", "/", HOST, page)
    assert f"script-src {HOST}/formgrader/static/ " in policy
    assert _sha('\nvar submission_id = "3f2a";\n') in policy and _sha("toggle_name(true);") in policy
    assert "'unsafe-hashes'" in policy and _sha("alert(1)") not in policy and _sha("alert(2)") not in policy
    assert "'unsafe-inline'" not in policy.split("style-src")[0] and "default-src 'none'" in policy


def test_a_submission_view_sent_in_parts_runs_no_inline_script():
    policy = formgrader_policy(HOST, "/user/i/", None)
    assert f"script-src {HOST}/user/i/formgrader/static/;" in policy and "sha256" not in policy
    assert "script-src 'none'" in formgrader_policy("evil host/", "/", b"")


def test_policy_for_refuses_a_base_url_it_cannot_match():
    with pytest.raises(ValueError, match="base_url"):
        policy_for("/files/feedback/x.html", "/user/x", HOST, None)


def test_both_roles_enable_the_extension_next_to_a_copy_of_it(tmp_path):
    folders = roles.write_role_configs(Layout(tmp_path / "hub"), tmp_path / "course")
    for role, folder in folders.items():
        server = json.loads((folder / "jupyter_server_config.json").read_text())
        assert server["ServerApp"]["jpserver_extensions"][roles.POLICY_EXTENSION] is True
        assert (folder / f"{roles.POLICY_EXTENSION}.py").read_text() == Path(feedback_policy.__file__).read_text()
        assert repr(str(folder)) in (folder / "jupyter_server_config.py").read_text()


# ---- a real server with each role's settings -----------------------------------------------------------------
LIVE_MARKDOWN = "<script>alert('formgrader')</script><img src=x onerror=alert(1)>"


def _submission(course: Path) -> str:
    """A gradebook with one submission of the lab, its autograded notebook carrying live markup; its id."""
    from nbgrader.api import Gradebook

    (course / "autograder" / "work").mkdir(parents=True)
    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## The course's own heading")])
    (course / "solutions" / LAB).mkdir(parents=True)
    nbformat.write(source, course / "solutions" / LAB / f"{NOTEBOOK}.ipynb")
    graded = nbformat.v4.new_notebook(cells=[source.cells[0], nbformat.v4.new_markdown_cell(LIVE_MARKDOWN)])
    folder = course / "autograder" / "work" / "autograded" / STUDENT / LAB
    folder.mkdir(parents=True)
    nbformat.write(graded, folder / f"{NOTEBOOK}.ipynb")
    path = os.environ["PATH"]
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])  # nbgrader runs alembic
    try:
        with Gradebook(f"sqlite:///{course / 'autograder' / 'work' / 'gradebook.db'}") as gb:
            gb.add_assignment(LAB)
            gb.add_notebook(NOTEBOOK, LAB)
            gb.add_student(STUDENT)
            gb.add_submission(LAB, STUDENT)
            return gb.find_submission_notebook(NOTEBOOK, LAB, STUDENT).id
    finally:
        os.environ["PATH"] = path


def _get(server, path: str):
    request = urllib.request.Request(server.url + path, headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.headers, response.read()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from lab_server import running_jupyterlab

    scratch = tmp_path_factory.mktemp("policy")
    home = scratch / "home"
    course = home / "paged-kv-course"
    feedback = home / LAB / "feedback" / "2026-01-01 10:00:00"
    feedback.mkdir(parents=True)
    (feedback / f"{NOTEBOOK}.html").write_text("<p>feedback</p>")
    (home / "page.html").write_text("<p>mine</p>")
    submission = _submission(course)
    folders = roles.write_role_configs(Layout(scratch / "hub"), course)
    out = {}
    for role in ("student", "instructor"):
        paths = [str(folders[role]), str(Path(sys.prefix) / "etc" / "jupyter")]
        env = {"JUPYTER_CONFIG_PATH": os.pathsep.join(paths)}
        out[role] = running_jupyterlab(home, scratch / role, env=env)
    with out["student"] as student, out["instructor"] as instructor:
        yield {"student": student, "instructor": instructor, "submission": submission}


@pytest.mark.parametrize("role", ["student", "instructor"])
def test_a_fetched_feedback_file_is_served_with_the_strict_policy_and_the_lab_with_its_own(servers, role):
    server = servers[role]
    status, headers, body = _get(server, f"/files/{LAB}/feedback/2026-01-01%2010:00:00/{NOTEBOOK}.html")
    assert status == 200 and body == b"<p>feedback</p>"
    assert headers["Content-Security-Policy"] == FEEDBACK_POLICY
    status, headers, _ = _get(server, "/files/page.html")
    assert status == 200 and headers["Content-Security-Policy"] != FEEDBACK_POLICY  # not feedback: jupyter's own
    status, headers, body = _get(server, "/lab")
    assert status == 200 and b"<script" in body
    lab_policy = headers["Content-Security-Policy"]
    assert "sandbox" not in lab_policy and "default-src" not in lab_policy


def test_formgraders_submission_view_is_inert_and_runs_only_its_own_scripts(servers):
    status, headers, body = _get(servers["instructor"], f"/formgrader/submissions/{servers['submission']}/")
    policy = headers["Content-Security-Policy"]
    assert status == 200 and policy.startswith("default-src 'none'; script-src 127.0.0.1:")
    assert "/formgrader/static/ 'sha256-" in policy and "'unsafe-inline'" not in policy.split("style-src")[0]
    chrome, notebook = body.split(b'id="notebook"', 1)
    assert b"<script>alert" not in notebook and b"onerror=" not in notebook.replace(b"onerror=alert(1)&gt;", b"")
    assert b"&lt;script&gt;alert(" in notebook or b"&#60;script&#62;alert(" in notebook
    assert b"<h2" in notebook  # the course's own markdown still renders
    for script in (b"jquery.min.js", b"formgrade.js"):
        assert script in chrome
