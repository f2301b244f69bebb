"""Peak memory of one student's kernel per lab: what a hub must give each student (deploy/README.md).

``python -m tools.measure_lab_memory [LAB ...]`` runs each lab's solution notebook (the heaviest a
student's run gets: every cell, every plot) in a fresh course kernel, in its own process, and prints
the kernel's peak resident memory (``ru_maxrss`` of the reaped kernel) in MiB, as JSON lines. Add the
single-user server itself (about 100-150 MiB, see deploy/README.md) for a student's total.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_RUN = """
import resource, sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measure(lab: str) -> dict:
    """``{"lab", "kernel_peak_mib", "seconds"}`` for ``lab`` (a folder of solutions/)."""
    folder = ROOT / "solutions" / lab
    notebooks = sorted(folder.glob("*.ipynb"))
    if len(notebooks) != 1:
        raise ValueError(f"{folder} must hold one notebook, found {len(notebooks)}")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(notebooks[0]), str(folder)], capture_output=True, text=True, cwd=folder
    )
    if done.returncode != 0:
        raise RuntimeError(f"{lab} failed:\n{done.stderr[-2000:]}")
    return {
        "lab": lab,
        "kernel_peak_mib": round(int(done.stdout.split()[-1]) / 1024),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv=None) -> int:
    labs = list(argv if argv is not None else sys.argv[1:]) or sorted(
        p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit()
    )
    for lab in labs:
        print(json.dumps(measure(lab)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
