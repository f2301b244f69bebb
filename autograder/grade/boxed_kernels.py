"""The grading kernels' manager and their spares.

``BoxedKernelManager`` is jupyter_client's kernel manager with its kernel in ``autograder.box.sandbox``'s box;
a worker keeps a spare (a booted kernel that has run nothing) per box setting for its next notebook
(``take_spare``, ``start_spares``), and discards what is left when it exits. ``start_kernel`` and ``close_kernel``
start and stop one of its kernels with its client and grading channel (a part's own box).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from jupyter_client.manager import AsyncKernelManager
from nbclient.util import run_sync
from traitlets import Float, Integer, List as ListTrait, Unicode

from autograder.box import kernel_lib, limits, sandbox, trust
from autograder.course.notebook_client import poll_channels
from autograder.grade.silent_runs import Kernel
from autograder.verdict import channel as grading_channel

_SPARES: Dict[str, "BoxedKernelManager"] = {}  # per worker process: a booted kernel for the next notebook


def discard(km) -> None:
    """Shut a kernel down now and release its box, whatever state it is in."""
    try:
        run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # noqa: BLE001
        pass
    try:
        km.cleanup_resources()
    except Exception:  # noqa: BLE001
        pass


@atexit.register
def discard_spares() -> None:
    while _SPARES:
        discard(_SPARES.popitem()[1])


def spare_key(settings: Dict[str, Any]) -> str:
    """The key of a box setting (a ``BoxedKernelManager``'s keyword arguments) among the spares."""
    return repr(sorted(settings.items()))


def take_spare(settings: Dict[str, Any]) -> Optional["BoxedKernelManager"]:
    """The spare this worker booted with ``settings`` (it has run nothing yet), if it is alive; else None (a dead
    one is discarded)."""
    spare = _SPARES.pop(spare_key(settings), None)
    if spare is not None:
        try:
            if run_sync(spare.is_alive)():
                return spare
        except Exception:  # noqa: BLE001 - a spare that died: start a new kernel
            pass
        discard(spare)
    return None


def start_spares(settings_each: Iterable[Dict[str, Any]], config, extra_arguments: List[str]) -> None:
    """Boot a spare for each box setting that has none (a kernel that fails to start is no spare)."""
    for settings in settings_each:
        key = spare_key(settings)
        if key in _SPARES:
            continue
        km = BoxedKernelManager(config=config, **settings)
        try:
            run_sync(km.start_kernel)(extra_arguments=list(extra_arguments))
        except Exception:  # noqa: BLE001 - no spare: the next notebook starts its own kernel
            discard(km)
            continue
        _SPARES[key] = km


def start_kernel(km, extra_arguments: Optional[List[str]], startup_timeout: float) -> Kernel:
    """Start ``km``'s kernel (unless it runs: a spare) and its client, ready, with no stdin and a grading channel in
    its private folder; a kernel that does not start is discarded and the error raised."""
    kc = None
    try:
        if not km.has_kernel:
            run_sync(km.start_kernel)(extra_arguments=list(extra_arguments or []))
        kc = poll_channels(km.client())  # a missed wake-up costs a step, not a timeout (``notebook_client``)
        kc.start_channels()
        run_sync(kc.wait_for_ready)(timeout=startup_timeout)
    except Exception:
        if kc is not None:
            try:
                kc.stop_channels()
            except Exception:  # noqa: BLE001
                pass
        discard(km)
        raise
    kc.allow_stdin = False
    return Kernel(km, kc, grading_channel.Channel(km.private_dir))


def close_kernel(kernel: Kernel) -> None:
    """Close a kernel ``start_kernel`` started: its channel, its client, and the kernel and its box."""
    try:
        kernel.channel.close()
    except OSError:
        pass
    try:
        kernel.kc.stop_channels()
    except Exception:  # noqa: BLE001
        pass
    discard(kernel.km)


def copy_assignment_files(resources: Optional[dict], km: "BoxedKernelManager") -> None:
    """The kernel works in a private copy (in ``km.workdir``) of the assignment's data files, never in the grading
    folder."""
    source = (resources or {}).get("metadata", {}).get("path")
    if not source or not os.path.isdir(source):
        return
    for item in Path(source).iterdir():
        if item.suffix == ".ipynb" or item.is_symlink():
            continue
        target = Path(km.workdir) / item.name
        if item.is_dir():
            shutil.copytree(item, target, symlinks=False, dirs_exist_ok=True)
        elif item.is_file():
            shutil.copy(item, target)


def kernel_uid(uid: Optional[int], level: str, readable: List[str], log=None) -> Optional[int]:
    """The uid a boxed process runs as (``trust.kernel_uid_for``): never root, which raises
    ``trust.UnisolatedKernel`` (the isolation probe refuses such a grader before any kernel starts)."""
    return trust.kernel_uid_for(uid, level, readable)


class BoxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in ``autograder.box.sandbox``'s box, over Unix sockets, with its own
    scratch folder, uid and cgroup (``autograder.box.limits``)."""

    box_level = Unicode("bwrap")
    memory_mb = Integer(limits.MEMORY_MB)
    file_mb = Integer(512)
    ram_mb = Integer(limits.RAM_MB)
    pids = Integer(256)
    cpus = Float(1.0)
    scratch_mb = Integer(1024)
    readable = ListTrait(Unicode())
    hidden = ListTrait(Unicode())
    pythonpath = ListTrait(Unicode())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        budget = limits.Budget(self.ram_mb, self.pids, self.cpus, self.scratch_mb)
        self.allocation = limits.Allocation(budget, level=self.box_level)
        self.private_dir = self.allocation.folder
        self.workdir = os.path.join(self.private_dir, "work")
        os.mkdir(self.workdir)
        self.transport = "ipc"
        self.connection_file = os.path.join(self.private_dir, "kernel.json")
        self.ip = os.path.join(self.private_dir, "ipc")
        # The kernel's whole library (its edition and the agent), copied in: nothing of the grader's is on its path.
        self.lib = str(kernel_lib.populate(self.pythonpath[0], self.private_dir)) if self.pythonpath else ""

    async def _forced_shutdown(self, now: bool = False, restart: bool = False) -> None:
        """jupyter_client's shutdown, except that a forced one (``now``) kills without interrupting first: a
        kernel still starting (a spare discarded while it boots) would die of that SIGINT with a
        KeyboardInterrupt traceback on the grader's stderr, for nothing."""
        if not (now and self.owns_kernel):
            return await AsyncKernelManager.shutdown_kernel(self, now=now, restart=restart)
        self.shutting_down = True
        self.stop_restarter()
        if self.has_kernel:
            await self._async_kill_kernel(restart=restart)
        await self._async_cleanup_resources(restart=restart)

    shutdown_kernel = _forced_shutdown

    def format_kernel_cmd(self, extra_arguments: Optional[List[str]] = None) -> List[str]:
        command = super().format_kernel_cmd(extra_arguments)
        spec = sandbox.BoxSpec(
            level=self.box_level,
            memory_mb=self.memory_mb,
            file_mb=self.file_mb,
            cwd=self.workdir,
            private_dir=self.private_dir,
            readable=list(self.readable),
            hidden=list(self.hidden),
            uid=kernel_uid(self.allocation.uid, self.box_level, list(self.readable), self.log),
            cgroup=self.allocation.cgroup_paths,
            pids=self.pids,
            pythonpath=[self.lib] if self.lib else [],
        )
        return [sys.executable, sandbox.__file__, spec.to_json(), "--", *command]

    def exit_status(self) -> Optional[int]:
        process = getattr(self.provisioner, "process", None)
        return None if process is None else process.poll()

    def out_of_memory(self) -> bool:
        """Did the kernel's cgroup kill a process for going over its memory?"""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        cgroup = self.allocation.cgroup
        return 0 if cgroup is None else cgroup.oom_kills()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            self.allocation.release()

    cleanup_resources = run_sync(_async_cleanup_resources)
