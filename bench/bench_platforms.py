"""Seconds Gradescope's ``run_autograder`` takes for one honest upload, beside ``make grade``'s per-student time.

Gradescope runs one container per upload, so every upload pays what a class run shares (the interpreter and
nbgrader starting, the gradebook opened). Per lab: ``make grade`` grades the solution in a class of one (its
per-student seconds, as the grade table reports them), then the zip of ``make gradescope`` is set up once and
``run_autograder`` grades the same notebook at ``/autograder`` (``autograder/tests/platform_harness.py``: root
and ``unshare`` needed), here and in the emulation of a default Docker container, as the platforms really run
(``autograder/tests/container.py``: no namespaces, so the box's level is ``rlimits``). ``make bench-platforms`` runs this pinned to one core (``taskset -c 0``), as a
container of one core would. Goal (issue 28): no more than 10 s over make grade for labs 01-05 and 08.
Writes ``bench/results/platforms.json``.

``python bench/bench_platforms.py [LAB ...]`` (default: every graded lab).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "autograder" / "tests")]

import container  # noqa: E402
import platform_harness  # noqa: E402
from autograder.proof import classroom, report  # noqa: E402

GOAL_SECONDS = 10.0  # over make grade's per-student time
GOAL_LABS = ("01", "02", "03", "04", "05", "08")


def measure(lab: str, scratch: Path) -> dict:
    info = classroom.load_lab(lab, REPO / "solutions", REPO / "course")
    solution = next(s for s in classroom.build_class(info, REPO) if s.kind == "solution")
    root = report.prepare_root(scratch / "class")
    graded = report.run_lab(lab, root, dict(os.environ), students=[solution], workers=1)
    per_student = graded.summary["students"][0]["seconds"]
    started = time.monotonic()
    image = platform_harness.gradescope_image(lab, scratch / "gradescope")
    setup = time.monotonic() - started
    upload = platform_harness.write_upload(scratch / "upload", {solution.file_name: solution.content})
    run = platform_harness.run_gradescope(image, upload, scratch / "runs")
    full = all(t["score"] == t["max_score"] for t in run.results["tests"])
    row = {
        "lab": lab,
        "make_grade_s": round(per_student, 1),
        "run_autograder_s": round(run.seconds, 1),
        "over_s": round(run.seconds - per_student, 1),
        "setup_s": round(setup, 1),
        "full_marks": full,
        "goal": lab[:2] in GOAL_LABS,
        "container_s": None,
    }
    if not container.problem():  # as the platforms really run: a default Docker container, level rlimits
        boxed = platform_harness.run_gradescope(image, upload, scratch / "container-runs", docker=True)
        row["container_s"] = round(boxed.seconds, 1)
        row["full_marks"] = full and all(t["score"] == t["max_score"] for t in boxed.results["tests"])
    return row


def main(argv=None) -> int:
    problem = platform_harness.mount_problem()
    if problem:
        print(f"bench-platforms: {problem}", file=sys.stderr)
        return 2
    labs = list(argv if argv is not None else sys.argv[1:]) or report.graded_labs(REPO / "solutions")
    cores = len(os.sched_getaffinity(0))
    rows = []
    for lab in labs:
        with tempfile.TemporaryDirectory(prefix=f"pkv-bench-{lab}-") as scratch:
            rows.append(measure(lab, Path(scratch)))
        row = rows[-1]
        mark = "" if not row["goal"] else ("  ok" if row["over_s"] <= GOAL_SECONDS else "  OVER the 10 s goal")
        boxed = "" if row["container_s"] is None else f"; in a Docker-like container {row['container_s']:.1f} s"
        print(
            f"{lab:28} make grade {row['make_grade_s']:6.1f} s/student   run_autograder {row['run_autograder_s']:6.1f} s"
            f"   ({row['over_s']:+.1f} s; setup.sh {row['setup_s']:.1f} s{boxed}){mark}",
            flush=True,
        )
    out = REPO / "bench" / "results" / "platforms.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cores": cores, "goal_over_s": GOAL_SECONDS, "labs": rows}, indent=1))
    print(f"written {out} ({cores} core(s))")
    return 0 if all(r["full_marks"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
