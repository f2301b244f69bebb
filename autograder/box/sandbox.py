"""The grading kernel's box: no network, a memory limit, its own processes, a read-only view of the system.

A grading kernel runs a student's code. ``launch`` wraps its command (``python -m autograder.box.sandbox
SPEC -- CMD``) and picks the strongest isolation this machine allows:

- ``bwrap`` (Debian package ``bubblewrap``, root or not): new network, process and IPC namespaces;
  the file system is read-only and shows only the system's libraries, Python, the course package and
  the kernel's own folder. The source notebooks, git history, gradebook, other students' work,
  ``/home``, ``/root``, ``/run`` and the shadow files are not there.
- ``unshare`` (util-linux, everywhere): no network and its own process space, but the file system
  is the grader's.
- ``rlimits``: resource limits only, and a warning on every grading run.

Every level applies the same rlimits (address space, file size, no core dumps), a clean environment
and one thread per kernel. The kernel talks to the grader over Unix sockets in a private folder
(``ipc`` transport), which works across network namespaces.

``probe()`` says which level works here; ``python -m autograder.box.sandbox --probe`` prints it (and exits 1 where
grading would be refused).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__" and not __package__:  # the grader runs this file as a script: its package is two up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.box import seccomp  # noqa: E402

LEVELS = ("bwrap", "unshare", "rlimits")
# Environment variables a grading kernel keeps (everything else, tokens and keys included, is dropped).
KEPT_ENV = (
    "PATH",
    "PYTHONPATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "MPLBACKEND",
    "TRITON_INTERPRET",
    "NBGRADER_EXECUTION",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONHASHSEED",
    "TZ",
)
KEPT_ENV_PREFIXES = ("PAGED_KV_",)
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")
SECRET_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


@dataclass
class BoxSpec:
    """What one kernel may see and use. Paths are absolute; ``hidden`` wins over ``readable``."""

    level: str
    memory_mb: int
    cwd: str
    private_dir: str
    readable: List[str] = field(default_factory=list)
    hidden: List[str] = field(default_factory=list)
    file_mb: int = 512
    quiet: bool = True  # the command's stdout goes nowhere (a kernel talks over sockets); False: passed through
    uid: Optional[int] = None  # run the command as this unprivileged uid (root only)
    cgroup: List[str] = field(default_factory=list)  # cgroup folders to join (``autograder.box.limits``)
    pids: int = 256  # without a cgroup: the process limit of the uid (RLIMIT_NPROC)
    pythonpath: List[str] = field(default_factory=list)  # first on the kernel's PYTHONPATH (its package edition)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "BoxSpec":
        return cls(**json.loads(text))


# ---- what this machine allows --------------------------------------------------------------------
APT_LOCK = "/tmp/paged-kv-apt.lock"


@contextlib.contextmanager
def apt_lock(timeout_s: float = 1200):
    """Hold the course's apt lock: two installs from one machine (``make test`` runs test files on
    several workers; two graders) wait for each other instead of failing on dpkg's lock."""
    import fcntl

    with open(APT_LOCK, "a+") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another install held {APT_LOCK} for {timeout_s:.0f} s")
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_bubblewrap(say=print) -> bool:
    """Install Debian's ``bubblewrap`` with apt when it is missing and this is root (as the browser test
    installs Chromium); True when ``bwrap`` is there afterwards. A failure is said, never raised."""
    if shutil.which("bwrap"):
        return True
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    with apt_lock():
        return shutil.which("bwrap") is not None or _install_bubblewrap(say)


def _install_bubblewrap(say) -> bool:
    say("grading box: installing bubblewrap with apt-get (the strongest box needs it)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "bubblewrap"],
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "bubblewrap"],
    ):
        try:
            done = subprocess.run(
                command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
            )
        except (OSError, subprocess.SubprocessError) as error:
            say(f"grading box: {' '.join(command)} failed: {error}")
            return False
        if command[1] == "install" and done.returncode == 0 and shutil.which("bwrap"):
            probe.cache_clear()
            return True
    say("grading box: apt-get could not install bubblewrap:\n" + (done.stderr or done.stdout)[-1500:])
    return False


