"""Lab 06's compile box, started from the trusted side: a fresh boxed process that builds the student's kernels
from their text (``autograder.agent.compile_box`` runs inside it; ``autograder.verdict.kernels`` talks to it)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List

from autograder.box import kernel_lib, limits, sandbox
from autograder.grade import boxed_kernels


def start(
    *,
    level: str,
    edition: str,
    readable: List[str],
    hidden: List[str],
    memory_mb: int,
    file_mb: int,
    ram_mb: int,
    pids: int,
    cpus: float,
    scratch_mb: int,
    allocations: List[limits.Allocation],
    log=None,
) -> subprocess.Popen:
    """Start a compile box with the lab's limits (at least ``limits.MEMORY_MB`` of address space) and the lab's
    edition as its library; its allocation joins ``allocations`` (the grader releases them after the notebook)."""
    allocation = limits.Allocation(limits.Budget(ram_mb, pids, cpus, scratch_mb), prefix="pkv-compile-", level=level)
    folder = allocation.folder
    work = os.path.join(folder, "work")
    os.mkdir(work)
    allocations.append(allocation)
    lib = kernel_lib.populate(edition, folder)
    spec = sandbox.BoxSpec(
        level=level,
        memory_mb=max(limits.MEMORY_MB, memory_mb),
        file_mb=file_mb,
        cwd=work,
        private_dir=folder,
        readable=readable,
        hidden=hidden,
        quiet=False,
        uid=boxed_kernels.kernel_uid(allocation.uid, level, readable, log),
        cgroup=allocation.cgroup_paths,
        pids=pids,
        pythonpath=[str(lib)],
    )
    command = [
        sys.executable,
        sandbox.__file__,
        spec.to_json(),
        "--",
        sys.executable,
        "-m",
        "autograder.agent.compile_box",
    ]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
