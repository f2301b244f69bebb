"""The Jupyter settings of a student's and of the instructor's single-user server on the hub.

Each role gets a folder (``Layout.role_config``) put first on its server's ``JUPYTER_CONFIG_PATH``:

- ``nbgrader_config.py``: the course id and the exchange (both roles); the instructor's also loads the
  course's own ``autograder/nbgrader_config.py`` with the course folder as its root, so Formgrader,
  ``make hub-grade`` and ``make grade`` share one configuration.
- ``labconfig/page_config.json`` (student only): what ``student-lab/`` hides (Formgrader, Create
  Assignment, the course list), except the Assignments tab and the Nbgrader menu that opens it (then
  listing Assignment List alone): on a hub students fetch, submit and get feedback there. Validate stays.
- ``labconfig/default_setting_overrides.json``: JupyterLab's defaults for this role (``LAB_SETTINGS``): no
  "notified about official Jupyter news?" question and no update check. The question is asked whenever
  the ``fetchNews`` setting is ``"none"`` (its default), whatever ``LabApp.news_url`` says.
- ``jupyter_server_config.json``: no news or update checks on the server side (the hub may have no
  internet); idle kernels culled (``KERNEL_CULLING``); for a student, nbgrader's Formgrader and course-list
  server extensions are off too, so their URLs answer 404.
- the server extensions of the role (``EXTENSIONS``), each a copy of a file of ``hub/`` (students cannot read
  the repository where it is private), and ``jupyter_server_config.py``, which puts this folder on the
  server's path: ``pkv_feedback_policy`` (both roles: feedback files and Formgrader's submission views served
  with a restrictive Content-Security-Policy), ``pkv_first_screen`` (students: a new student's JupyterLab
  opens on the Assignments tab) and ``pkv_formgrader_steps`` (instructor: Formgrader's release, collect,
  autograde and feedback buttons answer with ``make hub-release`` / ``make hub-grade``).
- ``labextensions/pkv-feedback-link/`` (student only, named by ``LabApp.extra_labextensions_path``): a copy of
  ``hub/feedback_link/``, a JupyterLab extension written by hand (no build step) that makes the Assignments tab's
  "(view feedback)" link open the feedback page itself, where nbgrader 0.9 only shows its folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict

from hub.layout import COURSE_ID, REPO, Layout

STUDENT_LAB_PAGE_CONFIG = REPO / "student-lab" / "labconfig" / "page_config.json"
# On a hub students open the Assignments tab from the Nbgrader menu (the menu lists only the commands of
# the plugins left on: Assignment List).
STUDENT_HUB_TOOLS = ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu")
FEEDBACK_LINK = Path(__file__).parent / "feedback_link"  # copied to labextensions/pkv-feedback-link (students)
FEEDBACK_LINK_NAME = "pkv-feedback-link"
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
NBGRADER_VALIDATE = "nbgrader.server_extensions.validate_assignment"
VALIDATE_MESSAGE_FIRST = "paged_kv.lab.validate_message"
POLICY_EXTENSION = "pkv_feedback_policy"  # hub/feedback_policy.py, copied into each role's folder
# {role: {extension module written into the role's folder: the file of hub/ it is a copy of}}
EXTENSIONS = {
    "student": {POLICY_EXTENSION: "feedback_policy.py", "pkv_first_screen": "first_screen.py"},
    "instructor": {POLICY_EXTENSION: "feedback_policy.py", "pkv_formgrader_steps": "formgrader_steps.py"},
}
_OFFLINE_LAB = {"LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"}}
# JupyterLab's settings defaults for both roles (labconfig/default_setting_overrides.json).
LAB_SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
# A kernel idle this long (no execution, no message) with no browser connected is shut down, checked every
# cull_interval seconds; the hub's idle culler (hub.settings) stops a whole server idle for an hour.
KERNEL_CULLING = {"cull_idle_timeout": 1800, "cull_interval": 300, "cull_connected": False, "cull_busy": False}


def student_page_config() -> Dict[str, dict]:
    """``student-lab``'s disabled extensions, less the Assignments tab and the menu that opens it."""
    disabled = json.loads(STUDENT_LAB_PAGE_CONFIG.read_text())["disabledExtensions"]
    missing = [name for name in STUDENT_HUB_TOOLS if name not in disabled]
    if missing:
        raise ValueError(f"{STUDENT_LAB_PAGE_CONFIG} no longer names {missing}: check hub.roles")
    return {"disabledExtensions": {name: on for name, on in disabled.items() if name not in STUDENT_HUB_TOOLS}}


