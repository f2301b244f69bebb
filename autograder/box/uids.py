"""A grading box's uid, owned end to end: drawn at random, proved free on the whole host, held, and handed back only
once no task of it is left anywhere.

A box runs as a uid of its own (root only) so that it can read none of the grader's files and signal none of its
processes. Two things make a uid shared although nothing of the grader shares it: a task of an earlier box still
running as it (a process the release did not see), and a box of another grader on the same host (two containers of
Gradescope or PrairieLearn side by side; each has its own ``/tmp`` and ``/proc``, but the kernel counts a uid's
processes, pending signals, keys and inotify instances across the whole host). So:

- **Drawn at random** from ``FIRST_UID..LAST_UID`` (0x70000000..0x7FFDFFFF, 268,304,384 uids: the range systemd's
  docs/UIDS-GIDS.md lists as unused, between its container ranges and its foreign range, below 2^31), never
  counting up from a fixed number that every grader would take first. ``PAGED_KV_UID_RANGE=FIRST-LAST`` sets
  another range (a host whose user namespace maps fewer uids falls back to ``FALLBACK``).
- **Proved free on the whole host, and held** (``take``): a process switched to the uid, its process limit
  (``RLIMIT_NPROC``) set to 2, forks once. The kernel counts every task of the uid in this user namespace against
  that limit, whatever pid namespace or container it runs in, so the fork succeeds only when no other task of the
  uid exists anywhere. The process then stays (a ``sleep``: the *holder*) until the box is released, so no other
  grader's check can find the uid free meanwhile: two live boxes never share a uid. A uid
  found busy is left alone and another is drawn (``DRAWS`` at a time, for at most ``WAIT_S`` seconds): no box is
  ever refused for it.
- **Released only when empty** (``Held.release``): ``kill -KILL -1`` as the uid itself (it reaches every process of
  the uid in this pid namespace, at once, whatever ``/proc`` lists), then every task of ``/proc/*/task/*`` is read
  (real, effective, saved and file-system uid; a thread group whose leader left with the raw ``exit`` system
  call shows ``State: Z`` for its leader only, and its threads are alive) until none is alive. A zombie holds
  nothing but its pid: at level ``rlimits`` the grading process is the child subreaper of its boxes
  (``adopt_orphans``), so their orphans are its children and are reaped here; elsewhere a zombie waits for its
  parent, and its uid is not drawn again meanwhile (the check above counts it).
- **Never handed out twice in one grading run**: a uid this process took is never drawn by it again, and its lock
  (``UID_LOCKS/<uid>``: the owner's pid, ``held`` or ``released``) stays until the owner exits, so no other
  worker of the run takes it either. A lock whose owner died is swept (its uid's tasks killed and files removed
  first) by the next ``take`` in a new process and by the undertaker.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

FIRST_UID, LAST_UID = 0x70000000, 0x7FFDFFFF  # systemd's UIDS-GIDS.md: "unused", below 2^31 (setfsuid, devpts)
FALLBACK = (60706, 61183)  # systemd's unused 16-bit range, for a user namespace that maps only 0..65535
RANGE_ENV = "PAGED_KV_UID_RANGE"
UID_LOCKS = Path(os.environ.get("PAGED_KV_UID_LOCKS", "/tmp/paged-kv-uids"))
DRAWS = 32  # uids tried before waiting a moment
WAIT_S = 120.0  # how long ``take`` waits for a free uid (only a narrow PAGED_KV_UID_RANGE can make it wait)
HOLD_S = "2147483647"  # the holder's sleep, in seconds: until the box's release kills it

_USED: Set[int] = set()  # uids this process took: never again in its life
_RELEASED: Set[int] = set()  # their locks, kept after a clean release; removed when this process exits
_READY = {"pid": 0}  # the pid that swept the stale locks (once per process)
_ADOPTING = {"pid": 0}  # the pid that became the child subreaper (``adopt_orphans``)
PR_SET_CHILD_SUBREAPER = 36
_RANDOM = random.SystemRandom()


# ---- the range --------------------------------------------------------------------------------------------------
def _parse_range(text: str) -> Tuple[int, int]:
    try:
        first, last = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"{RANGE_ENV}={text!r}: write it as FIRST-LAST, two decimal uids") from None
    if not 65536 <= first <= last < 2**31 - 1:
        raise ValueError(
            f"{RANGE_ENV}={text!r}: the uids must lie within 65536..2147483646 (past every account and below "
            "2^31), the first not above the last"
        )
    return first, last


def _mapped(first: int, last: int) -> bool:
    """Whether this user namespace maps every uid of ``first..last`` (``/proc/self/uid_map``)."""
    try:
        lines = Path("/proc/self/uid_map").read_text().split("\n")
    except OSError:
        return True
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and int(parts[0]) <= first and last < int(parts[0]) + int(parts[2]):
            return True
    return False


def uid_range() -> Optional[Tuple[int, int]]:
    """``(first, last)``: ``PAGED_KV_UID_RANGE`` when set, else ``FIRST_UID..LAST_UID`` where this user namespace
    maps it, else ``FALLBACK`` where it maps that; None when it maps neither (no own uid here)."""
    text = os.environ.get(RANGE_ENV, "").strip()
    if text:
        return _parse_range(text)
    for span in ((FIRST_UID, LAST_UID), FALLBACK):
        if _mapped(*span):
            return span
    return None


def in_range(uid: int) -> bool:
    span = uid_range()
    return span is not None and span[0] <= uid <= span[1]


# ---- the tasks of a uid -----------------------------------------------------------------------------------------
def tasks_by_uid() -> Dict[int, List[Tuple[int, int, str, int]]]:
    """Every task on this machine (this pid namespace), by uid: ``{uid: [(tgid, tid, state, ppid)]}``. A task counts
    for each of its real, effective, saved and file-system uids; read from its ``status`` (a process that made
    itself non-dumpable shows its ``/proc`` entries as root's)."""
    found: Dict[int, List[Tuple[int, int, str, int]]] = {}
    for process in os.scandir("/proc"):
        if not process.name.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{process.name}/task")
        except OSError:
            continue
        for tid in tids:
            state, ppid, uids = "", 0, ()
            try:
                with open(f"/proc/{process.name}/task/{tid}/status") as handle:
                    for line in handle:
                        if line.startswith("State:"):
                            state = line.split()[1]
                        elif line.startswith("PPid:"):
                            ppid = int(line.split()[1])
                        elif line.startswith("Uid:"):
                            uids = {int(u) for u in line.split()[1:5]}
                            break
            except (OSError, ValueError, IndexError):
                continue
            for uid in uids:
                found.setdefault(uid, []).append((int(process.name), int(tid), state, ppid))
    return found


def tasks_of(uid: int) -> List[Tuple[int, int, str, int]]:
    """``[(tgid, tid, state, ppid)]`` of every task whose real, effective, saved or file-system uid is ``uid``."""
    return tasks_by_uid().get(uid, [])


def live_tasks_of(uid: int) -> List[int]:
    """The thread groups with a task of ``uid`` that is not a zombie (a group whose leader is a zombie but one of
    whose threads runs is live)."""
    return sorted({tgid for tgid, _, state, _ in tasks_of(uid) if state not in ("Z", "X")})


def kill_all_as(uid: int) -> bool:
    """``kill -KILL -1`` run as ``uid`` itself (root only): every process of the uid in this pid namespace and below
    it, at once, whatever ``/proc`` shows. False when it could not run (no setpriv)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        return False
    try:
        subprocess.run(
            [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "sh", "-c", "kill -KILL -1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _reap(zombies: Iterable[int]) -> None:
    """Reap those of ``zombies`` that are this process's children."""
    for pid in set(zombies):
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def end_tasks_of(uid: Optional[int], timeout: float = 5.0, holder: Optional[subprocess.Popen] = None) -> bool:
    """Kill every task of ``uid`` (root only) and wait until none is alive: ``kill -KILL -1`` as the uid at least
    once, whatever the listing says, then again (and pid by pid) while ``/proc`` shows a live task. Zombies of the uid
    that are this process's children are reaped (``holder``, the uid's holder, first). True when no live task is
    left within ``timeout`` seconds."""
    if uid is None or os.geteuid() != 0:
        return True
    deadline = time.monotonic() + timeout
    pause = 0.002  # a task killed a moment ago may still show as running: look again soon, then less often
    while True:
        killed = kill_all_as(uid)
        if holder is not None and holder.poll() is None and not killed:
            holder.kill()
        if holder is not None:
            try:
                holder.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        tasks = tasks_of(uid)
        me = os.getpid()
        _reap(tgid for tgid, tid, state, ppid in tasks if tgid == tid and state in ("Z", "X") and ppid == me)
        live = sorted({tgid for tgid, _, state, _ in tasks if state not in ("Z", "X")})
        if not live:
            return True
        if time.monotonic() > deadline:
            return False
        for tgid in live:  # a machine without setpriv: one by one
            try:
                os.kill(tgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(pause)
        pause = min(0.05, pause * 2)


# ---- holding a uid ----------------------------------------------------------------------------------------------
BUSY, BROKEN = "busy", "broken"


@functools.lru_cache(maxsize=None)
def _holder_command() -> Tuple[str, ...]:
    """The holder's command, up to the uid's options: ``()`` where a tool it needs is missing."""
    setpriv, prlimit = shutil.which("setpriv"), shutil.which("prlimit")
    if not (setpriv and prlimit):
        return ()
    try:
        usage = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        usage = ""
    return (setpriv,) + (("--pdeathsig", "KILL") if "--pdeathsig" in usage else ()) + (prlimit,)


def _hold(uid: int):
    """Start the holder of ``uid`` if no task of it exists anywhere on the host: its ``Popen``; ``BUSY`` (nothing left
    running) if one does; ``BROKEN`` when the holder cannot run here at all. The holder runs as the uid with a process
    limit of 2 and forks once: the fork fails while another task of the uid exists (the kernel counts them
    host-wide); then it becomes a ``sleep`` until the release kills it. dash fails such a fork at once (bash would
    retry it for 15 s: without dash, ``timeout`` forks the ``sleep`` itself)."""
    command = _holder_command()
    if not command:
        return BROKEN
    setpriv, *options, prlimit = command
    who = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *options, "--", prlimit, "--nproc=2", "--"]
    dash = shutil.which("dash")
    if dash:
        holder = subprocess.Popen(
            who + [dash, "-c", f"(exit 0) && echo held && exec sleep {HOLD_S}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        with holder.stdout:
            held = holder.stdout.readline() == b"held\n"
        if held:
            return holder
        return BUSY if holder.wait() == 2 else BROKEN
    holder = subprocess.Popen(
        who + ["timeout", "0", "sleep", HOLD_S],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = holder.poll()
        if status is not None:
            return BUSY if status == 125 else BROKEN  # 125: timeout could not fork
        try:
            if children.read_text().split():
                return holder
        except OSError:
            pass
        time.sleep(0.001)
    end_tasks_of(uid, holder=holder)
    return BROKEN


class Held:
    """A uid taken for one box: its holder runs until ``release``."""

    def __init__(self, uid: int, holder: subprocess.Popen):
        self.uid, self.holder = uid, holder
        self.released = False

    def end_tasks(self, timeout: float = 5.0) -> bool:
        """Kill every task of the uid, the holder included; True when none is alive."""
        return end_tasks_of(self.uid, timeout, self.holder)

    def release(self, clean: bool) -> None:
        """Mark the lock ``released`` when ``clean`` (no task left, files removed): it stays until this process exits,
        so no other worker of this grading run takes the uid; otherwise it stays ``held`` for the sweep."""
        if self.released:
            return
        self.released = True
        if clean:
            _write_lock(self.uid, "released")
            _RELEASED.add(self.uid)


def _write_lock(uid: int, state: str) -> None:
    try:
        (UID_LOCKS / str(uid)).write_text(f"{os.getpid()} {state}")
    except OSError:
        pass


def _read_lock(lock: Path) -> Tuple[int, str]:
    try:
        owner, _, state = lock.read_text().partition(" ")
        return int(owner or 0), state.strip()
    except (OSError, ValueError):
        return 0, ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True


def adopt_orphans() -> None:
    """Make this process the child subreaper of what it starts (once; root only): an orphan of a box comes here, not
    to a container's init that may never reap it, and ``end_tasks_of`` reaps it. For level ``rlimits`` only: with
    bubblewrap or unshare a box's processes die with its own pid namespace, and bubblewrap's and unshare's own
    processes (root's) would be adopted too, and never reaped."""
    if _ADOPTING["pid"] == os.getpid() or os.geteuid() != 0:
        return
    _ADOPTING["pid"] = os.getpid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _ready() -> None:
    """Once per process: sweep the locks of graders that died."""
    if _READY["pid"] == os.getpid():
        return
    _READY["pid"] = os.getpid()
    sweep()


def take(wait_s: float = WAIT_S) -> Optional[Held]:
    """A uid for a new box (root only), proved free on the whole host and held; None where no own uid can be had
    (not root, no setpriv or prlimit, no mapped range, or no free uid within ``wait_s`` seconds)."""
    if os.geteuid() != 0:
        return None
    span = uid_range()
    if span is None:
        return None
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    _ready()
    deadline = time.monotonic() + wait_s
    while True:
        for _ in range(DRAWS):
            if len(_USED) > span[1] - span[0]:
                return None  # every uid of the range was this process's once
            uid = _RANDOM.randint(*span)
            if uid in _USED:
                continue
            held = _try(uid)
            if held == BROKEN:
                return None
            if held is not None:
                return held
        if time.monotonic() > deadline:
            return None
        time.sleep(0.25)


def _try(uid: int):
    lock = UID_LOCKS / str(uid)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return None  # another worker's (or a dead grader's: swept when a new process starts)
    except OSError:
        return None
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{os.getpid()} held")
    holder = _hold(uid)
    if holder in (BUSY, BROKEN):  # a task of it runs somewhere on this host, or no holder can run here
        try:
            lock.unlink()
        except OSError:
            pass
        return None if holder == BUSY else BROKEN
    _USED.add(uid)
    return Held(uid, holder)


def sweep(dead: Iterable[int] = ()) -> List[int]:
    """Clear the locks (in this range) whose owner is gone or in ``dead``: their uid's tasks are killed and its files
    removed, then the lock. Returns the uids still busy (their lock kept)."""
    from autograder.box import shared_places

    if not UID_LOCKS.is_dir() or os.geteuid() != 0:
        return []
    dead = set(dead)
    stale = []
    for lock in UID_LOCKS.iterdir():
        if lock.name.isdigit() and in_range(int(lock.name)):
            owner, state = _read_lock(lock)
            if owner not in dead and owner and _alive(owner):
                continue
            stale.append((lock, int(lock.name), state))
    if not stale:
        return []
    running = tasks_by_uid()
    busy = []
    for lock, uid, state in stale:
        if uid in running or state != "released":
            if not end_tasks_of(uid, timeout=2.0):
                busy.append(uid)
                continue
            shared_places.remove_files_of(uid)
        try:
            lock.unlink()
        except OSError:
            pass
    return busy


@atexit.register
def _forget_released() -> None:
    """This process exits: the uids it released cleanly may be drawn again by the next grading run."""
    for uid in list(_RELEASED):
        lock = UID_LOCKS / str(uid)
        if _read_lock(lock)[0] == os.getpid():
            try:
                lock.unlink()
            except OSError:
                pass
    _RELEASED.clear()
