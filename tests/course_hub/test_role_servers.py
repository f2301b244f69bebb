"""What each role's generated settings do in a real jupyter_server (no hub, no accounts: a loopback port and a
token, as test_feedback_policy.py starts them; about 15 s for both).

- JupyterLab's settings default to no news question and no update check (``hub.roles.LAB_SETTINGS``, as a
  ``default_setting_overrides.json``): the frontend asks "notified about official Jupyter news?" whenever
  ``fetchNews`` is ``"none"``, whatever ``LabApp.news_url`` says;
- idle kernels are culled (``hub.roles.KERNEL_CULLING``);
- a student's first server writes a layout that opens the Assignments tab (``hub/first_screen.py``), and
  leaves a layout the student has alone;
- the instructor's Formgrader answers Generate, Release, Collect, Autograde and the feedback buttons with the
  hub's own commands, and still serves its views (``hub/formgrader_steps.py``).
The browser test (tests/notebooks/test_hub_in_browser.py) checks the first two as a student sees them."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hub import first_screen, formgrader_steps, roles
from hub.layout import Layout

LAB = "02-atomic-prefill"


def _call(server, path: str, method: str = "GET"):
    request = urllib.request.Request(
        server.url + path,
        method=method,
        data=b"{}" if method == "POST" else None,
        headers={"Authorization": f"token {server.token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from lab_server import running_jupyterlab

    scratch = tmp_path_factory.mktemp("roles")
    home = scratch / "home"
    course = home / "paged-kv-course"
    (course / "autograder" / "work").mkdir(parents=True)
    folders = roles.write_role_configs(Layout(scratch / "hub"), course)
    out = {}
    for role in ("student", "instructor"):
        env = {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(folders[role]), str(Path(sys.prefix) / "etc" / "jupyter")])}
        out[role] = running_jupyterlab(home, scratch / role, env=env)
    with out["student"] as student, out["instructor"] as instructor:
        yield {"student": student, "instructor": instructor, "scratch": scratch}


@pytest.mark.parametrize("role", ["student", "instructor"])
def test_no_news_question_and_no_update_check_by_default(servers, role):
    status, body = _call(servers[role], "/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert status == 200, body
    schema = json.loads(body)["schema"]["properties"]
    assert schema["fetchNews"]["default"] == "false" and schema["checkForUpdates"]["default"] is False


def test_the_settings_name_a_plugin_and_values_that_jupyterlab_knows():
    schemas = Path(sys.prefix, "share", "jupyter", "lab", "schemas")
    for plugin, values in roles.LAB_SETTINGS.items():
        package, name = plugin.rsplit(":", 1)
        schema = json.loads((schemas / package / f"{name}.json").read_text())["properties"]
        for key, value in values.items():
            assert key in schema, (plugin, key)
            assert value in schema[key].get("enum", [value]), (plugin, key, value)


@pytest.mark.parametrize("role", ["student", "instructor"])
def test_idle_kernels_are_culled(servers, role):
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    config = json.loads((servers["scratch"] / "hub" / "jupyter" / role / "jupyter_server_config.json").read_text())
    culling = config["MappingKernelManager"]
    assert culling == roles.KERNEL_CULLING and culling["cull_idle_timeout"] > 0
    assert set(culling) <= set(MappingKernelManager.class_trait_names(config=True))
    status, body = _call(servers[role], "/api/kernels", method="POST")  # the culler starts with the first kernel
    assert status == 201, body
    _call(servers[role], f"/api/kernels/{json.loads(body)['id']}", method="DELETE")
    log = (servers["scratch"] / role / "jupyterlab.log").read_text()
    assert f"Culling kernels with idle durations > {culling['cull_idle_timeout']} seconds" in log, log[-2000:]


def test_a_new_students_layout_opens_the_assignments_tab(servers):
    written = servers["scratch"] / "student" / "workspaces"
    layout = json.loads(first_screen.workspace_file(written).read_text())
    assert layout == first_screen.first_layout()
    assert layout["data"]["layout-restorer:data"]["main"]["dock"]["widgets"] == [first_screen.ASSIGNMENTS]
    status, body = _call(servers["student"], "/lab/api/workspaces/default")
    assert status == 200 and json.loads(body)["data"] == layout["data"]
    assert not (servers["scratch"] / "instructor" / "workspaces").exists()  # the instructor keeps JupyterLab's


def test_a_students_own_layout_is_never_replaced(tmp_path):
    assert first_screen.write_first_layout(tmp_path) == first_screen.workspace_file(tmp_path)
    first_screen.workspace_file(tmp_path).write_text('{"data": {}, "metadata": {"id": "default"}}')
    assert first_screen.write_first_layout(tmp_path) is None
    assert json.loads(first_screen.workspace_file(tmp_path).read_text())["data"] == {}


def test_the_first_layout_names_the_widget_nbgraders_plugin_restores():
    bundles = Path(sys.prefix, "share", "jupyter", "labextensions", "@jupyter", "nbgrader")
    if not bundles.is_dir():
        pytest.skip("nbgrader's JupyterLab extension is not installed in this environment")
    code = "".join(p.read_text(errors="replace") for p in bundles.rglob("*.js"))
    namespace, name = first_screen.ASSIGNMENTS.split(":")
    assert f'namespace:"{namespace}"' in code and f'name:()=>"{name}"' in code


@pytest.mark.parametrize("path", sorted(formgrader_steps.STEPS))
def test_formgraders_release_collect_grade_and_feedback_buttons_name_the_hubs_commands(servers, path):
    button, command = formgrader_steps.STEPS[path]
    url = "/" + path.replace("([^/]+)", LAB, 1).replace("([^/]+)", "s1")
    status, body = _call(servers["instructor"], url, method="POST")
    answer = json.loads(body)
    assert status == 200 and answer["success"] is False, answer
    assert command.replace("<lab>", LAB) in answer["error"] and button in answer["error"]
    assert not (servers["scratch"] / "home" / "paged-kv-course" / "autograder" / "work" / "autograded").exists()


def test_formgraders_views_still_answer(servers):
    status, body = _call(servers["instructor"], "/formgrader/api/assignments")
    assert status == 200 and isinstance(json.loads(body), list)
    status, _ = _call(servers["student"], "/formgrader/api/submission/x/y/autograde", method="POST")
    assert status == 404  # a student has no Formgrader at all
