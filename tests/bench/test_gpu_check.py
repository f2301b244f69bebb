"""`bench/gpu_check.sh`, the one script a GPU machine runs, passes its CPU dry run: every step runs (test
collection, the notebook's prerequisites, the benchmark's and the sweep's dry runs), the results land in the
folder given, and the log says which steps ran in which mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_passes_and_fills_the_folder(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (out / "gpu_check.log").read_text()
    assert result.returncode == 0, log[-3000:]
    for step in (
        "kernel tests (collection only): ok",
        "lab 06 notebook",
        "benchmark (dry run): ok",
        "tuning sweep (dry run): ok",
        "every step passed",
    ):
        assert step in log, step
    assert "dry run (CPU)" in log and "tests collected" in log
    assert {p.name for p in out.iterdir()} >= {
        "gpu_check.log",
        "paged_attention.json",
        "paged_attention.png",
        "paged_attention_roofline.png",
        "tune_results.json",
        "launch_table.json",
    }
    assert len(list(out.iterdir())) <= 8  # what a device run can bring back
    assert json.loads((out / "paged_attention.json").read_text())["dry_run"] is True
    table = json.loads((out / "launch_table.json").read_text())
    assert [e["gpu"] for e in table["entries"]] == ["CPU (dry run)"]  # the copy, never the package's table
    assert json.loads((ROOT / "paged_kv" / "kernels" / "launch_table.json").read_text())["entries"] == [] or all(
        e["gpu"] != "CPU (dry run)"
        for e in json.loads((ROOT / "paged_kv" / "kernels" / "launch_table.json").read_text())["entries"]
    )


def test_gpu_check_reports_a_failing_step_and_exits_non_zero(tmp_path):
    """A stand-in python that fails the kernel tests and passes everything else at once: the failure is
    reported, the later steps still run, the exit status says so."""
    out = tmp_path / "out"
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\ncase "$*" in *"-m pytest"*) exit 3;; esac\nexit 0\n')
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run", str(out)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHON=str(fake)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = (out / "gpu_check.log").read_text()
    assert result.returncode == 1 and "kernel tests (collection only): FAILED (exit 3)" in log
    assert "tuning sweep (dry run): ok" in log and "SOME STEP FAILED" in log
