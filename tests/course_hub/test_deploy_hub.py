"""The Kubernetes hub's own settings (deploy/z2jh-values.yaml), run here: the pre_spawn_hook, the pod's file
layout in the single-user image, and sign-up, login and a student's own server with the real
NativeAuthenticator 1.3.0 in Chromium.

``deploy_hub.apply_values`` applies the values' ``hub.config``, ``hub.extraConfig`` and the server's command
and first page as the chart's ``jupyterhub_config.py`` does. ``image_tree.stage_image`` stages the image's
file tree from deploy/Dockerfile's own commands (no Docker). The hub then runs with configurable-http-proxy
and a local spawner instead of KubeSpawner (``deploy_hub.ImageTreeSpawner``: the hook's environment, the
image's folders in the staged tree; the hook's uids are not applied), so what is tested is the authenticator,
the hook and the image's settings, not a cluster.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from traitlets.config import Config, PyFileConfigLoader

from deploy_hub import VALUES, apply_values, run_init_containers, values_text
from image_tree import ROOT, stage_image
from lab_server import free_port, stop, wait_until_up

from hub.layout import COURSE_ID

INSTRUCTOR, STUDENTS = "pkv-teacher", ("pkv-ada", "pkv-bob")
RELEASED = "00-start-here"  # the lab the browser test's student finds released in the exchange


REGISTRY = Path(tempfile.mkdtemp(prefix="pkv-hub-uids-")) / "hub-uids"  # where the hook records uids here
atexit.register(shutil.rmtree, REGISTRY.parent, True)


@functools.lru_cache(maxsize=None)
def _hook(registry: Path = REGISTRY):
    c = Config()
    with mock.patch.dict(os.environ, PAGED_KV_UID_REGISTRY=str(registry)):  # read when the values' code runs
        apply_values(c, values_text(INSTRUCTOR))
    return c, c.KubeSpawner.pre_spawn_hook


def _spawned(name: str, user_id: int, registry: Path = REGISTRY):
    spawner = SimpleNamespace(
        user=SimpleNamespace(name=name, id=user_id), environment={}, uid=1000, gid=None, fs_gid=100
    )
    _hook(registry)[1](spawner)
    return spawner


@pytest.fixture(scope="module")
def image():
    """The single-user image's file tree, staged from deploy/Dockerfile's commands (image_tree), about a second."""
    folder = Path(tempfile.mkdtemp(prefix="pkv-image-"))
    try:
        yield stage_image(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    assert teacher.environment == {
        "JUPYTER_CONFIG_PATH": "/srv/paged-kv/jupyter/instructor",
        "PAGED_KV_HUB_ROLE": "instructor",
    }
    assert _spawned(INSTRUCTOR.upper(), 1).environment["PAGED_KV_HUB_ROLE"] == "instructor"
    uids = set()
    for user_id, name in enumerate(STUDENTS, start=2):
        student = _spawned(name, user_id)
        assert (student.uid, student.gid, student.fs_gid) == (20000 + user_id,) * 3
        assert student.environment == {
            "JUPYTER_CONFIG_PATH": "/srv/paged-kv/jupyter/student",
            "PAGED_KV_HUB_ROLE": "student",
        }
        uids.add(student.uid)
    assert len(uids) == len(STUDENTS)
    assert _spawned("pkv-ada", 7).uid == _spawned("pkv-ada", 7).uid == 20007, "stable: from the hub's user id"
    assert _spawned("pkv-last", 1000).uid == 21000
    with pytest.raises(ValueError, match="has no uid"):
        _spawned("pkv-too-many", 1001)


def test_the_hook_records_whose_each_uid_is_where_hub_grade_reads_it(tmp_path):
    """hub-uids/<uid> names the hub user (``autograder.exchange.hub_uids`` reads it: every student uid is
    "jovyan" in the image); a respawn rewrites it whole; no registry to write stops the spawn with a reason."""
    from autograder.exchange import hub_uids

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


def test_the_image_names_every_student_uid_jovyan(image):
    """The Dockerfile's useradd and passwd loop, staged: one "jovyan" line per uid the hook can give (the
    instructor's and every student's), so nbgrader's get_username (pwd.getpwuid, then JUPYTERHUB_USER for
    jovyan) names the user."""
    lines = image.local("/etc/passwd").read_text().splitlines()
    named = {int(line.split(":")[2]) for line in lines if line.split(":")[0] == "jovyan"}
    assert named == {_spawned(INSTRUCTOR, 1).uid} | {_spawned(f"s{n}", n).uid for n in range(1, 1001)}
    assert len(lines) == 1001 and lines[:2] == [
        "jovyan:x:1000:100::/home/jovyan:/bin/bash",
        "jovyan:x:20001:20001::/home/jovyan:/bin/bash",
    ]


# --- the pod's file layout: the image's tree, staged ------------------------------------------------------


def _role_folder(image, role: str) -> Path:
    """The settings folder the hook's JUPYTER_CONFIG_PATH names for ``role``, in the staged tree."""
    environment = _spawned(*((INSTRUCTOR, 1) if role == "instructor" else (STUDENTS[0], 2))).environment
    assert environment["PAGED_KV_HUB_ROLE"] == role
    return image.local(environment["JUPYTER_CONFIG_PATH"])


