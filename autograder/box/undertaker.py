"""What is left when ``grade`` dies: its workers, their boxed kernels and the kernels' cgroups go with it.

``grade`` starts this process first (``start``) and keeps a pipe to it: it writes each worker's pid as the
worker starts, and ``done`` when it finishes. When the pipe closes without ``done`` (``grade`` was killed,
by SIGKILL or the OOM killer), this process kills the workers it was told of, then every process in a
cgroup whose grader is gone (``limits.sweep_stale_cgroups(kill=True)``), and removes those cgroups, for
at most ``GRACE_S`` seconds; then every task of a uid those workers held, and its files (``uids.sweep``). Workers also die by themselves when ``grade`` dies (a parent-death signal,
``grade._init_worker``), and so do their kernels (``--die-with-parent``, ``PR_SET_PDEATHSIG``): this
process is the cleaner behind them, and what makes a re-run never meet a live leftover.

    python -m autograder.box.undertaker   # reads the pipe on its standard input
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO, List, Optional

GRACE_S = 15.0


def start() -> Optional[subprocess.Popen]:
    """The undertaker of this process (None where it cannot start: grading goes on without it)."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "autograder.box.undertaker"],
            stdin=subprocess.PIPE,
            start_new_session=True,
            env=dict(os.environ),
        )
    except OSError:
        return None


def tell(undertaker: Optional[subprocess.Popen], line: str) -> None:
    if undertaker is None or undertaker.stdin is None:
        return
    try:
        undertaker.stdin.write(f"{line}\n".encode())
        undertaker.stdin.flush()
    except OSError:
        pass


def finish(undertaker: Optional[subprocess.Popen]) -> None:
    """``grade`` ended normally: the undertaker leaves without touching anything."""
    if undertaker is None:
        return
    tell(undertaker, "done")
    try:
        undertaker.stdin.close()
        undertaker.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        undertaker.kill()


def _is_worker(pid: int) -> bool:
    """Still the pool worker it was (a pid is reused once its process is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"multiprocessing" in handle.read()
    except OSError:
        return False


def bury(workers: List[int], grace_s: float = GRACE_S) -> List[str]:
    """Kill ``workers`` and whatever runs in stale cgroups, and every task of the uids they held; remove the cgroups,
    the uids' files and locks. Returns the cgroups (and uids) still busy."""
    from autograder.box import limits, uids

    for pid in workers:
        if _is_worker(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    started = time.monotonic()
    while True:  # a kernel dies a moment after its worker: sweep until nothing is left (at least a second)
        left = limits.sweep_stale_cgroups(kill=True, dead=workers)
        took = time.monotonic() - started
        if (not left and not any(_is_worker(pid) for pid in workers) and took > 1.0) or took > grace_s:
            break
        time.sleep(0.1)
    # Without a cgroup (level rlimits) a box is its uid: every uid a dead worker held loses its tasks and files.
    busy = uids.sweep(dead=workers)
    return left + [f"uid {uid}" for uid in busy]


def watch(pipe: IO[bytes]) -> int:
    workers: List[int] = []
    for raw in pipe:
        line = raw.decode(errors="replace").strip()
        if line == "done":
            return 0
        if line.startswith("worker "):
            workers.append(int(line.split()[1]))
    left = bury(workers)
    if left:
        print(f"undertaker: grading died; cgroups or uids still busy after {GRACE_S:.0f} s: {left}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for grade must not stop its cleaner
    sys.exit(watch(sys.stdin.buffer))
