"""A jupyter_server extension for the students' servers: their first JupyterLab opens on the Assignments tab.

A new student's home is empty, and JupyterLab's first screen would be an empty Launcher: nothing there says
that the labs are fetched from Nbgrader > Assignment List. When the server starts and the student has no
JupyterLab layout yet (no ``default`` workspace in LabApp's ``workspaces_dir``, ``~/.jupyter/lab/workspaces``
unless configured), this extension writes one whose main area holds nbgrader's Assignments tab (the
``nbgrader-assignment-list`` widget, which nbgrader's assignment-list plugin restores through JupyterLab's
layout restorer). It never touches a layout the student already has: from the first save on, JupyterLab
keeps the student's own.

It runs in the student's own server, as the student (never as root in their home). ``hub.roles`` writes
this file into the student role's settings folder and enables it there (``pkv_first_screen``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

WORKSPACE = "default"
ASSIGNMENTS = "nbgrader-assignment-list:nbgrader-assignment-list"  # nbgrader's tracker namespace and name


def first_layout() -> dict:
    """The ``default`` workspace of a student who has none: the Assignments tab open, the file browser beside it."""
    return {
        "data": {
            "layout-restorer:data": {
                "main": {
                    "dock": {"type": "tab-area", "currentIndex": 0, "widgets": [ASSIGNMENTS]},
                    "current": ASSIGNMENTS,
                },
                "left": {"collapsed": False, "visible": True, "current": "filebrowser", "widgets": ["filebrowser"]},
            },
            ASSIGNMENTS: {"data": {}},
        },
        "metadata": {"id": WORKSPACE},
    }


def workspace_file(workspaces_dir: Path) -> Path:
    """Where JupyterLab keeps the ``default`` workspace in ``workspaces_dir`` (jupyterlab_server's naming)."""
    from jupyterlab_server.workspaces_handler import WORKSPACE_EXTENSION, slugify

    return Path(workspaces_dir) / (slugify(WORKSPACE) + WORKSPACE_EXTENSION)


def write_first_layout(workspaces_dir: Path) -> Optional[Path]:
    """Write :func:`first_layout` when ``workspaces_dir`` has no ``default`` workspace; the file written, or None."""
    path = workspace_file(workspaces_dir)
    if path.exists() or path.is_symlink():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as handle:  # "x": never over something made meanwhile
        json.dump(first_layout(), handle)
    return path


def _workspaces_dir(serverapp) -> Path:
    for app in serverapp.extension_manager.extension_apps.get("jupyterlab", ()):
        if getattr(app, "workspaces_dir", ""):
            return Path(app.workspaces_dir)
    from jupyterlab.commands import get_workspaces_dir

    return Path(get_workspaces_dir())


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp):
    try:
        written = write_first_layout(_workspaces_dir(serverapp))
    except OSError as error:  # a layout is a convenience: never keep the student's server from starting
        serverapp.log.warning("pkv_first_screen: no first layout written: %s", error)
        return
    if written:
        serverapp.log.info("pkv_first_screen: first layout (the Assignments tab) written to %s", written)