def _nbgrader_config(folder: Path):
    """The role's nbgrader_config.py as nbgrader loads it: its config, the files it loads, the course root it sets."""
    loaded = []

    class Loader(PyFileConfigLoader):
        def load_subconfig(self, fname, path=None, profile=None):
            loaded.append(fname)  # the instructor's clone, not in the image

    with mock.patch.dict(os.environ):
        config = Loader("nbgrader_config.py", path=str(folder)).load_config()
        return config, loaded, os.environ.get("PAGED_KV_COURSE_ROOT")


def _server_extensions(folder: Path) -> dict:
    """jpserver_extensions as the role's server resolves them: those the image's Python enables (pip put their
    files in its etc/jupyter; here the course venv, which holds the same lock), then the role's folder's."""
    enabled = {}
    for path in sorted((Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d").glob("*.json")):
        enabled.update(json.loads(path.read_text()).get("ServerApp", {}).get("jpserver_extensions", {}))
    enabled.update(json.loads((folder / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"])
    return enabled


def test_each_roles_settings_folder_is_in_the_image_with_that_roles_settings(image):
    from hub.roles import student_page_config

    mounts = {
        m["name"]: m["mountPath"] for m in yaml.safe_load(values_text())["singleuser"]["storage"]["extraVolumeMounts"]
    }
    student, instructor = _role_folder(image, "student"), _role_folder(image, "instructor")
    assert image.local(image.env["JUPYTER_CONFIG_PATH"]) == student, "a server the hook has not set up is a student's"
    for folder in (student, instructor):
        assert folder.is_dir(), folder
        config, _, _ = _nbgrader_config(folder)
        assert config.CourseDirectory.course_id == COURSE_ID
        assert image.in_image(config.Exchange.root) == mounts["nbgrader-exchange"], "the exchange is the volume"
        assert image.local(mounts["nbgrader-exchange"]).is_dir()

    # The student: the Assignments tab (and the menu that opens it) on, Formgrader off, the first screen.
    page = json.loads((student / "labconfig" / "page_config.json").read_text())
    assert page == student_page_config()
    disabled = page["disabledExtensions"]
    assert "@jupyter/nbgrader:assignment-list" not in disabled and "@jupyter/nbgrader:menu" not in disabled
    assert disabled["@jupyter/nbgrader:formgrader"] is True and disabled["@jupyter/nbgrader:create-assignment"] is True
    extensions = _server_extensions(student)
    assert extensions["nbgrader.server_extensions.formgrader"] is False
    assert extensions["nbgrader.server_extensions.assignment_list"] is True
    assert extensions["pkv_first_screen"] is True
    assert extensions["nbgrader.server_extensions.validate_assignment"] is False  # served with the message first:
    assert extensions["paged_kv.lab.validate_message"] is True  # the image installs paged_kv (deploy/Dockerfile)
    assert (student / "pkv_first_screen.py").read_text() == (ROOT / "hub" / "first_screen.py").read_text()
    assert f"sys.path.insert(0, {str(student)!r})" in (student / "jupyter_server_config.py").read_text()

    # The instructor: Formgrader on, its buttons answered by pkv_formgrader_steps, the course's own config
    # from the clone in their home (deploy/README.md), which the repository holds.
    extensions = _server_extensions(instructor)
    assert extensions["nbgrader.server_extensions.formgrader"] is True and extensions["pkv_formgrader_steps"] is True
    assert not (instructor / "labconfig" / "page_config.json").exists(), "nothing hidden from the instructor"
    _, loaded, course_root = _nbgrader_config(instructor)
    assert course_root == "/home/jovyan/paged-kv-course"
    assert loaded == ["/home/jovyan/paged-kv-course/autograder/nbgrader_config.py"]
    assert (ROOT / Path(loaded[0]).relative_to(course_root)).is_file()


def test_the_images_course_kernel_is_the_one_the_notebooks_ask_for(image):
    """`python -m paged_kv.lab.notebook_kernel install`, staged, put the kernel every course notebook names in
    the image's Python's share/jupyter, running the image's Python and the installed course package."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager(kernel_dirs=[str(image.local("/usr/local/share/jupyter/kernels"))]).get_all_specs()
    notebooks = sorted(ROOT.glob("course/*/*.ipynb")) + sorted(ROOT.glob("solutions/*/*.ipynb"))
    assert len(notebooks) >= 18
    for notebook in notebooks:
        asked = json.loads(notebook.read_text())["metadata"]["kernelspec"]
        assert asked["name"] in specs, (notebook, asked, list(specs))
        spec = specs[asked["name"]]["spec"]
        assert (spec["display_name"], spec["language"]) == (asked["display_name"], asked["language"]), notebook
    argv = specs["python3"]["spec"]["argv"]
    assert image.in_image(argv[0]) == "/usr/local/bin/python"
    assert argv[argv.index("-m") + 1] == "paged_kv.lab.notebook_kernel"
    found = subprocess.run(
        [argv[0], "-c", "import paged_kv.lab.notebook_kernel as k; print(k.__file__)"],
        cwd=image.root,
        env=image.build_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found) == image.site_packages / "paged_kv" / "lab" / "notebook_kernel.py", "the image's own copy"


# --- the hub in Chromium ------------------------------------------------------------------------------

HUB_CONFIG = """
import sys
sys.path.insert(0, {tests!r})
from deploy_hub import apply_values
apply_values(c, {values!r})
# What is not the chart's: a local spawner for KubeSpawner (the hook's environment, the image's folders in the
# staged tree), configurable-http-proxy on local ports, a home page after login.
c.JupyterHub.spawner_class = "deploy_hub.ImageTreeSpawner"
c.ImageTreeSpawner.image_root = {image!r}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = "{folder}/proxy.pid"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.bind_url = "http://127.0.0.1:{public_port}"
c.JupyterHub.default_url = "/hub/home"
c.JupyterHub.db_url = "sqlite:///{folder}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.pid_file = "{folder}/hub.pid"
"""


@pytest.fixture(scope="module")
def deploy_hub(image):
    from chromium import chromium_or_reason

    from hub.proxy import ProxyMissing, find_or_install_proxy

    folder = Path(tempfile.mkdtemp(prefix="pkv-deploy-hub-"))
    chromium, why = chromium_or_reason(folder / "apt.log")
    if chromium is None:
        pytest.skip(why)
    try:
        proxy = find_or_install_proxy(Path(sys.prefix) / "node")  # where `make hub` keeps it
    except ProxyMissing as missing:
        pytest.skip(str(missing))
    # The pod's exchange: the volume (a folder of the tree, at the mount's path) as the init container leaves
    # it, and one lab in outbound/ as a release would put it there (the release itself is not tested here).
    values = values_text(INSTRUCTOR)
    chart_values = yaml.safe_load(values)
    run_init_containers(
        chart_values,
        {m["name"]: image.local(m["mountPath"]) for m in chart_values["singleuser"]["storage"]["extraVolumeMounts"]},
    )
    exchange = image.local("/srv/paged-kv/exchange")
    shutil.copytree(ROOT / "course" / RELEASED, exchange / COURSE_ID / "outbound" / RELEASED)
    port, public_port = free_port(), free_port()
    (folder / "jupyterhub_config.py").write_text(
        HUB_CONFIG.format(
            tests=str(Path(__file__).resolve().parents[1] / "notebooks"),
            values=values,
            image=str(image.root),
            proxy=str(proxy),
            proxy_api_port=free_port(),
            port=port,
            public_port=public_port,
            folder=folder,
        )
    )
    # The hub's environment: the course venv's bin on PATH (for the image's /usr/local/bin, where the chart's
    # `jupyterhub-singleuser` is), and the hook's uid registry (when it writes one) in the tree's exchange.
    environment = dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        PAGED_KV_UID_REGISTRY=str(exchange / COURSE_ID / "hub-uids"),
    )
    log = folder / "hub.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
            cwd=folder,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{public_port}"  # through the proxy, as a browser reaches the chart's proxy
    try:
        wait_until_up(lambda: urllib.request.urlopen(url + "/hub/login", timeout=5), process, 60, log, "the hub")
        yield SimpleNamespace(url=url, chromium=chromium, log=log, image=image)
    finally:
        stop(process, 30)  # the hub stops the student's server and the proxy first
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


def test_signup_authorization_login_and_a_students_server_in_chromium(deploy_hub):
    """The instructor signs up and is the admin; a student signs up, is refused until the instructor authorizes
    them, logs in, starts their server and reaches the Assignments tab; the instructor's name cannot be taken."""
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

            # The student's own server, through the proxy: the values' hook environment in the image's staged
            # tree; their first JupyterLab opens on the Assignments tab, which lists the lab from the exchange.
            student.goto(hub.url + "/hub/home")
            student.click("#start")
            student.wait_for_selector(".jp-LabShell", timeout=120_000)
            assert student.url.startswith(f"{hub.url}/user/{STUDENTS[0]}/lab"), student.url
            student.locator("#released_assignments_list .list_item", has_text=RELEASED).first.wait_for(timeout=60_000)
            current = student.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").all_inner_texts()
            assert [tab.strip() for tab in current] == ["Assignments"]
            assert student.request.get(f"{hub.url}/user/{STUDENTS[0]}/formgrader").status == 404, "a student's role"
            # The hook told the exchange whose the student's pod uid is (hub-grade reads it: hub_uids.py; here the
            # hub runs as this test's user, not as the course folder's owner, so only the file is checked).
            registry = hub.image.local("/srv/paged-kv/exchange") / COURSE_ID / "hub-uids"
            names = {int(p.name): p.read_text().strip() for p in registry.iterdir()}
            assert [uid for uid, name in names.items() if name == STUDENTS[0]] == [20000 + 2], names

            assert "already in use" in _signup(intruder, hub, INSTRUCTOR, "intruder-pw")
            assert "/hub/login" in _login(intruder, hub, INSTRUCTOR, "intruder-pw")
        finally:
            browser.close()
    log = hub.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
