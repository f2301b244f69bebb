"""PrairieLearn: an externally graded question per lab, and its entrypoint (a thin layer over ``one_upload``).

``python -m autograder.platforms.prairielearn build [LAB ...]`` (``make prairielearn [LAB=...]``) writes
``dist/prairielearn/<LAB>/``: a question folder (``info.json`` with ``gradingMethod: External`` and
``externalGradingOptions`` naming the grading image and the entrypoint, ``question.html`` with a file
upload of the lab's notebook and the external grader's results) whose ``tests/`` holds the entrypoint
``run_grader`` and the course, and ``Dockerfile`` for the grading image (the lock's packages and
bubblewrap; PrairieLearn's graders run without network by default, so nothing is installed at grading
time). PrairieLearn mounts the job at ``/grade``: the upload in ``/grade/student``, the question's
``tests/`` in ``/grade/tests``; the entrypoint writes ``/grade/results/results.json``:
``gradable``, ``score`` in 0..1, ``message`` (the Grading notes), ``output`` and ``tests[]`` (``name``,
``points``, ``max_points``, ``output``; hidden tests show their message, never their code). The student sees
all of it; what only the instructor should read (the box level) goes to stdout, the grading job's log.

A grading the isolation check refused (nothing ran) is no grade: its results are ``gradable: false`` with no
score and a ``format_errors`` line saying so (PrairieLearn's "External Grading" docs: such a submission is
marked "invalid, not gradable", no points are awarded or lost and no attempt is used), and the job's log starts
with ``REFUSED:`` and why, for the instructor.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import uuid
from pathlib import Path
from typing import List, Optional

from autograder.platforms import bundle
from autograder.platforms.gradescope import HIDDEN_VISIBILITY_ENV, VISIBILITIES
from autograder.platforms.one_upload import (
    Outcome,
    grade_or_failure,
    grader_version,
    print_for_instructor,
    write_results,
)

IMAGE = "paged-kv-course/grader:latest"

RUN_GRADER = """#!/usr/bin/env bash
# PrairieLearn's entrypoint: grade /grade/student, write /grade/results/results.json
# (see autograder/platforms/prairielearn.py). The image has the course's environment at /opt/venv.
COURSE=/grade/tests/course
PY=${{PAGED_KV_PYTHON:-/opt/venv/bin/python}}
export PATH="$(dirname "$PY"):$PATH"
mkdir -p /grade/results
# Only root (the grader) may enter the course: a grading kernel runs as a uid of its own and imports a copy of
# its lab's edition. If the folder cannot be closed, the grader's isolation check refuses to grade, saying why.
chmod 700 "$COURSE" || echo "WARNING: could not close $COURSE to other accounts"
cd "$COURSE" && PYTHONPATH="$COURSE" exec "$PY" -m autograder.platforms.prairielearn run {lab} \\
  --student /grade/student --results /grade/results/results.json
