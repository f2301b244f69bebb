"""``python -m hub COMMAND --dir HUB_DIR``: the course hub's commands (the Makefile's ``hub*`` targets).

- ``up --students N [--port 8000] [--idle-timeout 3600]``: accounts, course folder, settings, runtime, proxy,
  then JupyterHub in the foreground (Ctrl-C stops it and every user's server); a server idle for
  ``--idle-timeout`` seconds is stopped by JupyterHub's idle culler (0: never);
- ``release [LAB]``: the labs up to LAB to the exchange, and LAB's edition of the package for the students
  (``hub.package``: no implementation of LAB's TODOs or of any later lab's); no LAB: every lab, with the
  whole package (a self-study hub: every answer is in what students import);
- ``grade LAB``: ``autograder.exchange.exchange grade`` on the instructor's course folder;
- ``clean``: stops the hub, removes the accounts it made with their homes, and HUB_DIR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from hub import checkout
from hub.accounts import AccountError, end_account_processes, ensure_accounts, home_of, remove_accounts, require_root
from hub.course import give_to_instructor, prepare_course_folder
from hub.layout import COURSE_ID, DEMO_PASSWORD, REPO, Layout
from hub.mounts import MountError, unmount_all
from hub.proxy import ProxyMissing, find_or_install_proxy
from hub.roles import KERNEL_CULLING, write_role_configs
from hub.runtime import RuntimeSetupError, build_runtime
from hub.settings import IDLE_TIMEOUT_S, HubSettings, check_idle_timeout

MARKER = ".paged-kv-hub"
CONFIG_FILE = Path(__file__).resolve().parent / "jupyterhub_config.py"


def free_port(avoid=()) -> int:
    """A loopback port nothing listens on now, and not one of ``avoid`` (ports chosen but not bound yet)."""
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def prepare(layout: Layout, students: int, port: int, idle_timeout: int = IDLE_TIMEOUT_S) -> HubSettings:
    """Everything ``up`` does before it starts JupyterHub; the settings it will start with."""
    require_root("make hub")
    checkout.require_closable()  # what closing cannot close is refused before any account is made
    if check_idle_timeout(idle_timeout):
        require_culler()
    if layout.root.exists() and any(layout.root.iterdir()) and not (layout.root / MARKER).exists():
        raise AccountError(f"{layout.root} exists and is not a course hub's folder: choose another HUB_DIR")
    layout.root.mkdir(parents=True, exist_ok=True)
    (layout.root / MARKER).touch()
    os.chmod(layout.root, 0o755)
    layout.state.mkdir(exist_ok=True)
    os.chmod(layout.state, 0o700)
    layout.exchange.mkdir(exist_ok=True)
    os.chmod(layout.exchange, 0o777)  # as nbgrader's docs say, and as release_assignment sets it
    names = layout.students(students)
    ensure_accounts(layout, [layout.instructor, *names], DEMO_PASSWORD)
    course_root = prepare_course_folder(layout.course_root(home_of(layout.instructor)), layout.instructor)
    for folder in checkout.close(layout.instructor):  # no student reads the answers in the checkout (hub.checkout)
        print(f"make hub: {folder} closed to students (mode 0750 or 0640, group {layout.instructor})")
    checkout.require_closed()
    paths = build_runtime(layout, layout.instructor)
    write_role_configs(layout, course_root, Path(paths["instructor_repo"]) / "autograder" / "nbgrader_config.py")
    proxy = find_or_install_proxy(Path(sys.prefix) / "node")
    hub_port = free_port(avoid={port})
    settings = HubSettings(
        hub_dir=str(layout.root),
        prefix=layout.prefix,
        instructor=layout.instructor,
        students=names,
        port=port,
        hub_port=hub_port,
        proxy_api_port=free_port({port, hub_port}),
        proxy=str(proxy),
        extra={"paths": paths},
        idle_timeout=idle_timeout,
    )
    settings.save(layout.state / "hub.json")
    return settings


def require_culler() -> None:
    """RuntimeSetupError, saying what to install, when JupyterHub's idle culler is not installed."""
    import importlib.util

    if importlib.util.find_spec("jupyterhub_idle_culler") is None:
        raise RuntimeSetupError(
            "jupyterhub-idle-culler is not installed in this environment (it is in the lock and "
            "in pyproject.toml's hub extra: `make env`, or pip install jupyterhub-idle-culler); "
            "or start the hub with --idle-timeout 0 (idle servers then run until stopped)"
        )


def hub_command(layout: Layout) -> List[str]:
    return [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG_FILE)]


def hub_environment(layout: Layout) -> dict:
    return dict(os.environ, PAGED_KV_HUB_SETTINGS=str(layout.state / "hub.json"))


def banner(settings: HubSettings) -> str:
    return "\n".join(
        [
            f"course hub: http://{settings.ip}:{settings.port}/  (course id {COURSE_ID!r}, exchange "
            f"{settings.layout.exchange})",
            f"  instructor: {settings.instructor} (Formgrader; `make hub-release`, `make hub-grade LAB=...`)",
            f"  students:   {', '.join(settings.students)} (Assignments tab, Validate)",
            (
                f"  a server idle for {settings.idle_timeout} s is stopped (JupyterHub's idle culler; --idle-timeout)"
                if settings.idle_timeout
                else "  idle servers are never stopped (--idle-timeout 0)"
            )
            + f", a kernel idle for {KERNEL_CULLING['cull_idle_timeout']} s with no browser on it is shut down",
            f"  DEMO PASSWORD of every account above, for this local demo only: {DEMO_PASSWORD}",
            "  (a real course authenticates its people itself: docs/instructors.md, 'Grading on JupyterHub')",
        ]
    )


