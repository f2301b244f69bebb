"""Real local accounts for the demo hub: made by ``make hub`` (root only), removed by ``make hub-clean``.

Each account gets its own home, 0700, so that one student's server (which runs as that student) cannot
read another's files, nor the instructor's course folder. The accounts made are written to
``Layout.accounts_file``; ``remove_accounts`` removes exactly those, never an account it did not make.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path
from typing import Iterable, List

from hub.layout import Layout, check_account_name


def is_safe_name(name: str) -> bool:
    """True when ``name`` is a name ``check_account_name`` accepts."""
    try:
        check_account_name(name)
        return True
    except ValueError:
        return False


class AccountError(RuntimeError):
    """An account could not be made or removed; the message says which and why."""


def require_root(what: str) -> None:
    """Raise AccountError unless this process is root (local accounts and per-user servers need it)."""
    if os.geteuid() != 0:
        raise AccountError(
            f"{what} needs root: it makes local accounts and starts each user's server as "
            f"that user (run it with sudo, or as root in a container)"
        )


def made_accounts(layout: Layout) -> List[str]:
    """The accounts this hub made (and has not removed yet), in the order made."""
    if not layout.accounts_file.exists():
        return []
    return [line.strip() for line in layout.accounts_file.read_text().splitlines() if line.strip()]


def home_of(name: str) -> Path:
    """The home folder of account ``name``; AccountError when there is no such account."""
    try:
        return Path(pwd.getpwnam(name).pw_dir)
    except KeyError:
        raise AccountError(f"no local account {name!r}") from None


def ensure_accounts(layout: Layout, names: Iterable[str], password: str) -> List[str]:
    """Make each of ``names`` a local account with a private home and ``password``; return those made now.

    An account that exists already is used only when this hub made it; any other is refused (the demo
    never takes over a real person's account)."""
    require_root("making accounts")
    if not isinstance(password, str) or len(password) < 12 or "\n" in password or ":" in password:
        raise ValueError("the demo password must be one line of 12 characters or more, without ':'")
    layout.state.mkdir(parents=True, exist_ok=True, mode=0o700)
    ours = set(made_accounts(layout))
    new = []
    for name in map(check_account_name, names):
        try:
            pwd.getpwnam(name)
            if name not in ours:
                raise AccountError(
                    f"account {name!r} exists and was not made by this hub "
                    f"({layout.accounts_file}): choose another HUB_PREFIX"
                )
        except KeyError:
            _run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name])
            with open(layout.accounts_file, "a") as record:
                record.write(name + "\n")
            new.append(name)
        os.chmod(home_of(name), 0o700)
        _run(["chpasswd"], stdin=f"{name}:{password}\n")
    return new


def remove_accounts(layout: Layout) -> List[str]:
    """Remove every account this hub made, with its home and processes; return their names."""
    require_root("removing accounts")
    removed = []
    for name in made_accounts(layout):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        _end_processes_of(pwd.getpwnam(name).pw_uid)  # servers or kernels left by a hub that died
        _run(["userdel", "--remove", "--force", name])
        removed.append(name)
    if layout.accounts_file.exists():
        layout.accounts_file.unlink()
    return removed


def end_account_processes(layout: Layout, wait_s: float = 10.0) -> None:
    """SIGKILL every process of this hub's accounts (their servers and kernels, which outlive a stopped hub for a
    moment) and wait until none is alive, so that the hub's mounts can be taken down: a kernel still shutting
    down keeps ``shared/venv`` busy."""
    import time

    uids = []
    for name in made_accounts(layout):
        try:
            uids.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    deadline = time.monotonic() + wait_s
    while True:
        for uid in uids:
            _end_processes_of(uid)
        if not any(_alive(uid) for uid in uids) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _alive(uid: int) -> bool:
    """Whether a live process (not a zombie, which holds no file or mount) runs as ``uid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid and "\nState:\tZ" not in (entry / "status").read_text():
                return True
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return False


def _end_processes_of(uid: int) -> None:
    """SIGKILL each process (by pid, from /proc) that runs as ``uid``, an account this hub made."""
    import signal

    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass


def _run(command: List[str], stdin: str = None) -> None:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True)
    # userdel says "mail spool not found" and exits 12 when only that is missing: the account is gone.
    if done.returncode != 0 and not (command[0] == "userdel" and done.returncode == 12):
        raise AccountError(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr.strip()}")