def exchange_settings(layout: Layout) -> str:
    """nbgrader config lines that name this hub's course and exchange."""
    return f"c.CourseDirectory.course_id = {COURSE_ID!r}\nc.Exchange.root = {str(layout.exchange)!r}\n"


def write_role_configs(layout: Layout, course_root: Path, course_config: Path = None) -> Dict[str, Path]:
    """Write both roles' folders (world-readable: they hold no secret); return ``{role: folder}``.

    ``course_config``: the course's ``autograder/nbgrader_config.py`` the instructor's config loads
    (default: this repository's; in the Kubernetes image, the one in the instructor's clone)."""
    course_config = Path(course_config or REPO / "autograder" / "nbgrader_config.py")
    if not course_config.is_absolute() or not Path(course_root).is_absolute():
        raise ValueError(f"course_root and course_config must be absolute, got {course_root}, {course_config}")
    folders = {}
    for role in ("student", "instructor"):
        folder = layout.role_config(role)
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        server = json.loads(json.dumps(_OFFLINE_LAB))
        server["MappingKernelManager"] = dict(KERNEL_CULLING)
        (folder / "labconfig" / "default_setting_overrides.json").write_text(json.dumps(LAB_SETTINGS, indent=1))
        if role == "student":
            nbgrader = "c = get_config()  # noqa: F821\n" + exchange_settings(layout)
            (folder / "labconfig" / "page_config.json").write_text(json.dumps(student_page_config(), indent=1))
            server["ServerApp"] = {"jpserver_extensions": {name: False for name in INSTRUCTOR_SERVER_EXTENSIONS}}
            # Validate's dialog with the message first (paged_kv.lab.validate_message, in the student's edition)
            server["ServerApp"]["jpserver_extensions"].update({NBGRADER_VALIDATE: False, VALIDATE_MESSAGE_FIRST: True})
            # "(view feedback)" opens the feedback page (hub/feedback_link/static/remoteEntry.js)
            extensions = folder / "labextensions"
            if (extensions / FEEDBACK_LINK_NAME).exists():
                shutil.rmtree(extensions / FEEDBACK_LINK_NAME)
            shutil.copytree(FEEDBACK_LINK, extensions / FEEDBACK_LINK_NAME)
            server["LabApp"]["extra_labextensions_path"] = [str(extensions)]
        else:
            nbgrader = (
                "import os\n\nc = get_config()  # noqa: F821\n"
                f"os.environ['PAGED_KV_COURSE_ROOT'] = {str(course_root)!r}\n"
                f"load_subconfig({str(course_config)!r})  # noqa: F821  (the course's own config)\n"
                + exchange_settings(layout)
            )
        (folder / "nbgrader_config.py").write_text(nbgrader)
        enabled = server.setdefault("ServerApp", {}).setdefault("jpserver_extensions", {})
        for module, source in EXTENSIONS[role].items():
            enabled[module] = True
            (folder / f"{module}.py").write_text((Path(__file__).parent / source).read_text())
        (folder / "jupyter_server_config.py").write_text(
            f"import sys\n\nsys.path.insert(0, {str(folder)!r})  # {', '.join(EXTENSIONS[role])}: written here by hub.roles\n"
        )
        (folder / "jupyter_server_config.json").write_text(json.dumps(server, indent=1))
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        folders[role] = folder
    return folders


def main(argv=None) -> int:
    """``python -m hub.roles --hub-dir D --course-root R [--course-config F]``: write the role folders
    (deploy/Dockerfile does, for the Kubernetes image)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("--hub-dir", type=Path, required=True)
    parser.add_argument("--course-root", type=Path, required=True)
    parser.add_argument("--course-config", type=Path)
    args = parser.parse_args(argv)
    for role, folder in write_role_configs(Layout(args.hub_dir), args.course_root, args.course_config).items():
        print(f"{role}: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
