"""What one course hub is (its folder, port, accounts, proxy), and the JupyterHub options that follow.

``HubSettings`` is written by ``python -m hub up`` (``make hub``: ``hub.__main__.prepare``) to
``state/hub.json``; ``configure`` sets JupyterHub 5's options from it (``hub/jupyterhub_config.py`` calls it):

- PAM authentication (``PAMAuthenticator``, JupyterHub's default) against the machine's accounts, only
  the course's accounts allowed, the instructor an admin;
- ``LocalProcessSpawner``: each user's server runs as that user, in that user's home;
- each server's environment from ``hub.runtime.server_environment`` for its role (student/instructor);
- the proxy (``configurable-http-proxy``) and the hub's API on loopback ports, state under ``state/``;
- JupyterHub's idle culler (``jupyterhub-idle-culler``) as a service: a server idle for ``idle_timeout``
  seconds (an hour by default, as the Zero to JupyterHub chart's ``cull.timeout``; 0: never) is stopped,
  with its kernels; a lone idle kernel goes sooner (``hub.roles.KERNEL_CULLING``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List

from hub.layout import Layout, check_account_name

IDLE_TIMEOUT_S = 3600
CULLER = "idle-culler"
CULLER_CONFIG = Path(__file__).resolve().parent / "idle_culler_config.py"
# What jupyterhub-idle-culler needs of the hub's API (its README, "Permissions"); it deletes no user.
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]


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
    idle_timeout: int = IDLE_TIMEOUT_S  # seconds a server may sit idle before the culler stops it; 0: never

    def __post_init__(self):
        check_account_name(self.instructor)
        if not self.students:
            raise ValueError("a hub needs at least one student")
        for name in self.students:
            check_account_name(name)
        ports = [self.port, self.hub_port, self.proxy_api_port]
        if len(set(ports)) != 3 or not all(isinstance(p, int) and 1024 <= p <= 65535 for p in ports):
            raise ValueError(f"three different ports from 1024 to 65535 are needed, got {ports}")
        check_idle_timeout(self.idle_timeout)

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.hub_dir), self.prefix)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))
        path.chmod(0o600)

    @classmethod
    def load(cls, path: Path) -> "HubSettings":
        return cls(**json.loads(Path(path).read_text()))


def check_idle_timeout(seconds) -> int:
    """``seconds`` if it is 0 (never cull) or a whole number of seconds from 60 on; else ValueError."""
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not (seconds == 0 or seconds >= 60):
        raise ValueError(f"the idle timeout is 0 (never stop idle servers) or at least 60 seconds, got {seconds!r}")
    return seconds


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
    if settings.idle_timeout:
        c.JupyterHub.services = [{"name": CULLER, "command": culler_command(settings.idle_timeout)}]
        c.JupyterHub.load_roles = [
            {
                "name": CULLER,
                "description": "stops servers idle for too long",
                "scopes": list(CULLER_SCOPES),
                "services": [CULLER],
            }
        ]


def culler_command(timeout: int) -> list:
    """``jupyterhub_idle_culler`` stopping servers idle for ``timeout`` seconds, looking every 10 minutes at
    most (the chart's ``cull.every``); it reaches the hub through the ``JUPYTERHUB_API_URL`` JupyterHub gives it."""
    return [
        sys.executable,
        "-m",
        "jupyterhub_idle_culler",
        f"--timeout={timeout}",
        f"--cull-every={min(600, max(30, timeout // 2))}",
        f"--config={CULLER_CONFIG}",
    ]