"""

DOCKERFILE = """# The grading image for every lab's question: `docker build -t {image} -f Dockerfile course/`
# from a question's tests/ folder (any lab's: the environment is the same), then push it where
# PrairieLearn can pull it and name it in info.json's externalGradingOptions.image.
FROM ubuntu:24.04
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv bubblewrap \\
    && rm -rf /var/lib/apt/lists/*
COPY requirements-lock.txt pyproject.toml README.md /opt/course/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --quiet -r /opt/course/requirements-lock.txt
"""


# What a student reads of a refused grading (the isolation check would not let a kernel run on the grading image):
# PrairieLearn marks the submission "invalid, not gradable": no points awarded or lost, no attempt used.
REFUSED_FOR_STUDENTS = (
    "The grader could not be isolated from your code on the course's grading machine, so nothing was graded: "
    "this submission gets no score and costs you no attempt (your notebook is fine as it is). Tell your "
    "instructor, and submit again once they have fixed it."
)

JOB_OVERHEAD_S = 90  # collection, the isolation probe, the gradebook and a kernel's start, over the notebook budget


def job_timeout_s(lab: str) -> int:
    """PrairieLearn's ``externalGradingOptions.timeout`` for ``lab``: the lab's notebook budget (every cell and
    every part's box share it) plus ``JOB_OVERHEAD_S``, within PrairieLearn's 600 s."""
    from autograder.course.layout import grading_limit

    return min(600, grading_limit(lab, "notebook_timeout") + JOB_OVERHEAD_S)


def results(outcome: Outcome, hidden_visibility: str = "after_published") -> dict:
    """PrairieLearn's results.json for ``outcome`` (hidden tests shown one by one only when ``hidden_visibility`` is
    ``visible``, the setting Gradescope's results take too; an upload with nothing to grade is not gradable). Every field of it is shown to the student (PrairieLearn
    has no field for the instructor alone, as Gradescope's ``extra_data``), so it names no box level: ``run``
    prints that on stdout, the job's log, which only the course's staff read."""
    if not isinstance(outcome, Outcome):
        raise ValueError(f"results takes an Outcome, got {type(outcome).__name__}")
    maximum = outcome.max_score
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden tests' visibility must be one of {VISIBILITIES}, got {hidden_visibility!r}")
    if outcome.refused:  # nothing ran: not gradable (no score, no attempt used), the student told so
        return {"gradable": False, "format_errors": [REFUSED_FOR_STUDENTS], "message": REFUSED_FOR_STUDENTS}
    shown = [t for t in outcome.tests if hidden_visibility == "visible" or not t.hidden]
    tests = [{"name": t.name, "points": t.score, "max_points": t.max_score, "output": t.output} for t in shown]
    held = [t for t in outcome.tests if t not in shown]
    if held:  # PrairieLearn shows every test at once: the hidden ones as one line, with no detail (as Gradescope)
        tests.append(
            {
                "name": f"hidden tests ({len(held)})",
                "points": round(sum(t.score for t in held), 4),
                "max_points": round(sum(t.max_score for t in held), 4),
                "output": "Each hidden test's result is shown once your instructor publishes them.",
            }
        )
    return {
        "gradable": outcome.gradable,
        "score": round(outcome.score / maximum, 6) if maximum else 0.0,
        "message": outcome.message(),
        "output": f"{outcome.lab}: {outcome.score:g} of {maximum:g} points (grader {grader_version()})",
        "tests": tests,
    }


def run(lab: str, student: Path, target: Path) -> dict:
    """Grade the upload and write results.json; never raises for a bad upload or a failure of grading. The
    box level goes to stdout (the instructor's), never into results.json (the student's)."""
    outcome = grade_or_failure(lab, student)
    visibility = os.environ.get(HIDDEN_VISIBILITY_ENV, "after_published")
    data = results(outcome, visibility if visibility in VISIBILITIES else "after_published")
    write_results(target, data)
    print_for_instructor(outcome, target)
    return data


def question_uuid(lab: str) -> str:
    """The question's uuid: the same for a lab at every build, so PrairieLearn keeps its submissions."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"paged-kv-course/{lab}"))


def build_question(lab: str, dest: Path) -> Path:
    """``dest/<lab>/``: info.json, question.html, tests/run_grader, tests/course/ (its gradebook holding the lab)
    and tests/Dockerfile; ``dest`` and everything in the question its owner's only (folders 0700, files 0600,
    run_grader 0700): tests/course holds the hidden tests (``bundle``)."""
    bundle.private_folder(dest)
    folder = dest / lab
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    with bundle.private_files():
        _write_question(lab, folder)
    return bundle.close_tree(folder)


def _write_question(lab: str, folder: Path) -> None:
    from autograder.course.layout import LABS

    tests = folder / "tests"
    for relative, data in bundle.course_files(lab):
        path = tests / "course" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    bundle.prepare_gradebook(tests / "course", lab)  # made here once, not at every job
    runner = tests / "run_grader"
    runner.write_text(RUN_GRADER.format(lab=lab))
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)  # the entrypoint, run by root in the grading container
    (tests / "Dockerfile").write_text(DOCKERFILE.format(image=IMAGE))
    info = {
        "uuid": question_uuid(lab),
        "title": f"paged-kv-course {lab}",
        "topic": "KV cache paging",
        "tags": ["paged-kv-course", lab],
        "type": "v3",
        "singleVariant": True,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "enabled": True,
            "image": IMAGE,
            "entrypoint": "/grade/tests/run_grader",
            "timeout": job_timeout_s(lab),
        },
    }
    (folder / "info.json").write_text(json.dumps(info, indent=2))
    notebook = LABS[lab]
    (folder / "question.html").write_text(
        f"<pl-question-panel>\n<p>Upload your notebook for {lab}: <code>{notebook}</code> (File &gt; Download in "
        "JupyterLab or Colab).</p>\n</pl-question-panel>\n\n"
        f'<pl-file-upload file-names="{notebook}"></pl-file-upload>\n\n'
        "<pl-submission-panel>\n<pl-external-grader-results></pl-external-grader-results>\n"
        "<pl-file-preview></pl-file-preview>\n</pl-submission-panel>\n"
    )


def main(argv: Optional[List[str]] = None) -> int:
    from autograder.course.layout import LABS, ROOT

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write dist/prairielearn/<LAB>/")
    build.add_argument("labs", nargs="*", help="labs (default: every graded lab)")
    build.add_argument("--dest", type=Path, default=ROOT / "dist" / "prairielearn")
    grade = sub.add_parser("run", help="grade one upload (what run_grader calls)")
    grade.add_argument("lab", choices=sorted(LABS))
    grade.add_argument("--student", type=Path, default=Path("/grade/student"))
    grade.add_argument("--results", type=Path, default=Path("/grade/results/results.json"))
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.lab, args.student, args.results)
        return 0
    for lab in args.labs or bundle.graded_labs():
        if lab not in LABS:
            parser.error(f"unknown lab {lab!r}")
        print(build_question(lab, args.dest).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
