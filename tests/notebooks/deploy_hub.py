"""The Kubernetes hub's settings (deploy/z2jh-values.yaml) applied to a traitlets config, as the chart does.

The Zero to JupyterHub chart's own ``jupyterhub_config.py`` merges ``hub.config`` into the config, section
by section, sets the spawner's command and first page from ``singleuser.cmd`` and ``singleuser.defaultUrl``,
and then runs each ``hub.extraConfig`` snippet, in the order of their names, with ``c`` in scope.
``apply_values`` does the same here (written for these tests, not the chart's file), so the tests run the
values' real settings and the real ``pre_spawn_hook``. ``ImageTreeSpawner`` stands for KubeSpawner, and
``run_init_containers`` for the pod's init containers, on a staged image tree (``image_tree``).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Dict

import yaml
from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import Unicode, default

from image_tree import PREFIX, ROOT, ImageTree

VALUES = ROOT / "deploy" / "z2jh-values.yaml"


def values_text(instructor: str = "INSTRUCTOR") -> str:
    """The values file with ``INSTRUCTOR`` replaced, as deploy/README.md tells the instructor to."""
    return VALUES.read_text().replace("INSTRUCTOR", instructor)


def apply_values(c, text: str) -> None:
    """Merge the values' ``hub.config`` into ``c`` and run their ``hub.extraConfig`` snippets."""
    values = yaml.safe_load(text)
    hub, single = values["hub"], values.get("singleuser") or {}
    for section, settings in (hub.get("config") or {}).items():
        c[section].update(settings)
    if "cmd" in single:
        c.Spawner.cmd = single["cmd"]
    if single.get("defaultUrl") is not None:
        c.Spawner.default_url = single["defaultUrl"]
    for name in sorted(hub.get("extraConfig") or {}):
        code = compile(hub["extraConfig"][name], f"hub.extraConfig.{name}", "exec")
        exec(code, {"c": c, "__name__": f"z2jh_extra_config_{name}"})


def run_init_containers(values: dict, volumes: Dict[str, Path]) -> None:
    """Run the values' ``singleuser.initContainers`` scripts (``sh -c``) here, each volume's ``mountPath`` moved
    to its folder in ``volumes`` (by the volume's name); their ``chown`` only as root."""
    for init in values["singleuser"]["initContainers"]:
        assert init["command"][:2] == ["sh", "-c"], init["command"]
        script = init["command"][2]
        for mount in init["volumeMounts"]:
            script = script.replace(mount["mountPath"], str(volumes[mount["name"]]))
        if os.geteuid() != 0:
            script = re.sub(r"chown [^;]+;", "", script)
        subprocess.run(["sh", "-c", script], check=True)


class ImageTreeSpawner(SimpleLocalProcessSpawner):
    """KubeSpawner's stand-in: a local server whose environment is the one the values' ``pre_spawn_hook`` gives a
    pod, with the image's folders in a staged image tree (``image_tree.stage_image``, at ``image_root``).

    The hook is the values' own (``c.KubeSpawner.pre_spawn_hook``); after it, every image path in the
    environment is moved into the tree. The uid, gid and fs_gid the hook sets are the pod's securityContext,
    which only KubeSpawner applies: they are not applied here, and the server runs as the hub's own user.
    Each user's home is a folder of the tree, for the user's home volume that the pod mounts at /home/jovyan.
    The server runs the course venv's ``jupyterhub-singleuser``: the venv stands for the image's Python and
    its lock (``image_tree``), and the tree's ``/usr/local/share/jupyter``, which holds the course kernel the
    build installed, comes first on ``JUPYTER_PATH`` (in the image it is the Python's own prefix).
    """

    image_root = Unicode(config=True, help="the staged image tree: the image's / (image_tree.stage_image)")

    @default("env_keep")
    def _what_the_image_has(self):
        # Of the hub's environment only these: not its PYTHONPATH (under pytest, the repository), which the
        # image does not set.
        return ["JUPYTERHUB_SINGLEUSER_APP", "LANG", "LC_ALL", "PATH"]

    @default("home_dir_template")
    def _home_in_the_tree(self):
        return str(Path(self.image_root) / "home-volumes" / "{username}")

    def run_pre_spawn_hook(self):
        self.config.KubeSpawner.pre_spawn_hook(self)
        tree = ImageTree(Path(self.image_root))
        for name, value in list(self.environment.items()):
            if isinstance(value, str):
                self.environment[name] = tree.staged(value)
        self.environment["JUPYTER_PATH"] = str(tree.local(PREFIX) / "share" / "jupyter")

    def get_args(self):
        # The hook's uid is not applied here: run by root, the server runs as root, which it refuses by default.
        return super().get_args() + (["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])
