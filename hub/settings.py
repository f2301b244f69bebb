"""What one course hub is (its folder, port, accounts, proxy), and the JupyterHub options that follow.

``HubSettings`` is written by ``hub.serve`` to ``state/hub.json``; ``configure`` sets JupyterHub 5's
options from it (``hub/jupyterhub_config.py`` calls it):

- PAM authentication (``PAMAuthenticator``, JupyterHub's default) against the machine's accounts, only
  the course's accounts allowed, the instructor an admin;
- ``LocalProcessSpawner``: each user's server runs as that user, in that user's home;
- each server's environment from ``hub.runtime.server_environment`` for its role (student/instructor);
- the proxy (``configurable-http-proxy``) and the hub's API on loopback ports, state under ``state/``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List

from hub.layout import Layout, check_account_name


@dataclass
class HubSettings:
    hub_dir: str
    prefix: str
    instructor: str
    students: List[str]
    port: int
    hub_port: int
    proxy_api_port: int
    proxy: str
    ip: str = "127.0.0.1"
    extra: dict = field(default_factory=dict)  # "paths": what hub.runtime.build_runtime returned

    def __post_init__(self):
        check_account_name(self.instructor)
        if not self.students:
            raise ValueError("a hub needs at least one student")
        for name in self.students:
            check_account_name(name)
        ports = [self.port, self.hub_port, self.proxy_api_port]
        if len(set(ports)) != 3 or not all(isinstance(p, int) and 1024 <= p <= 65535 for p in ports):
            raise ValueError(f"three different ports from 1024 to 65535 are needed, got {ports}")

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.hub_dir), self.prefix)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))
        path.chmod(0o600)

    @classmethod
    def load(cls, path: Path) -> "HubSettings":
        return cls(**json.loads(Path(path).read_text()))


def configure(c, settings: HubSettings) -> None:
    """Set JupyterHub's options on config object ``c`` from ``settings``."""
    from hub.runtime import server_environment

    layout = settings.layout
    state = layout.state
    c.JupyterHub.bind_url = f"http://{settings.ip}:{settings.port}"
    c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{settings.hub_port}"
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [settings.proxy]
    c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
    c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
    c.JupyterHub.cleanup_servers = True  # stopping the hub stops every user's server
    c.JupyterHub.authenticator_class = "pam"
    c.PAMAuthenticator.open_sessions = False  # no login sessions (systemd-logind) needed for a server
    c.Authenticator.allowed_users = set(settings.students) | {settings.instructor}
    c.Authenticator.admin_users = {settings.instructor}
    c.JupyterHub.spawner_class = "localprocess"
    c.Spawner.cmd = [settings.extra["paths"]["python"], "-m", "jupyterhub.singleuser"]
    c.Spawner.default_url = "/lab"
    c.Spawner.notebook_dir = "~"
    c.Spawner.start_timeout = 120
    c.Spawner.http_timeout = 120
    paths = settings.extra["paths"]
    environments = {role: server_environment(layout, role, paths) for role in ("student", "instructor")}

    def role_environment(spawner):
        role = "instructor" if spawner.user.name == settings.instructor else "student"
        spawner.environment.update(environments[role])
        spawner.environment["PAGED_KV_HUB_ROLE"] = role

    c.Spawner.pre_spawn_hook = role_environment