def _runs(command: Sequence[str]) -> bool:
    try:
        return (
            subprocess.run(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=20,
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=None)
def probe() -> Tuple[str, str]:
    """``(level, warning)``: the strongest level that works here, and what is missing ('' if none)."""
    bwrap = shutil.which("bwrap")
    if bwrap and _runs(
        [
            bwrap,
            *_system_binds(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--unshare-net",
            "--unshare-pid",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "true",
        ]
    ):
        return "bwrap", ""
    fix = (
        "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user namespaces"
        if bwrap
        else "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
    )
    unshare = shutil.which("unshare")
    if unshare and _runs([unshare, *_unshare_flags(), "true"]):
        return "unshare", (
            f"grading kernels have no network and their own processes, but they can read and "
            f"write whatever this account can (solutions and gradebook included): {fix}"
        )
    return "rlimits", (
        f"grading kernels only get memory and file-size limits: they can use the network and "
        f"read and write whatever this account can: {fix}"
    )


def _unshare_flags() -> List[str]:
    flags = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    return flags if os.geteuid() == 0 else ["--map-root-user", *flags]


def _system_binds() -> List[str]:
    args: List[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


# ---- building the command ------------------------------------------------------------------------
def python_paths(private: Sequence[str] = ()) -> List[str]:
    """Folders this interpreter needs: its prefixes, its executable's folder, its import path.

    Paths inside a ``private`` folder are left out (the box shows only chosen parts of it), except
    the Python environment itself when it lives there (a ``.venv`` in the repository)."""
    paths = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    environments = [os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)]
    roots = [os.path.realpath(p) for p in private]

    def shown(path: str) -> bool:
        real = os.path.realpath(path)
        inside = lambda root: real == root or real.startswith(root.rstrip("/") + "/")  # noqa: E731
        return not any(inside(r) for r in roots) or any(inside(e) for e in environments)

    paths = [p for p in paths if shown(p)]
    return _outermost(os.path.realpath(p) for p in paths) + _outermost(os.path.abspath(p) for p in paths)


def unreachable_by_others(paths: Sequence[str]) -> List[str]:
    """The paths another user cannot reach: a folder above one lacks ``o+x``, or the path itself ``o+r``.

    Without bwrap's binds (levels ``unshare`` and ``rlimits``) a kernel with its own uid sees the real file
    system: a repository or a Python under a private folder (``/root``, a ``mktemp -d`` folder) is closed to it."""
    closed = []
    for path in paths:
        real = os.path.realpath(path)
        try:
            for folder in _ancestors(real):
                if not os.stat(folder).st_mode & stat.S_IXOTH:
                    raise PermissionError(folder)
            if not os.stat(real).st_mode & stat.S_IROTH:
                raise PermissionError(real)
        except FileNotFoundError:
            continue
        except PermissionError:
            closed.append(path)
    return closed


def own_uid_problem(level: str, readable: Sequence[str]) -> str:
    """Why a kernel at ``level`` cannot run as its own uid here ("" when it can)."""
    if level == "bwrap":
        return ""  # the box binds what it shows, with open folders above
    needed = list(readable) + [os.path.realpath(sys.executable), os.path.join(sys.prefix, "pyvenv.cfg")]
    closed = unreachable_by_others(needed)
    if not closed:
        return ""
    return (
        f"{closed[0]} is closed to other users (a folder above it is not o+x, or it is not o+r), so at "
        f"isolation level {level!r} grading kernels run as the grading user, not each as its own uid; "
        f"open the folders (chmod o+rx) or install bubblewrap"
    )


def _outermost(paths) -> List[str]:
    """Drop every path that lies inside another one of the list."""
    unique = sorted(set(paths), key=len)
    kept: List[str] = []
    for path in unique:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def kernel_env(spec: BoxSpec, parent: Dict[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in parent.items() if k in KEPT_ENV or k.startswith(KEPT_ENV_PREFIXES)}
    if spec.pythonpath:  # the box's own library (its edition and the agent), and nothing of the grader's path
        env["PYTHONPATH"] = os.pathsep.join(spec.pythonpath)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("LANG", "C.UTF-8")
    home = os.path.join(spec.private_dir, "home")
    env.update(
        HOME=home,
        TMPDIR="/tmp" if spec.level == "bwrap" else home,
        MPLCONFIGDIR=os.path.join(home, ".matplotlib"),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        USER="pkv-kernel",
        LOGNAME="pkv-kernel",
    )
    return env


def _as_user(spec: BoxSpec, command: Sequence[str]) -> List[str]:
    """``command`` run as ``spec.uid`` (no groups, no capabilities, no new privileges), if one is set."""
    if spec.uid is None:
        return list(command)
    setpriv = shutil.which("setpriv") or "setpriv"
    return [
        setpriv,
        f"--reuid={spec.uid}",
        f"--regid={spec.uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--no-new-privs",
        "--",
        *command,
    ]


def bwrap_command(spec: BoxSpec, env: Dict[str, str], command: Sequence[str], info_fd: int) -> List[str]:
    args = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--info-fd",
        str(info_fd),
        "--clearenv",
    ]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
        if spec.uid is not None:  # kept only long enough for setpriv to become the kernel's own user
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += _system_binds()
    for path in SECRET_FILES:
        if os.path.isfile(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in SECRET_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path]
    # /tmp is the kernel's own folder on disk (not a tmpfs: large sparse files must map like on disk).
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        os.path.join(spec.private_dir, "tmp"),
        "/tmp",
        "--dir",
        "/var/tmp",
    ]
    binds = [p for p in _outermost(spec.readable) if os.path.exists(p)]
    # bwrap makes the folders above a bind 0700 (root's): a kernel running as its own uid must pass through.
    parents = sorted({a for p in binds + [spec.private_dir] for a in _ancestors(p)}, key=lambda a: a.count("/"))
    # Folders under /tmp too (a repository cloned there): they are made in the kernel's own /tmp; /tmp itself
    # stays the kernel's.
    for folder in parents:
        if folder != "/tmp" and not any(
            folder == d or folder.startswith(d + "/") for d in SYSTEM_DIRS + ("/proc", "/dev")
        ):
            args += ["--perms", "0755", "--dir", folder]
    for path in binds:
        args += ["--ro-bind", path, path]
    for path in spec.hidden:
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in (spec.private_dir, spec.cwd):
        args += ["--bind", path, path]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args + ["--chdir", spec.cwd, "--", *_as_user(spec, command)]


def _ancestors(path: str) -> List[str]:
    """``/a``, ``/a/b`` for ``/a/b/c``."""
    parts = os.path.abspath(path).strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


SIGPENDING = 1024  # signals queued at once for a box's uid (RLIMIT_SIGPENDING, counted per uid host-wide)


def per_uid_limits(pids: int) -> Dict[int, int]:
    """The rlimits of a box with a uid of its own that bound what the kernel counts per uid on the whole host (so
    that what one box holds is bounded whatever else runs as that uid, ``autograder.box.uids``): its tasks
    (``RLIMIT_NPROC``: ``pids``, the cgroup's count where there is one), its queued signals (``RLIMIT_SIGPENDING``)
    and POSIX message queue bytes (``RLIMIT_MSGQUEUE``: none; ``mq_open`` is refused too)."""
    return {
        resource.RLIMIT_NPROC: int(pids),
        resource.RLIMIT_SIGPENDING: SIGPENDING,
        resource.RLIMIT_MSGQUEUE: 0,
    }


def _set_limits(spec: BoxSpec) -> None:
    """Runs in the child between fork and exec: it dies with the launcher, within the limits, in its cgroup,
    unable to reach the kernel's key store (``autograder.box.seccomp``)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if seccomp.supported():  # raises if the kernel refuses the filter: then no box starts (fail closed)
        seccomp.install(seccomp.rules_for(spec.level))
    for folder in spec.cgroup:  # everything this child starts stays in the kernel's cgroup
        with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
    if spec.uid is not None:  # what the kernel counts per uid on the whole host: bounded for this box's own
        for limit, value in per_uid_limits(spec.pids).items():
            resource.setrlimit(limit, (value, value))
    memory = spec.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    size = spec.file_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _prepare_private_dir(spec: BoxSpec) -> None:
    """A writable home with a copy of the grader's matplotlib font cache (rebuilding it costs seconds);
    everything in the private folder then belongs to the kernel's uid (if it has one)."""
    home = Path(spec.private_dir) / "home"
    (home / ".matplotlib").mkdir(parents=True, exist_ok=True)
    (Path(spec.private_dir) / "tmp").mkdir(exist_ok=True)
    try:
        _copy_font_cache(home)
    finally:
        if spec.uid is not None:
            from autograder.box.limits import give_to

            give_to(spec.private_dir, spec.uid)
            os.chmod(spec.private_dir, 0o711)  # traversable (bwrap enters it before it becomes the uid)
            lib = os.path.join(spec.private_dir, "lib")  # the box's own library (kernel_lib) stays the grader's:
            if os.path.isdir(lib):  # readable, never rewritten by the kernel
                give_to(lib, os.geteuid())


def _copy_font_cache(home: Path) -> None:
    try:
        import matplotlib

        cache = Path(matplotlib.get_cachedir())
        for font_list in cache.glob("fontlist-*.json"):
            shutil.copy(font_list, home / ".matplotlib" / font_list.name)
    except Exception:  # noqa: BLE001  (a missing cache only costs time)
        pass


def _child_pid(parent: int, timeout: float = 10.0) -> Optional[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            return None
        if children:
            return int(children[0])
        time.sleep(0.01)
    return None


def run(spec: BoxSpec, command: Sequence[str]) -> int:
    """Start ``command`` in the box, forward interrupts to it, and return its exit status."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # the grader died: stop the box (see stop())
    _prepare_private_dir(spec)
    env = kernel_env(spec, dict(os.environ))
    popen_env = None if spec.level == "bwrap" else env
    pass_fds: Tuple[int, ...] = ()
    if spec.level == "bwrap":
        read_end, write_end = os.pipe()
        full = bwrap_command(spec, env, command, write_end)
        pass_fds = (write_end,)
    elif spec.level == "unshare":
        full = [shutil.which("unshare") or "unshare", *_unshare_flags(), "--", *_as_user(spec, command)]
    else:
        full = _as_user(spec, command)
    # Own session: the kernel manager's interrupts reach this launcher only, which forwards them to
    # the kernel, not to bwrap/unshare (they would die of SIGINT).
    # The kernel's own stdout only carries ipykernel's start-up banner: what cells print goes over zmq.
    # Its stderr (start-up warnings, a traceback if it dies while starting) is the kernel's own, kept in
    # its private folder: never mixed into the grader's output.
    child = subprocess.Popen(
        full,
        env=popen_env,
        cwd=spec.cwd,
        pass_fds=pass_fds,
        start_new_session=True,
        stdout=subprocess.DEVNULL if spec.quiet else None,
        stderr=open(os.path.join(spec.private_dir, "stderr.log"), "ab") if spec.quiet else None,
        preexec_fn=functools.partial(_set_limits, spec),
    )
    kernel_pid: Optional[int] = child.pid
    if spec.level == "bwrap":
        os.close(write_end)
        with os.fdopen(read_end) as info:
            text = info.read()
        try:
            kernel_pid = json.loads(text)["child-pid"]
        except (ValueError, KeyError):
            kernel_pid = None
    elif spec.level == "unshare":
        kernel_pid = _child_pid(child.pid)

    # A handle on the kernel process itself, so that a signal never reaches another process that was
    # given the same pid after the kernel died (pids wrap around quickly on a busy grading machine).
    pidfd: Optional[int] = None
    if kernel_pid and hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(kernel_pid)
        except OSError:
            kernel_pid = None  # already gone

    def send(pid: Optional[int], signum: int) -> None:
        try:
            if pid == kernel_pid and pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            elif pid:
                os.kill(pid, signum)
        except (ProcessLookupError, OSError):
            pass

    def forward(signum, _frame):
        send(kernel_pid, signum)

    def stop(_signum, _frame):
        send(kernel_pid, signal.SIGKILL)
        send(child.pid, signal.SIGKILL)  # our own child: its pid is ours until we reap it
        sys.exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, stop)
    status = child.wait()
    return 128 - status if status < 0 else status


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--probe"]:
        level, warning = probe()
        print(f"isolation: {level}" + (f"\nwarning: {warning}" if warning else ""))
        from autograder.box import limits

        found, warnings = limits.probe()
        print(f"cgroups: {found['cgroups']} | scratch: {found['scratch']}")
        for line in warnings:
            print(f"warning: {line}")
        from autograder.box import trust
        from autograder.course.layout import ROOT

        report = trust.check_course(level, ROOT / "autograder" / "work")  # a box started as a kernel's, probed
        print(f"kernel uid: {report.describe_uid()} | trusted paths it can read: {len(report.read) or 'none'}")
        if report.problem:
            print(f"{'warning' if report.allowed else 'REFUSED'}: {report.problem}")
        return 1 if report.refused else 0  # make grade would grade nothing here: not a success
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m autograder.box.sandbox SPEC_JSON -- COMMAND... | --probe", file=sys.stderr)
        return 2
    return run(BoxSpec.from_json(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
