"""The Kubernetes hub's own settings (deploy/z2jh-values.yaml), run here: the pre_spawn_hook, and sign-up and
login with the real NativeAuthenticator 1.3.0 in Chromium.

``deploy_hub.apply_values`` applies the values' ``hub.config`` and ``hub.extraConfig`` as the chart's
``jupyterhub_config.py`` does. The hub then runs with a local spawner instead of KubeSpawner and without a
proxy (the browser talks to the hub's own port), so what is tested is the authenticator and its settings,
not a cluster.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from deploy_hub import VALUES, apply_values, values_text
from lab_server import free_port, stop, wait_until_up

INSTRUCTOR, STUDENTS = "pkv-teacher", ("pkv-ada", "pkv-bob")


REGISTRY = Path(tempfile.mkdtemp(prefix="pkv-hub-uids-")) / "hub-uids"  # where the hook records uids here


def _hook(registry: Path = REGISTRY):
    c = Config()
    before = os.environ.get("PAGED_KV_UID_REGISTRY")
    os.environ["PAGED_KV_UID_REGISTRY"] = str(registry)  # read when the values' code runs
    try:
        apply_values(c, values_text(INSTRUCTOR))
    finally:
        os.environ.pop("PAGED_KV_UID_REGISTRY") if before is None else os.environ.update(PAGED_KV_UID_REGISTRY=before)
    return c, c.KubeSpawner.pre_spawn_hook


def _spawned(name: str, user_id: int, registry: Path = REGISTRY, hook=None):
    spawner = SimpleNamespace(user=SimpleNamespace(name=name, id=user_id), environment={},
                              uid=1000, gid=None, fs_gid=100)
    (hook or _hook(registry)[1])(spawner)
    return spawner


def test_the_values_admit_people_and_find_nativeauthenticators_pages():
    c, _ = _hook()
    assert c.JupyterHub.authenticator_class == "nativeauthenticator.NativeAuthenticator"
    assert c.Authenticator.allow_all is True and c.NativeAuthenticator.open_signup is False
    assert list(c.Authenticator.admin_users) == [INSTRUCTOR]
    templates = Path(c.JupyterHub.template_paths[0])
    assert (templates / "signup.html").is_file() and (templates / "authorization-area.html").is_file()
    assert VALUES.read_text().count("INSTRUCTOR") == 2, "the instructor's name: one setting (and the header's note)"


def test_the_hook_gives_each_user_their_own_uid_and_their_roles_settings():
    teacher = _spawned(INSTRUCTOR, 1)
    assert (teacher.uid, teacher.gid, teacher.fs_gid) == (1000, 100, 100)
    assert teacher.environment == {"JUPYTER_CONFIG_PATH": "/srv/paged-kv/jupyter/instructor",
                                   "PAGED_KV_HUB_ROLE": "instructor"}
    assert _spawned(INSTRUCTOR.upper(), 1).environment["PAGED_KV_HUB_ROLE"] == "instructor"
    uids = set()
    for user_id, name in enumerate(STUDENTS, start=2):
        student = _spawned(name, user_id)
        assert (student.uid, student.gid, student.fs_gid) == (20000 + user_id,) * 3
        assert student.environment == {"JUPYTER_CONFIG_PATH": "/srv/paged-kv/jupyter/student",
                                       "PAGED_KV_HUB_ROLE": "student"}
        uids.add(student.uid)
    assert len(uids) == len(STUDENTS)
    assert _spawned("pkv-ada", 7).uid == _spawned("pkv-ada", 7).uid == 20007, "stable: from the hub's user id"
    assert _spawned("pkv-last", 1000).uid == 21000
    with pytest.raises(ValueError, match="has no uid"):
        _spawned("pkv-too-many", 1001)


def test_the_hook_records_whose_each_uid_is_where_hub_grade_reads_it(tmp_path):
    """hub-uids/<uid> names the hub user (``autograder.pipeline.hub_uids`` reads it: every student uid is
    "jovyan" in the image); a respawn rewrites it whole; no registry to write stops the spawn with a reason."""
    from autograder.pipeline import hub_uids

    course = tmp_path / "exchange" / "paged-kv"
    registry = course / hub_uids.REGISTRY
    course.mkdir(parents=True)
    _spawned(INSTRUCTOR, 1, registry)
    _spawned("pkv-ada", 7, registry)
    _spawned("pkv-ada", 7, registry)
    assert sorted(p.name for p in registry.iterdir()) == ["1000", "20007"], "one file per uid, none left half-made"
    assert (registry / "20007").read_text() == "pkv-ada\n"
    assert hub_uids.owners_of(tmp_path / "exchange", "paged-kv").registry == {1000: INSTRUCTOR, 20007: "pkv-ada"}
    (tmp_path / "file").write_text("")
    with pytest.raises(RuntimeError, match=r"cannot write its uid registry .*hub\.extraVolumeMounts"):
        _spawned("pkv-bob", 8, tmp_path / "file" / "hub-uids")


def test_the_image_names_every_student_uid_jovyan(tmp_path):
    """The Dockerfile's loop, run here on a copy of /etc/passwd: one "jovyan" line per student uid the hook
    can give, so nbgrader's get_username (pwd.getpwuid, then JUPYTERHUB_USER for jovyan) names the student."""
    import re

    text = (VALUES.parent / "Dockerfile").read_text()
    uids = re.search(r'^ARG STUDENT_UIDS="(\d+) (\d+)"$', text, re.M).groups()
    loop = re.search(r"(for uid in .*?; done)", text).group(1).replace("/etc/passwd", str(tmp_path / "passwd"))
    subprocess.run(["sh", "-c", loop], check=True, env={"NB_USER": "jovyan", "STUDENT_UIDS": " ".join(uids),
                                                        "PATH": os.environ["PATH"]})
    lines = (tmp_path / "passwd").read_text().splitlines()
    named = {int(line.split(":")[2]) for line in lines if line.split(":")[0] == "jovyan"}
    hook = _hook()[1]
    assert named == {_spawned(f"s{n}", n, hook=hook).uid for n in range(1, 1001)} and len(lines) == 1000
    assert lines[0] == "jovyan:x:20001:20001::/home/jovyan:/bin/bash"


