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
- a **uid of its own** (root only; ``autograder.box.uids``: drawn at random from a wide range, proved free on the
  whole host and held until the release has killed every task of it and removed its files): the kernel runs as
  that unprivileged user, owns only its scratch folder, and shares no process count with another.

``probe()`` says which of these this machine gives (``python -m autograder.box.sandbox --probe``); what is
missing is printed as a WARNING on every ``make grade``, never silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from autograder.box import shared_places, uids

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "paged-kv"
V1_CONTROLLERS = ("pids", "memory", "cpu")
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


# ---- a uid per kernel: autograder.box.uids (taken, held, released), autograder.box.shared_places (its files) ------
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
    """The private folder, uid and cgroup of one boxed process: made by the grader, released after it; ``level``:
    the box's isolation level (``autograder.box.sandbox.LEVELS``)."""

    def __init__(self, budget: Budget, prefix: str = "pkv-kernel-", level: str = ""):
        import tempfile

        if level == "rlimits":  # no pid namespace: the box's orphans come to this process to be reaped
            uids.adopt_orphans()
        self.budget = budget
        self.folder = tempfile.mkdtemp(prefix=prefix)
        self.scratch = mount_scratch(self.folder, budget.scratch_mb)
        self.held = uids.take()
        self.uid: Optional[int] = self.held.uid if self.held is not None else None
        self.cgroup: Optional[Cgroup] = None
        if cgroup_version():
            try:
                self.cgroup = Cgroup(cgroup_name(), budget)
            except OSError:
                self.cgroup = None

    @property
    def cgroup_paths(self) -> List[str]:
        return [str(p) for p in self.cgroup.paths] if self.cgroup is not None else []

    def release(self) -> bool:
        """Kill what is left of the box and remove what it wrote; True when nothing of its uid is left. The uid is
        marked released only then (``uids.Held.release``); otherwise its lock stays for the sweep."""
        if self.cgroup is not None:
            self.cgroup.destroy()
        # With or without a cgroup, no task of the kernel's uid outlives it: killed as the uid itself, at least
        # once, then waited for until /proc shows none (``uids.end_tasks_of``).
        held, self.uid, self.held = self.held, None, None
        clean = held.end_tasks() if held is not None else True
        if held is not None:  # nor any file it left where another box or the next student could read it
            shared_places.remove_files_of(held.uid)
        if self.scratch:
            unmount_scratch(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)
        if held is not None:
            held.release(clean)
        return clean
