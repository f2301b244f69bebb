"""Resources of one grading kernel and all its children together: a cgroup, a capped scratch folder, a uid.

Per-process limits (``RLIMIT_AS``, ``RLIMIT_FSIZE``) do not bound a notebook that forks: N children get
N times the memory, every file its own size, and busy children starve the notebooks graded beside
it. So each kernel (and each compile box) gets, where the machine allows it:

- a **cgroup** with a process count (``pids``), a total memory (``memory``, swap included) and a CPU
  share (``cpu``: at most ``cpus`` cores), for the kernel and everything it starts. cgroup v2 (one
  unified hierarchy with those controllers) and v1 (controllers mounted one by one under
  ``/sys/fs/cgroup/<controller>``, writable as root) both work;
- a **scratch folder** that is a tmpfs of ``scratch_mb`` MiB (root only): everything the kernel may
  write -- its working folder, home, ``/tmp`` and its sockets -- lives there, so no notebook can fill
  the grader's disk;
- a **uid of its own** (root only, ``FIRST_UID`` and up, one per kernel alive): the kernel runs as
  that unprivileged user, owns only its scratch folder, and shares no process count with another.

``probe()`` says which of these this machine gives (``python -m autograder.box.sandbox --probe``); what is
missing is printed as a WARNING on every ``make grade``, never silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "paged-kv"
V1_CONTROLLERS = ("pids", "memory", "cpu")
FIRST_UID, UID_COUNT = 61000, 1000
UID_LOCKS = Path(os.environ.get("PAGED_KV_UID_LOCKS", "/tmp/paged-kv-uids"))
CPU_PERIOD_US = 100_000


# The two memory limits of a grading kernel, one default each (HardenedExecute's settings, nbgrader_config.py):
# MEMORY_MB: its address space (RLIMIT_AS, every level: what a single process may map, files included);
# RAM_MB: the memory the kernel and all its children use together (a cgroup's memory.max, where cgroups exist).
MEMORY_MB = 4096
RAM_MB = 4096


@dataclass(frozen=True)
class Budget:
    """What one kernel and its children may use together."""

    ram_mb: int = RAM_MB
    pids: int = 256
    cpus: float = 1.0
    scratch_mb: int = 1024


# ---- cgroups ------------------------------------------------------------------------------------------
def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
        probe = path / f"probe-{uuid.uuid4().hex[:8]}"
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def cgroup_version() -> str:
    """``"v2"``, ``"v1"`` or ``""`` (none usable): v2 when its root offers pids, memory and cpu."""
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists():
        offered = set(controllers.read_text().split())
        if {"pids", "memory", "cpu"} <= offered and _writable_dir(CGROUP_ROOT / PARENT):
            subtree = CGROUP_ROOT / PARENT / "cgroup.subtree_control"
            try:
                subtree.write_text("+pids +memory +cpu")
                return "v2"
            except OSError:
                pass
    if all((CGROUP_ROOT / c).is_dir() for c in V1_CONTROLLERS) and all(
        _writable_dir(CGROUP_ROOT / c / PARENT) for c in V1_CONTROLLERS
    ):
        return "v1"
    return ""


class Cgroup:
    """One kernel's cgroup (all controllers); ``paths`` holds one folder per hierarchy."""

    def __init__(self, name: str, budget: Budget):
        self.name = name
        self.version = cgroup_version()
        self.paths: List[Path] = []
        if self.version == "v2":
            self.paths = [CGROUP_ROOT / PARENT / name]
        elif self.version == "v1":
            self.paths = [CGROUP_ROOT / c / PARENT / name for c in V1_CONTROLLERS]
        for path in self.paths:
            path.mkdir(exist_ok=True)
        ram = budget.ram_mb * 1024 * 1024
        quota = max(1000, int(budget.cpus * CPU_PERIOD_US))
        if self.version == "v2":
            folder = self.paths[0]
            _write(folder / "pids.max", budget.pids)
            _write(folder / "memory.max", ram)
            _write(folder / "memory.swap.max", 0, required=False)
            _write(folder / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        elif self.version == "v1":
            pids, memory, cpu = self.paths
            _write(pids / "pids.max", budget.pids)
            _write(memory / "memory.limit_in_bytes", ram)
            _write(memory / "memory.memsw.limit_in_bytes", ram, required=False)
            _write(cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(cpu / "cpu.cfs_quota_us", quota)

    def attach(self, pid: int) -> None:
        """Put ``pid`` (and so everything it starts) in this cgroup."""
        for path in self.paths:
            _write(path / "cgroup.procs", pid)

    def pids(self) -> List[int]:
        found = set()
        for path in self.paths:
            try:
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return sorted(found)

    def memory_peak_mb(self) -> Optional[float]:
        for path in self.paths:
            for name in ("memory.max_usage_in_bytes", "memory.peak"):
                try:
                    return int((path / name).read_text()) / 2**20
                except (OSError, ValueError):
                    continue
        return None

    def oom_kills(self) -> int:
        """How many of its processes the kernel's memory limit has stopped so far."""
        for path in self.paths:
            for name in ("memory.oom_control", "memory.events"):
                try:
                    for line in (path / name).read_text().splitlines():
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == "oom_kill":
                            return int(parts[1])
                except (OSError, ValueError):
                    continue
        return 0

    def oom_killed(self) -> bool:
        return self.oom_kills() > 0

    def destroy(self, timeout: float = 5.0) -> None:
        """Kill whatever is left in it and remove it."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for path in self.paths:
            try:
                path.rmdir()
            except OSError:
                pass


def _write(path: Path, value, required: bool = True) -> None:
    try:
        path.write_text(str(value))
    except OSError:
        if required:
            raise


def cgroup_name() -> str:
    """A new kernel cgroup's name: ``pkv-<pid of the grader that owns it>-<random>``."""
    return f"pkv-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _owner_alive(name: str, dead: Iterable[int] = ()) -> bool:
    """Whether the grader named in a cgroup's name still runs (a name without a pid: assumed alive). A zombie
    is dead (a container's init may never reap a grader's orphaned worker), and so is every pid in ``dead``."""
    parts = name.split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return True
    pid = int(parts[1])
    return pid not in set(dead) and pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not: it is only waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def sweep_stale_cgroups(kill: bool = False, dead: Iterable[int] = ()) -> List[str]:
    """Remove the cgroups left by graders that died before they could clean up; returns those still there.

    Only those whose owner (the pid in the name) is gone: a cgroup another grader on this machine has
    just made is empty too, until its kernel joins it (two ``make grade`` at once, or a grade during
    ``make test``), and removing it would fail that kernel's start. With ``kill``, what still runs in a
    stale cgroup (a kernel whose grader died) is killed first; without, such a cgroup is left alone.
    ``dead``: owners known to be gone (the workers of a grader that died), whatever their pid shows now."""
    version = cgroup_version()
    parents = (
        [CGROUP_ROOT / PARENT]
        if version == "v2"
        else [CGROUP_ROOT / c / PARENT for c in V1_CONTROLLERS]
        if version == "v1"
        else []
    )
    left = []
    for parent in parents:
        for child in parent.glob("pkv-*"):
            if _owner_alive(child.name, dead):
                continue
            try:
                pids = [int(p) for p in (child / "cgroup.procs").read_text().split()]
                for pid in pids if kill else ():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if not pids:
                    child.rmdir()
                    continue
            except OSError:
                pass
            if child.exists():
                left.append(str(child))
    return left


# ---- a scratch folder on its own tmpfs ------------------------------------------------------------------
def mount_scratch(folder: str, size_mb: int) -> bool:
    """Mount a tmpfs of ``size_mb`` MiB on ``folder`` (root only); False when it cannot be done."""
    if os.geteuid() != 0:
        return False
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0755,nosuid,nodev", "tmpfs", folder],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def unmount_scratch(folder: str) -> None:
    subprocess.run(
        ["umount", "-l", folder],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=20,
    )


@functools.lru_cache(maxsize=None)
def scratch_available() -> bool:
    import tempfile

    folder = tempfile.mkdtemp(prefix="pkv-probe-")
    try:
        if not mount_scratch(folder, 8):
            return False
        unmount_scratch(folder)
        return True
    finally:
        try:
            os.rmdir(folder)
        except OSError:
            pass


# ---- a uid per kernel -------------------------------------------------------------------------------------
def take_uid() -> Optional[int]:
    """A uid no other live kernel uses (root only), or None."""
    if os.geteuid() != 0:
        return None
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in range(FIRST_UID, FIRST_UID + UID_COUNT):
        lock = UID_LOCKS / str(uid)
        if uid_busy(uid):  # a kernel of a grader that died (or whose cgroup outlived its destroy) still runs
            continue
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if _stale(lock):
                try:
                    lock.unlink()
                except OSError:
                    pass
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return uid
    return None


def uid_busy(uid: int) -> bool:
    """Whether any process on this machine runs as ``uid`` (real, effective or saved uid; read from its status,
    since a process that made itself non-dumpable shows its ``/proc`` entry as root's)."""
    return bool(processes_of(uid))


def processes_of(uid: int) -> List[int]:
    """The pids of the live processes whose real, effective or saved uid is ``uid``. A zombie (killed, not yet
    reaped by its parent) runs nothing and holds nothing but its pid: it is not counted, so that releasing a
    kernel does not wait for its parent to reap it."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as handle:
                for line in handle:
                    if line.startswith("State:") and line.split()[1:2] in (["Z"], ["X"]):
                        break
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:4]:
                            found.append(int(entry.name))
                        break
        except OSError:
            continue
    return found


def end_processes_of(uid: Optional[int], timeout: float = 5.0) -> bool:
    """Kill every process running as ``uid`` (root only): where there is no cgroup, this is how a kernel's
    detached children end with it. As the uid itself, ``kill -KILL -1`` reaches all of them at once (a
    forking child cannot outrun it one pid at a time); repeated until none is left. True when none is left."""
    if uid is None or os.geteuid() != 0:
        return True
    deadline = time.monotonic() + timeout
    setpriv = shutil.which("setpriv")
    while True:
        left = processes_of(uid)
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        if setpriv:
            subprocess.run(
                [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "kill", "-KILL", "-1"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=20,
            )
        for pid in left:  # and one by one, for a machine without setpriv
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def _stale(lock: Path) -> bool:
    try:
        return not pid_alive(int(lock.read_text() or "0"))
    except (ValueError, OSError):
        return True


def release_uid(uid: Optional[int]) -> None:
    if uid is not None:
        try:
            (UID_LOCKS / str(uid)).unlink()
        except OSError:
            pass


SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")  # where any uid may leave a file


def remove_files_of(uid: Optional[int]) -> List[str]:
    """Remove what ``uid`` left in the folders every account may write (``SHARED_WRITABLE`` and the world-writable
    folders right inside them), so that nothing a kernel wrote reaches the next box or the next student given
    that uid (root only; its processes must be gone: ``end_processes_of``). Returns what was removed."""
    if uid is None or os.geteuid() != 0:
        return []
    folders = [f for f in SHARED_WRITABLE if os.path.isdir(f) and not os.path.islink(f)]
    folders += [
        entry.path
        for folder in list(folders)
        for entry, info in _entries(folder)  # shared ones inside
        if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002 and info.st_uid != uid
    ]  # (/tmp/.X11-unix)
    removed = []
    for folder in folders:
        for entry, info in _entries(folder):
            if info.st_uid != uid:
                continue
            try:
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                continue
    return removed


def _entries(folder: str) -> List[tuple]:
    """``(entry, its lstat)`` for each entry of ``folder`` that can be read ([] when the folder cannot)."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        try:
            found.append((entry, entry.stat(follow_symlinks=False)))
        except OSError:
            continue
    return found


def give_to(path: str, uid: Optional[int]) -> None:
    """Make ``path`` (and what is in it) belong to ``uid``."""
    if uid is None:
        return
    for root, dirs, files in os.walk(path):
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            try:
                os.lchown(name, uid, uid)
            except OSError:
                pass


# ---- what this machine gives ------------------------------------------------------------------------------
def probe() -> Tuple[Dict[str, str], List[str]]:
    """``({"cgroups": ..., "scratch": ...}, warnings)``; the uid a kernel really gets is ``autograder.box.trust``'s."""
    found, warnings = {}, []
    version = cgroup_version()
    found["cgroups"] = version or "none"
    if not version:
        warnings.append(
            "no usable cgroup (v2 with pids/memory/cpu, or v1 controllers writable as root): a "
            "notebook's children are bounded only one by one, so a forking notebook can take more "
            "memory, processes and CPU than its share and slow the others"
        )
    found["scratch"] = "tmpfs" if scratch_available() else "disk"
    if found["scratch"] == "disk":
        warnings.append(
            "no tmpfs scratch folder (needs root): a notebook can fill the grader's disk, one "
            "file of at most file_mb at a time"
        )
    if os.geteuid() != 0:
        warnings.append(
            "grading kernels run as the grading user (root gives each kernel a uid of its own): "
            "only bubblewrap's view keeps them from the grader's files"
        )
    return found, warnings


class Allocation:
    """The private folder, uid and cgroup of one boxed process: made by the grader, released after it."""

    def __init__(self, budget: Budget, prefix: str = "pkv-kernel-"):
        import tempfile

        self.budget = budget
        self.folder = tempfile.mkdtemp(prefix=prefix)
        self.scratch = mount_scratch(self.folder, budget.scratch_mb)
        self.uid = take_uid()
        self.cgroup: Optional[Cgroup] = None
        if cgroup_version():
            try:
                self.cgroup = Cgroup(cgroup_name(), budget)
            except OSError:
                self.cgroup = None

    @property
    def cgroup_paths(self) -> List[str]:
        return [str(p) for p in self.cgroup.paths] if self.cgroup is not None else []

    def release(self) -> None:
        import shutil

        if self.cgroup is not None:
            self.cgroup.destroy()
        # With or without a cgroup, no process of the kernel's uid outlives it (a uid with live processes is
        # never handed out again: ``take_uid``).
        end_processes_of(self.uid)
        remove_files_of(self.uid)  # nor any file it left where another box or the next student could read it
        if self.scratch:
            unmount_scratch(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)
        release_uid(self.uid)
        self.uid = None
