"""The hub's pieces that need no root and no running hub: names, settings, role configs, the exchange checks."""

import html
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.collect import collect
from autograder.course.notebook import BEGIN

from autograder.exchange import exchange
from hub import accounts, mounts, proxy, roles, runtime
from hub.layout import COURSE_ID, DEMO_PASSWORD, Layout, check_account_name
from hub.settings import HubSettings, configure

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("root", ["relative/hub", "/", "/home", "/tmp", "/srv"])
def test_a_hub_folder_must_be_absolute_and_its_own(root):
    with pytest.raises(ValueError):
        Layout(Path(root))


@pytest.mark.parametrize("prefix", ["", "pkv", "PKV-", "toolongprefix-", "p_v-"])
def test_an_account_prefix_is_short_lowercase_and_ends_with_a_dash(prefix, tmp_path):
    with pytest.raises(ValueError):
        Layout(tmp_path, prefix)


@pytest.mark.parametrize("name", ["root;rm", "Student", "-x", "a" * 17, "", "../x"])
def test_unsafe_account_names_are_refused(name):
    with pytest.raises(ValueError):
        check_account_name(name)


@pytest.mark.parametrize("count", [0, -1, 201, 2.0, True, "3"])
def test_the_class_size_is_a_whole_number_from_1_to_200(count, tmp_path):
    with pytest.raises(ValueError):
        Layout(tmp_path).students(count)


def test_students_are_named_after_the_prefix(tmp_path):
    layout = Layout(tmp_path, "ab-")
    assert layout.students(2) == ["ab-student1", "ab-student2"] and layout.instructor == "ab-instructor"


def test_the_demo_password_says_it_is_one():
    assert "demo" in DEMO_PASSWORD and "not" in DEMO_PASSWORD


def test_a_weak_demo_password_is_refused_before_any_account_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for password in ("short", "has:colon-in-it", "two\nlines-of-text"):
        with pytest.raises(ValueError):
            accounts.ensure_accounts(Layout(tmp_path), ["pkv-x"], password)


