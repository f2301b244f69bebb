"""A refused grading is no grade (issue 47, item 5). Where the grading box cannot be trusted (no bubblewrap, and a
Python in a folder other accounts cannot enter, so a kernel could only run as root), ``make grade`` grades nothing;
that must never reach a gradebook as 0.

Here, as an instructor meets it: a class collected from a Canvas download (a student whose display name is Chinese
and late, one on time) and a plain folder, then ``make grade``, ``make gradebook LMS=canvas`` and ``--probe`` run in
the emulation of a default Docker container (``container.py``) with the Python closed to other accounts. Each
exits non-zero and says why; grades.csv marks every student ``refused`` with no score, the terminal table says
``refused``, the insight report lists them first, and no LMS file is written."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import container
import platform_harness
from autograder.collect.entry_names import student_id
from autograder.course.layout import RELEASE_DIR
from autograder.platforms import bundle

LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
IDS = ("12345", "23456", student_id("李四"))  # Canvas's user ids; the folder's own id (LiSi-<suffix>)

pytestmark = pytest.mark.skipif(
    bool(container.problem() or platform_harness.mount_problem()),
    reason=container.problem() or platform_harness.mount_problem() or "ok",
)


def _course(folder: Path) -> Path:
    """The files grading the lab needs (as a platform's grader carries them), laid out as a course."""
    for relative, data in bundle.course_files(LAB):
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def test_a_refused_class_has_no_score_anywhere_and_every_step_exits_non_zero(tmp_path):
    if container.closed_python_folder() is None:
        pytest.skip("this Python sits in folders every account can enter: there is no closed folder to keep closed")
    course = _course(tmp_path / "course")
    honest = (RELEASE_DIR / LAB / NOTEBOOK).read_bytes()
    export = tmp_path / "export"
    (export / "李四").mkdir(parents=True)
    (export / "李四" / NOTEBOOK).write_bytes(honest)
    (export / f"张三_late_12345_987001_{NOTEBOOK}").write_bytes(honest)  # Canvas downcases LATE and keeps 张三
    (export / f"smithbob_23456_987002_{NOTEBOOK}").write_bytes(honest)
    python = str(Path(os.path.realpath(sys.prefix)) / "bin" / "python")  # reachable where the checkout is hidden
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGED_KV_")}
    env.update(PYTHONPATH=str(course), PATH=f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}")
    collected = subprocess.run(
        [python, "-m", "autograder.collect.collect", LAB, str(export)],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    script = (
        f"cd {course} && "
        f"{python} -m autograder.grade.grade {LAB} --workers 1; echo grade-exit=$?; "
        f"{python} -m autograder.grade.lms_gradebook {LAB} --lms canvas --assignment-id 77; echo gradebook-exit=$?; "
        f"{python} -m autograder.box.sandbox --probe; echo probe-exit=$?"
    )
    done = container.in_container(
        script, {}, tmp_path / "mounts", env, closed_python=True, timeout=900, seen=[tmp_path]
    )
    out = done.stdout + done.stderr
    exits = dict(line.split("=", 1) for line in done.stdout.splitlines() if "-exit=" in line)
    assert exits == {"grade-exit": "1", "gradebook-exit": "1", "probe-exit": "1"}, out[-6000:]
    assert "REFUSED: 3 of 3 students were not graded" in out and "never runs as root" in out, out[-6000:]
    table = {row[0]: row[1:] for row in (line.split() for line in done.stdout.splitlines()) if row and row[0] in IDS}
    shown = {sid: row[: row.index("refused") + 1] if "refused" in row else row for sid, row in table.items()}
    assert shown == {
        "12345": ["张三", "late", "refused"],
        "23456": ["smithbob", "refused"],
        IDS[2]: ["李四", "refused"],
    }
    assert all("isolation" in row[-1] for row in table.values()), table  # the event grading noted, in the notes
    probe = done.stdout[done.stdout.index("gradebook-exit=") : done.stdout.index("probe-exit=")]
    assert "REFUSED: " in probe and "isolation: rlimits" in probe, probe

    work = course / "autograder" / "work"
    with open(work / "reports" / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["assignment"] == LAB]
    assert len(rows) == 3 and {r["status"] for r in rows} == {"refused"}, rows
    assert all(r[c] == "" for r in rows for c in ("raw_score", "late_submission_penalty", "score")), rows
    assert {r["download_name"] for r in rows} == {"张三", "smithbob", "李四"}
    assert not list((work / "reports" / LAB).glob("canvas-gradebook.csv")), "an LMS file of a refused class"
    assert "its grading was refused" in out and "no student of" in out
    insight = json.loads((work / "reports" / LAB / "insight.json").read_text(encoding="utf-8"))
    assert sorted(insight["refused"]) == sorted(r["student_id"] for r in rows) and insight["scores"]["totals"] == {}
    page = (work / "reports" / LAB / "insight.html").read_text(encoding="utf-8")
    assert page.index("Not graded: grading was refused (3)") < page.index("Every student")
