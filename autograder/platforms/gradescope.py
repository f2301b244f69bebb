"""Gradescope: an autograder zip per lab, and its ``run_autograder`` (a thin layer over ``one_upload``).

``python -m autograder.platforms.gradescope build [LAB ...]`` (``make gradescope [LAB=...]``) writes
``dist/gradescope/<LAB>-autograder.zip`` laid out as Gradescope's autograder specification asks
(gradescope-autograders.readthedocs.io, "Autograder Specifications"): ``setup.sh`` and ``run_autograder``
at the root, the course (package, graders, source and release notebooks, lock) under ``course/``.
Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once as root when it builds the
image, and for every upload runs ``/autograder/run_autograder`` in ``/autograder`` with the upload in
``/autograder/submission``; the results go to ``/autograder/results/results.json``.

``python -m autograder.platforms.gradescope run LAB`` is what ``run_autograder`` calls: it grades the
upload (``one_upload.grade_upload``) and writes results.json: one test per graded cell (score, max_score,
the message the feedback shows; visible tests ``visible``, hidden ones ``after_published`` unless
``PAGED_KV_HIDDEN_VISIBILITY`` says otherwise), the Grading notes as ``output``, ``execution_time`` and
``extra_data`` (grader version, box level). Whatever happens to the upload it writes a results.json (a crash
would show students "autograder failed" with no feedback): an upload with nothing to grade scores 0 with what to
upload. The one exception is a grading the isolation check refused (nothing ran on this machine): that is no
grade, so no results.json is written and the run exits 3, which Gradescope reports as an autograder failure
("The autograder failed to execute correctly", per its troubleshooting guide, when no valid results.json exists)
that the instructor can rerun ("Rerun Autograder", "Regrade All Submissions": its "Getting Started" guide).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from autograder.platforms import bundle
from autograder.platforms.one_upload import (
    Outcome,
    grade_or_failure,
    grader_version,
    print_for_instructor,
    write_results,
)

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
REFUSED_EXIT = 3  # run_autograder's exit status when grading was refused (no results.json: an autograder failure)
HIDDEN_VISIBILITY_ENV = "PAGED_KV_HIDDEN_VISIBILITY"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (Ubuntu).
set -euo pipefail
COURSE=/autograder/source/course
if [ -n "${{PAGED_KV_REUSE_PYTHON:-}}" ]; then
  # Tests only: reuse an installed environment instead of installing (see autograder/tests/test_platforms.py).
  echo "$PAGED_KV_REUSE_PYTHON" > "$COURSE/.python"
else
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip bubblewrap
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))'; then
  echo "ERROR: the lock needs Python 3.11.5 or newer; this image has $(python3 -V 2>&1)." >&2
  echo "Choose Gradescope's Ubuntu 24.04 base image for this autograder (Ubuntu 22.04 has Python 3.10)." >&2
  exit 1
fi
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet --upgrade pip
/autograder/venv/bin/pip install --quiet -r "$COURSE/requirements-lock.txt"
/autograder/venv/bin/pip install --quiet --no-deps --no-build-isolation -e "$COURSE"
/autograder/venv/bin/python -m paged_kv.lab.notebook_kernel install >/dev/null
echo /autograder/venv/bin/python > "$COURSE/.python"
fi
# The lab's gradebook, made once in the image, not at every upload.
PY=$(cat "$COURSE/.python")
cd "$COURSE" && PATH="$(dirname "$PY"):$PATH" PYTHONPATH="$COURSE" "$PY" -m autograder.platforms.gradescope prepare {lab}
# Only root (the grader) may enter the course: a grading kernel runs as a uid of its own and imports a copy of
# its lab's edition, nothing of this folder (graders, reference package, source notebook, gradebook).
chmod 700 "$COURSE"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every upload, in /autograder: grade /autograder/submission, write
# /autograder/results/results.json (see autograder/platforms/gradescope.py).
COURSE=/autograder/source/course
PY=$(cat "$COURSE/.python" 2>/dev/null || echo /autograder/venv/bin/python)
export PATH="$(dirname "$PY"):$PATH"  # nbgrader calls alembic, jupyter finds the course kernel
mkdir -p /autograder/results
chmod 700 "$COURSE"  # closed to the grading kernels' uids (setup.sh did it too; the grader checks before grading)
cd "$COURSE" && PYTHONPATH="$COURSE" exec "$PY" -m autograder.platforms.gradescope run {lab} \\
  --submission /autograder/submission --results /autograder/results/results.json
"""