def course_environment(layout: Layout) -> dict:
    return dict(os.environ, PAGED_KV_COURSE_ROOT=str(layout.course_root(home_of(layout.instructor))))


def run_exchange_step(layout: Layout, *args: str) -> int:
    """``autograder.exchange.exchange`` on the instructor's course folder; then give it back to them."""
    require_root("the hub's grading steps")
    command = [
        sys.executable,
        "-m",
        "autograder.exchange.exchange",
        "--exchange",
        str(layout.exchange),
        "--course-id",
        COURSE_ID,
        *args,
    ]
    try:
        return subprocess.run(command, cwd=REPO, env=course_environment(layout)).returncode
    finally:
        give_to_instructor(layout.course_root(home_of(layout.instructor)), layout.instructor)


def release(layout: Layout, lab: Optional[str], language: str = "en") -> int:
    """Release the labs up to ``lab`` (None: every lab), in ``language`` (the class's: en or zh_CN), and give the
    students ``lab``'s package edition."""
    from autograder.course.layout import LABS
    from hub.package import install_edition

    require_root("the hub's release")
    if lab is not None and lab not in LABS:
        raise ValueError(f"unknown lab {lab!r}; the labs are {sorted(LABS)}")
    labs = [name for name in sorted(LABS) if lab is None or name[:2] <= lab[:2]]
    done = run_exchange_step(
        layout, "release", *labs, "--language", language, *(["--open-lab", lab] if lab is not None else [])
    )
    if done != 0:
        return done
    graded = _graded()
    # An ungraded lab before the first graded one (lab 00) gets the first graded lab's edition.
    install_edition(layout, lab if lab is None or lab in graded else next(g for g in graded if g > lab))
    if lab is None:
        print(
            "WARNING: every lab was released with the WHOLE course package: the students' servers import every "
            "lab's reference implementation. For a class, release one lab at a time: make hub-release LAB=NN-lab"
        )
    else:
        print(
            f"students now import the edition of {lab}: no implementation of its TODOs or of any later lab's "
            "(kernels pick it up when they start or restart)"
        )
    return 0


def _graded() -> List[str]:
    from autograder.editions.manifest import LABS

    return [entry.lab for entry in LABS]


def stop_hub(layout: Layout, wait_s: float = 30) -> None:
    """SIGTERM the JupyterHub this hub folder started (its pid file), and wait for it to end."""
    pid_file = layout.state / "jupyterhub.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().strip() or 0)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def clean(layout: Layout) -> List[str]:
    """Stop the hub, remove its accounts and its folder; the accounts removed."""
    require_root("make hub-clean")
    if not layout.root.exists():
        return []
    if not (layout.root / MARKER).exists():
        raise AccountError(f"{layout.root} is not a course hub's folder (no {MARKER}): not removing it")
    stop_hub(layout)
    end_account_processes(layout)  # kernels outlive their stopped servers for a moment, keeping mounts busy
    unmount_all(layout)  # before any delete: rmtree must never reach through a mount into the course
    checkout.keep_closed()  # the instructor's group goes with the accounts: its id must not open the checkout
    removed = remove_accounts(layout)
    shutil.rmtree(layout.root)
    return removed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/srv/paged-kv-hub"), help="HUB_DIR")
    parser.add_argument("--prefix", default="pkv-", help="account names start with it")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up")
    up.add_argument("--students", type=int, default=3)
    up.add_argument("--port", type=int, default=8000)
    up.add_argument(
        "--idle-timeout",
        type=int,
        default=IDLE_TIMEOUT_S,
        help="seconds a user's server may sit idle before it is stopped (0: never)",
    )
    releasing = commands.add_parser("release")
    releasing.add_argument("lab", nargs="?")
    releasing.add_argument("--language", default="en", choices=("en", "zh_CN"), help="the class's language")
    commands.add_parser("grade").add_argument("lab")
    commands.add_parser("clean")
    args = parser.parse_args(argv)
    try:
        layout = Layout(args.dir, args.prefix)
        if args.command == "up":
            settings = prepare(layout, args.students, args.port, args.idle_timeout)
            print(banner(settings), flush=True)
            os.chdir(layout.state)
            os.execve(sys.executable, hub_command(layout), hub_environment(layout))
        if args.command == "release":
            return release(layout, args.lab, args.language)
        if args.command == "grade":
            return run_exchange_step(layout, "grade", args.lab)
        if not layout.root.exists():
            print(f"no hub in {layout.root}: nothing to clean")
            return 0
        removed = clean(layout)
        print(f"hub removed: {layout.root}" + (f"; accounts removed: {', '.join(removed)}" if removed else ""))
        return 0
    except (
        AccountError,
        MountError,
        ProxyMissing,
        RuntimeSetupError,
        ValueError,
        FileNotFoundError,
        checkout.CheckoutOpen,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