def test_accounts_are_only_made_by_root(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(accounts.AccountError, match="needs root"):
        accounts.ensure_accounts(Layout(tmp_path), ["pkv-x"], DEMO_PASSWORD)


def test_an_existing_account_the_hub_did_not_make_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    existing = pwd.getpwuid(os.getuid()).pw_name  # exists, and is not in this hub's record
    if not accounts.is_safe_name(existing):
        pytest.skip(f"this machine's user {existing!r} is not a name the hub would make")
    with pytest.raises(accounts.AccountError, match="not made by this hub"):
        accounts.ensure_accounts(Layout(tmp_path), [existing], DEMO_PASSWORD)


def test_students_keep_the_assignment_list_and_validate_but_not_the_instructor_tools():
    disabled = roles.student_page_config()["disabledExtensions"]
    assert "@jupyter/nbgrader:assignment-list" not in disabled and "@jupyter/nbgrader:menu" not in disabled
    assert {
        "@jupyter/nbgrader:formgrader",
        "@jupyter/nbgrader:create-assignment",
        "@jupyter/nbgrader:course-list",
    } <= set(disabled)
    assert "@jupyter/nbgrader:validate-assignment" not in disabled


def test_role_configs_name_the_exchange_and_course_and_switch_off_formgrader_for_students(tmp_path):
    layout = Layout(tmp_path / "hub")
    folders = roles.write_role_configs(layout, tmp_path / "course")
    student = (folders["student"] / "nbgrader_config.py").read_text()
    instructor = (folders["instructor"] / "nbgrader_config.py").read_text()
    for text in (student, instructor):
        assert f"c.CourseDirectory.course_id = {COURSE_ID!r}" in text
        assert f"c.Exchange.root = {str(layout.exchange)!r}" in text
    assert "load_subconfig" in instructor and str(tmp_path / "course") in instructor and "load_subconfig" not in student
    server = json.loads((folders["student"] / "jupyter_server_config.json").read_text())
    assert server["ServerApp"]["jpserver_extensions"] == {
        **{name: False for name in roles.INSTRUCTOR_SERVER_EXTENSIONS},
        roles.NBGRADER_VALIDATE: False,
        roles.VALIDATE_MESSAGE_FIRST: True,
        roles.POLICY_EXTENSION: True,
        "pkv_first_screen": True,
    }
    instructor_server = json.loads((folders["instructor"] / "jupyter_server_config.json").read_text())
    assert instructor_server["ServerApp"] == {
        "jpserver_extensions": {roles.POLICY_EXTENSION: True, "pkv_formgrader_steps": True}
    }
    for role, folder in folders.items():
        for module, source in roles.EXTENSIONS[role].items():
            assert (folder / f"{module}.py").read_text() == (ROOT / "hub" / source).read_text()
        overrides = json.loads((folder / "labconfig" / "default_setting_overrides.json").read_text())
        assert overrides["@jupyterlab/apputils-extension:notification"] == {
            "fetchNews": "false",
            "checkForUpdates": False,
        }
        culling = json.loads((folder / "jupyter_server_config.json").read_text())["MappingKernelManager"]
        assert culling["cull_idle_timeout"] == 1800 and culling["cull_connected"] is False


def _settings(tmp_path, **changes):
    values = dict(
        hub_dir=str(tmp_path / "hub"),
        prefix="pkv-",
        instructor="pkv-instructor",
        students=["pkv-student1"],
        port=8000,
        hub_port=8081,
        proxy_api_port=8001,
        proxy="/bin/chp",
        extra={
            "paths": {
                "python": "/hub/runtime/bin/python",
                "course_prefix": "/venv",
                "student_pythonpath": "/hub/shared/src",
                "instructor_repo": "/hub/private/repo",
            }
        },
    )
    values.update(changes)
    return HubSettings(**values)


@pytest.mark.parametrize("changes", [{"students": []}, {"instructor": "Root"}, {"hub_port": 8000}, {"port": 80}])
def test_hub_settings_refuse_what_cannot_work(tmp_path, changes):
    with pytest.raises(ValueError):
        _settings(tmp_path, **changes)


def test_jupyterhub_is_configured_for_pam_local_processes_and_the_course_roles(tmp_path):
    from traitlets.config import Config

    settings = _settings(tmp_path)
    settings.save(tmp_path / "hub.json")
    assert HubSettings.load(tmp_path / "hub.json") == settings
    c = Config()
    configure(c, settings)
    assert c.JupyterHub.authenticator_class == "pam" and c.JupyterHub.spawner_class == "localprocess"
    assert c.Authenticator.allowed_users == {"pkv-instructor", "pkv-student1"}
    assert c.Authenticator.admin_users == {"pkv-instructor"}
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8000" and c.Spawner.notebook_dir == "~"

    class Spawner:
        def __init__(self, name):
            self.user, self.environment = type("U", (), {"name": name}), {}

    for name, role in (("pkv-instructor", "instructor"), ("pkv-student1", "student")):
        spawner = Spawner(name)
        c.Spawner.pre_spawn_hook(spawner)
        assert spawner.environment["PAGED_KV_HUB_ROLE"] == role
        assert spawner.environment["JUPYTER_CONFIG_PATH"].startswith(str(settings.layout.role_config(role)))
        assert spawner.environment["PYTHONPATH"] == ("/hub/private/repo" if role == "instructor" else "/hub/shared/src")
    assert c.Spawner.cmd == ["/hub/runtime/bin/python", "-m", "jupyterhub.singleuser"]
    (culler,) = c.JupyterHub.services
    assert culler["command"] == [
        sys.executable,
        "-m",
        "jupyterhub_idle_culler",
        "--timeout=3600",
        "--cull-every=600",
        f"--config={ROOT / 'hub' / 'idle_culler_config.py'}",
    ]
    (role,) = c.JupyterHub.load_roles
    assert role["services"] == [culler["name"]] and set(role["scopes"]) == {
        "list:users",
        "read:users:activity",
        "read:servers",
        "delete:servers",
    }  # never admin: it deletes no user


def test_the_idle_culler_is_installed_and_takes_the_flags_the_hub_gives_it(tmp_path):
    import subprocess

    from hub.settings import culler_command

    command = culler_command(120)
    assert command[3:5] == ["--timeout=120", "--cull-every=60"]
    shown = subprocess.run([*command[:3], "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for flag in command[3:]:
        assert flag.split("=")[0] + "=" in shown.stdout, flag


def test_the_culler_config_drops_only_its_pycurl_advice():
    import logging
    import runpy

    from jupyterhub_idle_culler import IdleCuller

    runpy.run_path(str(ROOT / "hub" / "idle_culler_config.py"), init_globals={"c": None})
    log = IdleCuller().log
    assert log.name == "IdleCuller"  # the logger the config file filters (traitlets names it after the class)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    log.addHandler(handler)
    try:
        log.warning("Could not load pycurl: No module named 'pycurl'\npycurl is recommended ...")
        log.warning("Culling server pkv-student1 (inactive for 01:00:00)")
    finally:
        log.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["Culling server pkv-student1 (inactive for 01:00:00)"]


def test_the_idle_timeout_is_zero_for_never_or_a_minute_at_least(tmp_path):
    from traitlets.config import Config

    for bad in (-1, 30, 59, 1.5, True, "3600"):
        with pytest.raises(ValueError, match="idle timeout"):
            _settings(tmp_path, idle_timeout=bad)
    c = Config()
    configure(c, _settings(tmp_path, idle_timeout=0))
    assert "services" not in c.JupyterHub and "load_roles" not in c.JupyterHub


def test_jupyterhub_config_silences_only_jupyterhubs_own_schema_version_warning(tmp_path, monkeypatch):
    """JupyterHub 5.5.0's server-action schema has an integer version: jupyter-events warns at every start."""
    import runpy
    import warnings

    from jupyter_events.utils import JupyterEventsVersionWarning
    from traitlets.config import Config

    _settings(tmp_path).save(tmp_path / "hub.json")
    monkeypatch.setenv("PAGED_KV_HUB_SETTINGS", str(tmp_path / "hub.json"))
    message = (
        "The `version` property of an event schema must be a string. It has been type coerced, but in a "
        "future version of this library, it will fail to validate. Please update schema: {}"
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runpy.run_path(str(ROOT / "hub" / "jupyterhub_config.py"), init_globals={"get_config": Config})
        for schema in (
            "https://schema.jupyter.org/jupyterhub/events/server-action",
            "https://events.jupyter.org/some_extension/v1",
        ):
            warnings.warn(JupyterEventsVersionWarning(message.format(schema)))
        warnings.warn(UserWarning(message.format("https://schema.jupyter.org/jupyterhub/events/server-action")))
    shown = [(w.category, str(w.message).rsplit(" ", 1)[-1]) for w in seen]
    assert shown == [
        (JupyterEventsVersionWarning, "https://events.jupyter.org/some_extension/v1"),
        (UserWarning, "https://schema.jupyter.org/jupyterhub/events/server-action"),
    ], shown


def test_jupyterhubs_own_schema_is_the_one_that_warns():
    """When a JupyterHub release fixes its schema, the filter in hub/jupyterhub_config.py can go."""
    from pathlib import Path as _Path

    import jupyterhub
    import yaml

    schema = yaml.safe_load(
        (_Path(jupyterhub.__file__).parent / "event-schemas" / "server-actions" / "v1.yaml").read_text()
    )
    assert schema["$id"] == "https://schema.jupyter.org/jupyterhub/events/server-action"
    if isinstance(schema["version"], str):
        pytest.fail(
            "JupyterHub's server-action schema now has a string version: remove the warning filter "
            "in hub/jupyterhub_config.py"
        )


def test_the_grading_table_names_the_reports_by_their_absolute_paths(tmp_path, monkeypatch):
    """make hub-grade runs in the repository but grades the instructor's course folder: a path relative to
    that folder, printed there, named a file that is not there."""
    from autograder.grade.grade import table

    monkeypatch.chdir(tmp_path)
    course = tmp_path / "home" / "paged-kv-course"
    summary = {
        "lab": "02-atomic-prefill",
        "seconds": 3.0,
        "workers": 1,
        "cpu_seconds": 2.0,
        "work": str(course / "autograder" / "work"),
        "students": [
            {
                "student": "s1",
                "score": 10.0,
                "score_text": "10.0",
                "seconds": 1.0,
                "repairs": [],
                "events": [],
                "ok": True,
            }
        ],
    }
    last = table(summary).splitlines()[-1]
    assert f"grades: {course}/autograder/work/reports/grades.csv," in last
    assert f"log: {course}/autograder/work/reports/02-atomic-prefill/log.csv" in last


def test_the_hubs_own_ports_are_never_the_public_one(monkeypatch):
    """The public port is chosen before it is bound (a test picks a free one and passes it): the hub's API and
    proxy ports, picked the same way, must not be that one (it happened: "three different ports ... needed")."""
    import socket

    from hub.__main__ import free_port

    offered = iter([8123, 8123, 8124])

    class FakeSocket:
        def __init__(self, *args):
            self.port = next(offered)

        def __enter__(self):
            return self

        def __exit__(self, *args):
            return False

        def bind(self, address):
            pass

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(socket, "socket", FakeSocket)
    assert free_port(avoid={8123}) == 8124


def test_open_to_all_needs_every_folder_above_searchable(tmp_path):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    (inner / "f").write_text("x")
    for path in (tmp_path, tmp_path / "a", inner):
        path.chmod(0o755)
    (inner / "f").chmod(0o644)
    if not runtime.open_to_all(tmp_path):
        pytest.skip("the test's temporary folder is private here")
    assert runtime.open_to_all(inner / "f")
    (tmp_path / "a").chmod(0o750)
    assert not runtime.open_to_all(inner / "f")
    (tmp_path / "a").chmod(0o755)


def test_no_shared_interpreter_gives_a_clear_error(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(runtime.RuntimeSetupError, match="no Python"):
        runtime.shared_interpreter([private / "python3", tmp_path / "missing"])


def test_a_missing_proxy_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(proxy.shutil, "which", lambda name: None)
    with pytest.raises(proxy.ProxyMissing, match="npm install -g configurable-http-proxy"):
        proxy.find_or_install_proxy(tmp_path, may_install=False)
    (tmp_path / "node_modules" / ".bin").mkdir(parents=True)
    proxy.installed_in(tmp_path).write_text("")
    assert proxy.find_or_install_proxy(tmp_path, may_install=False) == proxy.installed_in(tmp_path)


def test_a_submission_folder_not_owned_by_the_student_it_names_is_found(tmp_path):
    inbound = tmp_path / COURSE_ID / "inbound"
    me = pwd.getpwuid(os.getuid()).pw_name
    for name in (
        f"{me}+02-atomic-prefill+2026-01-01 10:00:00.000000 UTC+abc",
        "someone-else+02-atomic-prefill+2026-01-01 10:00:00.000000 UTC+def",
        "someone-else+03-decode-growth+2026-01-01 10:00:00.000000 UTC+ghi",
    ):
        (inbound / name).mkdir(parents=True)
    forged = exchange.forged_submissions(tmp_path, COURSE_ID, "02-atomic-prefill")
    assert list(forged) == ["someone-else+02-atomic-prefill+2026-01-01 10:00:00.000000 UTC+def"]
    assert forged[list(forged)[0]] == me


def test_a_forged_submission_is_set_aside_and_the_others_stay_to_be_collected(tmp_path):
    inbound = tmp_path / COURSE_ID / "inbound"
    me = pwd.getpwuid(os.getuid()).pw_name
    own, forged = (
        f"{me}+02-atomic-prefill+2026-01-01 10:00:00.000000 UTC+abc",
        "someone-else+02-atomic-prefill+2026-01-02 10:00:00.000000 UTC+def",
    )
    for name in (own, forged):
        (inbound / name).mkdir(parents=True)
        (inbound / name / "atomic_prefill.ipynb").write_text("{}")
    quarantine = tmp_path / "quarantine"
    assert exchange.set_aside_forged(tmp_path, COURSE_ID, "02-atomic-prefill", quarantine) == {forged: me}
    assert sorted(p.name for p in inbound.iterdir()) == [own]
    assert (quarantine / forged / "atomic_prefill.ipynb").exists()
    assert exchange.set_aside_forged(tmp_path, COURSE_ID, "02-atomic-prefill", quarantine) == {}


@pytest.mark.parametrize("where, course", [(Path("relative"), COURSE_ID), (Path("/x"), ""), (Path("/x"), "../up")])
def test_the_exchange_steps_refuse_a_relative_exchange_or_a_bad_course_id(where, course):
    with pytest.raises(ValueError):
        exchange.release(["02-atomic-prefill"], where, course)


def test_collect_keeps_the_exchange_files_beside_the_repaired_notebook(tmp_path):
    lab, notebook = "02-atomic-prefill", "atomic_prefill.ipynb"
    source = tmp_path / "inbox" / "ann" / lab
    source.mkdir(parents=True)
    (source / notebook).write_bytes((ROOT / "course" / lab / notebook).read_bytes())
    (source / "timestamp.txt").write_text("2026-01-01 10:00:00.000000 UTC")
    (source / "submission_secret.txt").write_text("s3cret")
    (source / "notes.txt").write_text("not kept")
    files = sorted(p for p in source.iterdir())
    records = collect.write_submissions(
        lab,
        {"ann": collect.Submission("ann", "ann", files)},
        tmp_path,
        ROOT / "course",
        notebook,
        keep=exchange.EXCHANGE_FILES,
    )
    target = tmp_path / "autograder" / "work" / "submitted" / "ann" / lab
    assert sorted(p.name for p in target.iterdir()) == sorted([notebook, *exchange.EXCHANGE_FILES])
    assert (target / "submission_secret.txt").read_text() == "s3cret" and records[0]["student"] == "ann"
    with pytest.raises(ValueError):
        collect.write_submissions(lab, {}, tmp_path, ROOT / "course", notebook, keep=("x.ipynb",))
    with pytest.raises(ValueError, match="unsafe student id"):
        collect.write_submissions(lab, {"../x": collect.Submission("../x")}, tmp_path, ROOT / "course", notebook)


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_a_folder_behind_a_private_one_is_reached_through_a_read_only_mount_that_clean_removes(tmp_path):
    private = tmp_path / "private"
    (private / "venv").mkdir(parents=True)
    (private / "venv" / "f").write_text("kept")
    private.chmod(0o700)
    layout = Layout(tmp_path / "hub")
    layout.root.mkdir()
    try:
        target = mounts.reachable(layout, private / "venv", "venv")
        assert target == layout.root / "shared" / "venv" and (target / "f").read_text() == "kept"
        assert mounts.reachable(layout, private / "venv", "venv") == target  # a second call reuses it
        with pytest.raises(OSError):
            (target / "g").write_text("no")  # read-only: nothing below HUB_DIR writes into the course
    except mounts.MountError as error:
        pytest.skip(f"this machine refuses bind mounts: {error}")
    finally:
        removed = mounts.unmount_all(layout)
    assert removed == [target] and mounts.mounts_below(layout.root) == []
    assert (private / "venv" / "f").read_text() == "kept"


def test_an_open_folder_is_used_as_it_is_and_a_bad_mount_name_is_refused(tmp_path):
    layout = Layout(tmp_path / "hub")
    if runtime.open_to_all(ROOT / "paged_kv"):
        assert mounts.reachable(layout, ROOT / "paged_kv", "src/paged_kv") == (ROOT / "paged_kv").resolve()
    for name in ("", "/abs", "../up", "a/../b"):
        with pytest.raises(ValueError):
            mounts.reachable(layout, tmp_path, name, owner="root")


def test_the_hub_command_refuses_a_relative_folder_and_says_so(capsys):
    from hub.__main__ import main

    assert main(["--dir", "relative/hub", "clean"]) == 2
    assert "must be an absolute path" in capsys.readouterr().err


def test_cleaning_a_hub_that_is_not_there_changes_nothing(tmp_path, capsys):
    from hub.__main__ import main

    assert main(["--dir", str(tmp_path / "none"), "clean"]) == 0
    assert "nothing to clean" in capsys.readouterr().out and not (tmp_path / "none").exists()


def test_clean_refuses_a_folder_that_is_not_a_hubs(tmp_path, monkeypatch):
    from hub.__main__ import clean

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "file").write_text("keep")
    with pytest.raises(accounts.AccountError, match="not a course hub"):
        clean(Layout(tmp_path / "precious"))
    assert (tmp_path / "precious" / "file").read_text() == "keep"


def test_the_hub_gives_students_one_edition_of_the_package_at_a_time(tmp_path):
    """hub.package: the released lab's edition replaces the one before, readable by every account."""
    import stat

    from autograder.editions.manifest import stubs_for
    from hub.layout import Layout
    from hub.package import install_edition, installed_edition, package_dir

    layout = Layout(tmp_path / "hub")
    layout.root.mkdir()
    install_edition(layout, "02-atomic-prefill")
    assert installed_edition(layout) == "02-atomic-prefill"
    manager = (package_dir(layout) / "paged_kv" / "cache" / "manager.py").read_text()
    assert "allocate_for_prefill is a TODO of lab 02" in manager
    install_edition(layout, "05-prefix-cache")
    assert installed_edition(layout) == "05-prefix-cache"
    assert (
        "allocate_for_prefill is a TODO" not in (package_dir(layout) / "paged_kv" / "cache" / "manager.py").read_text()
    )
    edition = (package_dir(layout) / "paged_kv" / "cache" / "edition.py").read_text()
    assert all(s.dotted in edition for s in stubs_for("05-prefix-cache"))
    assert sorted(p.name for p in layout.root.iterdir()) == ["package"]  # no half-made folder is left
    for path in package_dir(layout).rglob("*"):
        assert path.stat().st_mode & (stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)), path
    with pytest.raises(ValueError, match="not a graded lab"):
        install_edition(layout, "99-nothing")


def test_make_hub_closes_the_whole_checkout_but_its_environment_and_clean_keeps_it_closed(tmp_path):
    """hub.checkout (issue 47): every entry at the checkout's top but the course environment (the solutions, the
    package, the graders, git history, and the build outputs: dist/ as the platform builders once wrote it, 0644 in
    0755, test artifacts, benchmark results, build/, a file) gets the instructor's group and mode 0750 (a file
    0640, 0750 where its owner runs it); the hub refuses while one is open; hub-clean gives them back to the
    owner's group, still closed."""
    import grp
    import stat

    from hub import checkout

    repo, environment = tmp_path / "repo", tmp_path / "environment"
    folders = ["solutions", "paged_kv", "autograder", "tests", ".git", "dist/gradescope", "test-artifacts/browser"]
    for name in folders + ["bench/results", "build/lib/paged_kv", ".venv/bin", "course"]:
        (repo / name).mkdir(parents=True)
    for path in [repo, *repo.rglob("*")]:
        os.chmod(path, 0o755)
    (repo / "dist" / "gradescope" / "02-atomic-prefill-autograder.zip").write_text(BEGIN)
    (repo / "README.md").write_text("readme")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(repo / "run.sh", 0o755)
    tops = sorted({name.split("/")[0] for name in folders} | {"bench", "build", "course", "README.md", "run.sh"})
    with pytest.raises(checkout.CheckoutOpen, match="dist") as refused:
        checkout.require_closed(repo, environment)
    assert all(str(repo / name) in str(refused.value) for name in tops)
    group = grp.getgrgid(os.getegid()).gr_name
    changed = checkout.close(group, repo)
    assert sorted(changed) == sorted(str(repo / n) for n in tops)
    checkout.require_closed(repo)
    modes = {name: stat.S_IMODE((repo / name).stat().st_mode) for name in tops}
    assert modes == {name: 0o640 if name == "README.md" else 0o750 for name in tops}
    assert stat.S_IMODE((repo / ".venv").stat().st_mode) == 0o755, "students' servers run the course environment"
    assert checkout.close(group, repo) == [], "closing twice changes nothing"
    checkout.keep_closed(repo)
    checkout.require_closed(repo)
    checkout.require_closable(repo, environment)


def test_the_hub_refuses_before_any_account_where_closing_the_checkout_cannot_close_it(tmp_path):
    """A link at the checkout's top to a folder others may read (a dist/ kept elsewhere) is never followed by
    close, so the hub refuses, naming it; so it does for a copy of the package installed into the course
    environment (a non-editable install: every answer in site-packages)."""
    import grp
    import sysconfig

    from hub import checkout

    repo, elsewhere, environment = tmp_path / "repo", tmp_path / "elsewhere", tmp_path / "environment"
    repo.mkdir()
    elsewhere.mkdir()
    os.chmod(elsewhere, 0o755)
    (repo / "dist").symlink_to(elsewhere)
    with pytest.raises(checkout.CheckoutOpen, match=r"dist \(a link\)"):
        checkout.require_closable(repo, environment)
    assert checkout.close(grp.getgrgid(os.getegid()).gr_name, repo) == []
    assert oct(elsewhere.stat().st_mode & 0o777) == oct(0o755), "a link's target is not the checkout's to change"
    with pytest.raises(checkout.CheckoutOpen, match="dist"):
        checkout.require_closed(repo, environment)
    (repo / "dist").unlink()
    site = sysconfig.get_paths(vars={"base": str(environment), "platbase": str(environment)})["purelib"]
    (Path(site) / "paged_kv").mkdir(parents=True)
    with pytest.raises(checkout.CheckoutOpen, match="site-packages/paged_kv"):
        checkout.require_closable(repo, environment)


def test_a_student_who_submitted_several_times_is_told_which_submission_was_graded(tmp_path):
    """Issue 37 item 6b: the latest folder is graded; its time is in the student's Grading notes (their feedback
    page) and the instructor's log (``graded-submission``), with a ``superseded`` line for each earlier one."""
    from autograder.exchange import inbound

    lab, notebook = "02-atomic-prefill", "atomic_prefill.ipynb"
    me = pwd.getpwuid(os.getuid()).pw_name
    folder = tmp_path / COURSE_ID / "inbound"
    times = ("2026-01-01 10:00:00.000000 UTC", "2026-01-02 11:30:00.000000 UTC", "2026-01-03 09:15:00.000000 UTC")
    for when in times:
        entry = folder / f"{me}+{lab}+{when}+{when[-10:-4]}"
        entry.mkdir(parents=True)
        (entry / notebook).write_bytes((ROOT / "course" / lab / notebook).read_bytes())
        (entry / "timestamp.txt").write_text(when)
    found = inbound.collect_inbound(tmp_path, COURSE_ID, lab, tmp_path / "inbox")
    submission = found[me]
    assert submission.submitted_at == "2026-01-03 09:15:00 UTC"
    assert submission.superseded == ["2026-01-02 11:30:00 UTC", "2026-01-01 10:00:00 UTC"]
    records = collect.write_submissions(lab, found, tmp_path, ROOT / "course", notebook, keep=exchange.EXCHANGE_FILES)
    repairs = records[0]["repairs"]
    assert ("graded-submission", "2026-01-03 09:15:00 UTC (latest of 3)") in repairs
    assert [d for k, d in repairs if k == "superseded"] == [
        "submission of 2026-01-02 11:30:00 UTC superseded by 2026-01-03 09:15:00 UTC",
        "submission of 2026-01-01 10:00:00 UTC superseded by 2026-01-03 09:15:00 UTC",
    ]
    import nbformat

    graded = nbformat.read(tmp_path / "autograder" / "work" / "submitted" / me / lab / notebook, as_version=4)
    notes = next(c.source for c in graded.cells if c.get("id") == "grading-notes")
    submitted = " ".join(html.unescape(notes).split())  # the notes are written escaped (inert)
    assert "your latest submission, of 2026-01-03 09:15:00 UTC, was graded" in submitted
    assert "(2026-01-02 11:30:00 UTC, 2026-01-01 10:00:00 UTC) were superseded by it" in submitted
    one = collect.write_submissions(
        lab,
        {me: collect.Submission(me, me, submission.files, submitted_at="2026-01-03 09:15:00 UTC")},
        tmp_path,
        ROOT / "course",
        notebook,
    )
    assert not [k for k, _ in one[0]["repairs"] if k in ("graded-submission", "superseded")]


def test_students_get_the_extension_that_makes_view_feedback_open_the_page(tmp_path):
    """Issue 37 item 6b: nbgrader 0.9's "(view feedback)" runs filebrowser:go-to-path on the feedback folder,
    which only shows it; the student's JupyterLab loads hub/feedback_link (found as JupyterLab finds any
    prebuilt extension), which opens the page(s) in that folder; the instructor's does not."""
    from jupyterlab_server.config import get_page_config

    folders = roles.write_role_configs(Layout(tmp_path / "hub"), tmp_path / "course")
    server = json.loads((folders["student"] / "jupyter_server_config.json").read_text())
    paths = server["LabApp"]["extra_labextensions_path"]
    assert paths == [str(folders["student"] / "labextensions")]
    found = get_page_config(paths)["federated_extensions"]  # what JupyterLab's page loads
    assert [(e["name"], e["load"], e["extension"]) for e in found] == [
        (roles.FEEDBACK_LINK_NAME, "static/remoteEntry.js", "./extension")
    ]
    assert (Path(paths[0]) / roles.FEEDBACK_LINK_NAME / "static" / "remoteEntry.js").is_file()
    instructor = json.loads((folders["instructor"] / "jupyter_server_config.json").read_text())
    assert "extra_labextensions_path" not in instructor["LabApp"]


_FEEDBACK_LINK_IN_NODE = r"""
const entry = require(process.argv[1]);
const opened = [];
let listener = null;
const listings = {
  "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC": {type: "directory", content: [
    {type: "file", name: "atomic_prefill.html", path: "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC/atomic_prefill.html"},
    {type: "file", name: "notes.txt", path: "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC/notes.txt"},
  ]},
  "02-atomic-prefill": {type: "directory", content: [{type: "file", name: "x.html", path: "02-atomic-prefill/x.html"}]},
};
const app = {
  commands: {
    commandExecuted: {connect: (f) => { listener = f; }},
    execute: (id, args) => { opened.push([id, args.path]); return Promise.resolve(); },
  },
  serviceManager: {contents: {get: (path) => Promise.resolve(listings[path])}},
};
(async () => {
  const factory = await globalThis._JUPYTERLAB["pkv-feedback-link"].get("./extension");
  const plugins = factory().default;
  plugins[0].activate(app);
  const steps = [
    {id: "filebrowser:go-to-path", args: {path: "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC"}},
    {id: "filebrowser:go-to-path", args: {path: "02-atomic-prefill"}},
    {id: "docmanager:open", args: {path: "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC"}},
  ];
  for (const step of steps) { await listener(null, step); }
  console.log(JSON.stringify({plugins: plugins.map((p) => [p.id, p.autoStart]), opened}));
})();
"""


@pytest.mark.skipif(not shutil.which("node"), reason="needs node to run the extension's JavaScript")
def test_view_feedback_opens_the_page_in_the_feedback_folder_and_nothing_else():
    """The extension as JupyterLab loads it (the federated container's get('./extension')), driven with a fake
    app: go-to-path on a feedback folder opens its .html page; any other path or command opens nothing."""
    done = subprocess.run(
        ["node", "-e", _FEEDBACK_LINK_IN_NODE, str(roles.FEEDBACK_LINK / "static" / "remoteEntry.js")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["plugins"] == [["pkv-feedback-link:open-feedback", True]]
    assert result["opened"] == [
        ["docmanager:open", "02-atomic-prefill/feedback/2026-01-03 09:15:00.000000 UTC/atomic_prefill.html"]
    ]
