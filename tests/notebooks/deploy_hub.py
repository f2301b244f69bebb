"""The Kubernetes hub's settings (deploy/z2jh-values.yaml) applied to a traitlets config, as the chart does.

The Zero to JupyterHub chart's own ``jupyterhub_config.py`` merges ``hub.config`` into the config, section
by section, and then runs each ``hub.extraConfig`` snippet, in the order of their names, with ``c`` in
scope. ``apply_values`` does the same here (written for these tests, not the chart's file), so the tests
run the values' real settings and the real ``pre_spawn_hook``. ``NoProxy`` stands for the chart's proxy
pod: the tests browse the hub's own port.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Dict

import yaml
from jupyterhub.proxy import Proxy

from image_tree import ROOT
VALUES = ROOT / "deploy" / "z2jh-values.yaml"


def values_text(instructor: str = "INSTRUCTOR") -> str:
    """The values file with ``INSTRUCTOR`` replaced, as deploy/README.md tells the instructor to."""
    return VALUES.read_text().replace("INSTRUCTOR", instructor)


def apply_values(c, text: str) -> None:
    """Merge the values' ``hub.config`` into ``c`` and run their ``hub.extraConfig`` snippets."""
    hub = yaml.safe_load(text)["hub"]
    for section, settings in (hub.get("config") or {}).items():
        c[section].update(settings)
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


class NoProxy(Proxy):
    """A proxy that only remembers its routes: nothing is proxied, the test talks to the hub directly."""

    routes: dict = {}

    async def add_route(self, routespec, target, data):
        self.routes[routespec] = {"routespec": routespec, "target": target, "data": data}

    async def delete_route(self, routespec):
        self.routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self.routes)