# --- the hub in Chromium ------------------------------------------------------------------------------

HUB_CONFIG = """
import sys
sys.path.insert(0, {tests!r})
from deploy_hub import apply_values
apply_values(c, {values!r})
# What is not the chart's: a local spawner, no proxy, the hub's own port, a home page after login.
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.JupyterHub.proxy_class = "deploy_hub.NoProxy"
c.Proxy.should_start = False
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.bind_url = "http://127.0.0.1:{public_port}"
c.JupyterHub.default_url = "/hub/home"
c.JupyterHub.db_url = "sqlite:///{folder}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.pid_file = "{folder}/hub.pid"
"""


@pytest.fixture(scope="module")
def deploy_hub():
    from chromium import chromium_or_reason

    folder = Path(tempfile.mkdtemp(prefix="pkv-deploy-hub-"))
    chromium, why = chromium_or_reason(folder / "apt.log")
    if chromium is None:
        pytest.skip(why)
    port = free_port()
    (folder / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        tests=str(Path(__file__).resolve().parents[1] / "notebooks"), values=values_text(INSTRUCTOR),
        port=port, public_port=free_port(), folder=folder))
    log = folder / "hub.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
                                   cwd=folder, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(lambda: urllib.request.urlopen(url + "/hub/login", timeout=5), process, 60, log, "the hub")
        yield SimpleNamespace(url=url, chromium=chromium, log=log)
    finally:
        stop(process, 10)
        import shutil
        shutil.rmtree(folder, ignore_errors=True)


def _signup(page, hub, name: str, password: str) -> str:
    page.goto(hub.url + "/hub/signup")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.fill("#password_confirmation_input", password)
    page.click("#signup_submit")
    page.wait_for_load_state()
    return page.inner_text("body")


def _login(page, hub, name: str, password: str) -> str:
    page.goto(hub.url + "/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_load_state()
    return page.url


def test_signup_authorization_and_login_in_chromium(deploy_hub):
    from chromium import LAUNCH_ARGS

    sync_api = pytest.importorskip("playwright.sync_api")  # only this test needs it

    hub = deploy_hub
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=hub.chromium, args=LAUNCH_ARGS)
        try:
            teacher, student, intruder = (browser.new_context().new_page() for _ in range(3))
            teacher.goto(hub.url + "/hub/login")
            assert teacher.locator("a[href$='/hub/signup']").count() == 1, "the login page links to the sign-up"

            assert "signup was successful" in _signup(teacher, hub, INSTRUCTOR, "teacher-pw-1")
            assert _login(teacher, hub, INSTRUCTOR, "teacher-pw-1").endswith("/hub/home")
            teacher.goto(hub.url + "/hub/admin")
            assert teacher.url.endswith("/hub/admin"), "the instructor is the hub's admin"

            assert "sent to the admin" in _signup(student, hub, STUDENTS[0], "student-pw-1")
            assert "/hub/login" in _login(student, hub, STUDENTS[0], "student-pw-1"), "logged in before authorization"
            response = student.goto(hub.url + "/hub/authorize")
            assert response.status == 403 or "/hub/login" in student.url

            # NativeAuthenticator's menu ("Authorize Users", "Change Password") is its page.html: there only
            # with its templates folder in c.JupyterHub.template_paths (it adds the folder itself, after
            # JupyterHub's own, which then win).
            teacher.goto(hub.url + "/hub/home")
            teacher.click("a.nav-link[href$='/hub/authorize']")
            teacher.click(f"a[href$='/hub/authorize/{STUDENTS[0]}']")
            teacher.wait_for_load_state()
            assert _login(student, hub, STUDENTS[0], "student-pw-1").endswith("/hub/home")
            assert STUDENTS[0] in student.inner_text("body")
            assert student.locator("a.nav-link[href$='/hub/change-password']").count() == 1
            assert student.locator("a.nav-link[href$='/hub/authorize']").count() == 0
            response = student.goto(hub.url + "/hub/admin")
            assert response.status == 403, "a student is no admin"

            assert "already in use" in _signup(intruder, hub, INSTRUCTOR, "intruder-pw")
            assert "/hub/login" in _login(intruder, hub, INSTRUCTOR, "intruder-pw")
        finally:
            browser.close()
    log = hub.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
