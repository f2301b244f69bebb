"""Playing Gradescope and PrairieLearn here: their folders bind-mounted where their scripts expect them.

Gradescope unpacks the autograder zip into ``/autograder/source`` and runs ``setup.sh`` once (the image),
then, in a fresh container of that image per upload, ``/autograder/run_autograder`` with the upload in
``/autograder/submission``. PrairieLearn mounts a job at ``/grade`` (the question's ``tests/``, the upload in
``student/``) and runs the question's entrypoint. Here each is a folder bind-mounted at that path in a
private mount namespace (``unshare -m``, root only), so the real scripts run with their real paths;
``setup.sh`` reuses this checkout's Python (``PAGED_KV_REUSE_PYTHON``) instead of installing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from autograder.platforms import gradescope, prairielearn

HERE = Path(__file__).resolve().parent
# JSON Schemas written from each platform's specification of results.json (autograder/tests/schemas/).
SCHEMAS = {
    name: json.loads((HERE / "schemas" / f"{name}_results.schema.json").read_text())
    for name in ("gradescope", "prairielearn")
}


def mount_problem() -> str:
    """Why the harness cannot run here, or "" when it can."""
    if os.geteuid() != 0:
        return "needs root (a private mount namespace and bind mounts)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return "" if probe.returncode == 0 else "unshare -m is not allowed here"


def _env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, **extra)
    env.pop("PAGED_KV_COURSE_ROOT", None)
    env.pop("PAGED_KV_ISOLATION", None)  # the platform's container chooses its box level, as it would there
    return env


def in_platform(
    root: Path, mount_at: str, script: str, env: Dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess:
    """``script`` (bash) with ``root`` bind-mounted at ``mount_at`` in a private mount namespace."""
    Path(mount_at).mkdir(exist_ok=True)
    wrapped = f"mount --make-rprivate / && mount --bind {root} {mount_at} && {script}"
    return subprocess.run(
        ["unshare", "-m", "bash", "-c", wrapped], env=env, capture_output=True, text=True, timeout=timeout
    )


@dataclass
class Run:
    """One upload graded by a platform's script: its results.json, its stdout and the seconds it took."""

    results: dict
    stdout: str
    seconds: float
    tmpdir: str = ""  # the container's temporary folder (docker emulation): its processes' command lines name it
    after: Optional[dict] = None  # docker emulation: what was left in the container right after (``container.AFTER``)
    returncode: int = 0  # the script's exit status (not 0 only where the run was allowed to fail)

    def scores(self) -> Dict[str, float]:
        """``{grade_id: score}`` (Gradescope's tests carry the grade id as their tag)."""
        return {t["tags"][0]: float(t["score"]) for t in self.results["tests"]}


def write_upload(folder: Path, files: Dict[str, bytes]) -> Path:
    """A folder holding ``files`` as a student uploads them."""
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def gradescope_image(lab: str, folder: Path) -> Path:
    """What Gradescope builds once per assignment: the zip of ``make gradescope`` unpacked, its setup.sh run."""
    zip_path = gradescope.build_zip(lab, folder / "dist")
    image = folder / "image"
    (image / "source").mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as archive:  # with the modes the zip stores, as unzip keeps them
        for info in archive.infolist():
            path = Path(archive.extract(info, image / "source"))
            if not info.is_dir() and info.external_attr >> 16:
                path.chmod((info.external_attr >> 16) & 0o7777)
    done = in_platform(
        image,
        "/autograder",
        "bash /autograder/source/setup.sh && "
        "cp /autograder/source/run_autograder /autograder/run_autograder && "
        "chmod +x /autograder/run_autograder",
        _env(PAGED_KV_REUSE_PYTHON=sys.executable),
    )
    if done.returncode != 0:
        raise AssertionError(f"setup.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if not (image / "source" / "course" / "autograder" / "work" / "gradebook.db").exists():
        raise AssertionError("setup.sh made no gradebook")
    return image


def run_gradescope(
    image: Path,
    upload: Path,
    scratch: Path,
    docker: bool = False,
    closed_python: bool = False,
    env: Optional[Dict[str, str]] = None,
    may_fail: bool = False,
) -> Run:
    """``run_autograder`` on ``upload`` in a fresh copy of ``image`` (a container of its own); with ``docker``, in
    the emulation of a default Docker container (``container.py``: no namespaces, Docker's capabilities and
    seccomp profile), where the Python is out of the kernels' reach with ``closed_python``; ``env``: more of the
    container's environment. With ``may_fail``, a run that exits non-zero (an autograder failure, as Gradescope
    counts it) is returned, its results ``{}`` when it wrote none, instead of failing the test."""
    root = scratch / upload.name
    shutil.copytree(image, root, symlinks=True)
    shutil.copytree(upload, root / "submission")
    (root / "results").mkdir()
    return _graded(
        root,
        "/autograder",
        "cd /autograder && /autograder/run_autograder",
        _env(PAGED_KV_REUSE_PYTHON=sys.executable, **(env or {})),
        docker,
        closed_python,
        scratch,
        may_fail,
    )


def run_prairielearn(
    question: Path,
    upload: Path,
    scratch: Path,
    docker: bool = False,
    hidden_visibility: str = "",
    env: Optional[Dict[str, str]] = None,
) -> Run:
    """The question's entrypoint on ``upload``, mounted at /grade as PrairieLearn mounts a job (with ``docker``,
    in the emulation of a default Docker container; with ``hidden_visibility``, the course's
    ``PAGED_KV_HIDDEN_VISIBILITY``: ``visible`` lists every hidden test on its own; ``env``: more of the
    container's environment)."""
    root = scratch / upload.name
    shutil.copytree(question / "tests", root / "tests", symlinks=True)
    shutil.copytree(upload, root / "student")
    extra = {"PAGED_KV_HIDDEN_VISIBILITY": hidden_visibility} if hidden_visibility else {}
    extra.update(env or {})
    return _graded(
        root, "/grade", "/grade/tests/run_grader", _env(PAGED_KV_PYTHON=sys.executable, **extra), docker, False, scratch
    )


def _graded(
    root: Path,
    mount_at: str,
    script: str,
    env: Dict[str, str],
    docker: bool = False,
    closed_python: bool = False,
    scratch: Path = Path("/tmp"),
    may_fail: bool = False,
) -> Run:
    """The platform's script run on the job laid out in ``root``: its results/results.json, stdout, seconds."""
    started = time.monotonic()
    if docker:
        import container

        done = container.in_container(
            script, {mount_at: root}, scratch / f"{root.name}-mounts", env, closed_python=closed_python
        )
    else:
        done = in_platform(root, mount_at, script, env)
    seconds = time.monotonic() - started
    if done.returncode != 0 and not may_fail:
        raise AssertionError(f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    written = root / "results" / "results.json"
    return Run(
        json.loads(written.read_text()) if written.exists() else {},
        done.stdout,
        seconds,
        getattr(done, "tmpdir", ""),
        getattr(done, "after", None),
        done.returncode,
    )


def leaked(run: Run, secret_lines: List[str]) -> List[str]:
    """The lines of ``secret_lines`` (hidden tests, grader code) found in the results or the stdout."""
    text = json.dumps(run.results) + run.stdout
    return [line for line in secret_lines if line in text]


def build_question(lab: str, folder: Path) -> Path:
    """``make prairielearn``'s question folder for ``lab``."""
    return prairielearn.build_question(lab, folder / "dist")