def results(outcome: Outcome, hidden_visibility: str = "after_published") -> dict:
    """Gradescope's results.json for ``outcome``."""
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden tests' visibility must be one of {VISIBILITIES}, got {hidden_visibility!r}")
    tests = [
        {
            "name": t.name,
            "number": str(n + 1),
            "score": t.score,
            "max_score": t.max_score,
            "status": "passed" if t.score >= t.max_score - 1e-9 else "failed",
            "output": t.output,
            "visibility": hidden_visibility if t.hidden else "visible",
            "tags": [t.grade_id],
        }
        for n, t in enumerate(outcome.tests)
    ]
    return {
        "score": outcome.score,
        "execution_time": int(round(outcome.seconds)),
        "output": outcome.message(),
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "lab": outcome.lab,
            "grader_version": grader_version(),
            "box_level": outcome.isolation,
            "file": outcome.file,
        },
    }


def run(lab: str, submission: Path, target: Path) -> Optional[dict]:
    """Grade the upload and write results.json; never raises for a bad upload or a failure of grading. A refused
    grading (the isolation check would not let a kernel run here) writes no results.json at all and returns None
    (``run_autograder`` then exits non-zero): Gradescope shows the run as "The autograder failed to execute
    correctly", never a score, and the instructor reads why on the run's stdout and reruns it ("Rerun
    Autograder", or "Regrade All Submissions") once the image is fixed."""
    visibility = os.environ.get(HIDDEN_VISIBILITY_ENV, "after_published")
    outcome = grade_or_failure(lab, submission)
    if outcome.refused:
        if target.exists() or target.is_symlink():
            target.unlink()  # no results: an autograder failure, not a score
        print_for_instructor(outcome, target)
        return None
    data = results(outcome, visibility if visibility in VISIBILITIES else "after_published")
    write_results(target, data)
    print_for_instructor(outcome, target)
    return data


def build_zip(lab: str, dest: Path) -> Path:
    """``dest/<lab>-autograder.zip``: setup.sh and run_autograder at the root, the course under course/. The zip
    (0600) and ``dest`` (0700) are their owner's only: the zip holds the hidden tests (``bundle``)."""
    bundle.private_folder(dest)
    target = dest / f"{lab}-autograder.zip"
    scripts: Dict[str, str] = {"setup.sh": SETUP_SH.format(lab=lab), "run_autograder": RUN_AUTOGRADER.format(lab=lab)}
    target.unlink(missing_ok=True)  # made again, 0600 from its first byte
    with bundle.private_files(), zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in scripts.items():
            archive.writestr(_entry(name, 0o755), text)
        # Root's only: the grading kernels (uids of their own) import a copy of their edition, never these files;
        # setup.sh closes the course folder as well.
        for relative, data in bundle.course_files(lab):
            archive.writestr(_entry(f"course/{relative}", 0o600), data)
    return target


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    """A zip member that unzips as a regular file with ``mode``."""
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def main(argv: Optional[List[str]] = None) -> int:
    from autograder.course.layout import LABS, ROOT

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write dist/gradescope/<LAB>-autograder.zip")
    build.add_argument("labs", nargs="*", help="labs (default: every graded lab)")
    build.add_argument("--dest", type=Path, default=ROOT / "dist" / "gradescope")
    grade = sub.add_parser("run", help="grade one upload (what run_autograder calls)")
    grade.add_argument("lab", choices=sorted(LABS))
    grade.add_argument("--submission", type=Path, default=Path("/autograder/submission"))
    grade.add_argument("--results", type=Path, default=Path("/autograder/results/results.json"))
    prepare = sub.add_parser("prepare", help="load the lab into the gradebook (what setup.sh calls)")
    prepare.add_argument("lab", choices=sorted(LABS))
    args = parser.parse_args(argv)
    if args.command == "prepare":
        from autograder.grade.grade import ensure_assignment

        ensure_assignment(args.lab, ROOT, ROOT / "autograder" / "work")
        print(f"{args.lab}: loaded into the gradebook")
        return 0
    if args.command == "run":
        return 0 if run(args.lab, args.submission, args.results) is not None else REFUSED_EXIT
    for lab in args.labs or bundle.graded_labs():
        if lab not in LABS:
            parser.error(f"unknown lab {lab!r}")
        print(build_zip(lab, args.dest).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
