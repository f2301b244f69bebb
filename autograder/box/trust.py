"""Fail closed: before a notebook is graded, check, as the grading kernel itself, that it can read nothing trusted.

The box holds no implementation of what it grades (``autograder.editions``), but what stops a kernel from
reading the grader's files differs by machine: with bubblewrap, the box's own view of the file system; in a
container without namespaces (Gradescope, PrairieLearn: level ``rlimits``), only the file permissions and a
uid of the kernel's own. So before grading, ``check`` starts a box exactly as a kernel's (same level, same
binds, a uid taken the same way), and the probe in it reports the uid it really got and which **trusted
paths** it could read: the source notebooks, the graders and the reference package, the gradebook and work
folder, the editions cache (``HardenedExecute.trusted_paths`` in ``nbgrader_config.py``, plus a canary the
grader plants, readable by the grading account only).

The box is refused (``Report.problem``) when

- the kernel would run as root: never allowed, whatever the settings;
- at a level without bubblewrap, the kernel would run as the grading account (it could read and write all
  the grader can): allowed only with ``PAGED_KV_ALLOW_UNISOLATED=1``;
- it can read a trusted path: allowed only with ``PAGED_KV_ALLOW_UNISOLATED=1``;
- below bubblewrap, with a uid of its own, it could write somewhere no release can clean (the probe walks the file
  system as the kernel's uid: ``autograder.box.shared_places``): allowed only with ``PAGED_KV_ALLOW_UNISOLATED=1``.
  The folders it may write are cleaned of each box's files at every release from then on.

A probe box that does not start at all (its uid taken elsewhere meanwhile, a start that failed) is not a refusal:
it is started again with a fresh uid (``STARTS`` times in all) before the grader gives up.

A refused grader grades nothing: every graded cell carries ``REFUSED_MESSAGE`` (the student's side) and the
student's result is ``refused``, no grade (``autograder/verdict/result.py``), and the instructor sees ``Report.problem`` and how to fix it (``make grade``'s and ``run_autograder``'s
WARNINGs, ``python -m autograder.box.sandbox --probe``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from autograder.box import shared_places

ALLOW_ENV = "PAGED_KV_ALLOW_UNISOLATED"
REFUSED_MESSAGE = (
    "The grader could not be isolated from your code, so nothing was graded and this run is no grade: "
    "tell your instructor (your notebook is fine as it is)."
)
CANARY_NAME = ".isolation-canary"

# Runs in the box: who am I, which of the paths given can I read, and (below bubblewrap) where could I write? A path
# is read when a byte of it, or of a file in it (two folders deep at most), can be read: an empty file, or a folder
# holding only empty folders, is what a box shows in place of a hidden one (bubblewrap makes the mount points of
# what it hides). Its one argument is JSON: {"trusted": [...], "walk": bool, "skip": [...], "budget": seconds}.
PROBE = (
    r"""
import json, os, sys

def readable(path, depth=2):
    try:
        if os.path.isdir(path):
            if depth == 0:
                return False
            names = os.listdir(path)[:200]
            return any(readable(os.path.join(path, name), depth - 1) for name in names)
        with open(path, "rb") as handle:
            return bool(handle.read(1))
    except OSError:
        return False
"""
    + shared_places.WALK
    + r"""
asked = json.loads(sys.argv[1])
seen = [path for path in asked["trusted"] if readable(path)]
places = walk_writable(asked["skip"], asked["budget"]) if asked["walk"] else {}
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "read": seen, "places": places}))
"""
)


def allowed_by_env() -> bool:
    return os.environ.get(ALLOW_ENV, "") == "1"


@dataclass
class Report:
    """What the probe saw in the box: its uid, what it could read, and why grading is refused ('' if not)."""

    level: str
    uid: Optional[int]
    read: List[str] = field(default_factory=list)
    problem: str = ""
    allowed: bool = False  # refused, but the instructor opted in (ALLOW_ENV): graded with a warning
    writable: List[str] = field(default_factory=list)  # the folders a box may write (below bubblewrap)
    uncleanable: List[str] = field(default_factory=list)  # places a box may write that no release can clean

    @property
    def refused(self) -> bool:
        return bool(self.problem) and not self.allowed

    def describe_uid(self) -> str:
        if self.uid is None:
            return "unknown (the probe did not run)"
        if self.uid == 0:
            return "0 (root)"
        return f"{self.uid} ({'the grading account' if self.uid == os.geteuid() else 'its own'})"


def plant_canary(folder: Path) -> Path:
    """A file only the grading account may read, in ``folder`` (the work folder): the probe must not read it."""
    folder.mkdir(parents=True, exist_ok=True)
    canary = folder / CANARY_NAME
    try:
        fd = os.open(canary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # planted already (by this grader or another worker of it)
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write("only the grader may read this file\n")
    if not canary.is_symlink():
        os.chmod(canary, 0o600)
    return canary


def judge(
    level: str, uid: Optional[int], read: Sequence[str], grader_uid: int, allow: bool, uncleanable: Sequence[str] = ()
) -> Report:
    """The verdict on a probe's answer (kept apart from running it, so that each rule is tested alone)."""
    report = Report(level, uid, list(read), uncleanable=list(uncleanable))
    if uid is None:
        report.problem = "the isolation probe did not run in the grading box, so the box cannot be trusted"
    elif uid == 0:
        report.problem = (
            "grading kernels would run as root; a student's code never runs as root. Use a machine "
            "where each kernel gets a uid of its own (root with a Python every account can reach) "
            "or bubblewrap"
        )
        return report  # never allowed
    elif uid == grader_uid and level != "bwrap":
        report.problem = (
            f"at isolation level {level!r} grading kernels would run as the grading account "
            f"(uid {uid}) and could read and change everything it can"
        )
    elif read:
        shown = ", ".join(read[:4]) + (f" and {len(read) - 4} more" if len(read) > 4 else "")
        report.problem = (
            f"a grading kernel (uid {uid}, level {level!r}) can read trusted files: {shown}. Close "
            f"them to other accounts (chmod -R go-rwx on each; the kernel needs none of them) or "
            f"grade where bubblewrap runs"
        )
    elif uncleanable and level != "bwrap":
        shown = "; ".join(uncleanable[:4]) + (f" and {len(uncleanable) - 4} more" if len(uncleanable) > 4 else "")
        report.problem = (
            f"a grading kernel (uid {uid}, level {level!r}) could leave a file for the next box where no release "
            f"can remove it: {shown}. Close it to other accounts (chmod o-w), or grade where bubblewrap runs"
        )
    report.allowed = bool(report.problem) and allow
    return report


def run_probe(
    launch: List[str], trusted: Sequence[str], timeout: float = 60, walk: bool = False, skip: Sequence[str] = ()
) -> Dict:
    """Run ``PROBE`` with ``launch`` (the box's launcher command, up to its ``--``) on ``trusted``; with ``walk``,
    it also lists where it may write (``shared_places.WALK``, outside ``skip``)."""
    asked = {"trusted": list(trusted), "walk": walk, "skip": list(skip), "budget": shared_places.WALK_BUDGET_S}
    command = list(launch) + [sys.executable, "-I", "-c", PROBE, json.dumps(asked)]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": str(error)}
    for line in reversed(done.stdout.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"error": (done.stderr or done.stdout)[-500:] or f"exit status {done.returncode}"}


STARTS = 3  # a probe box that does not start is started again (a fresh box, another uid) this many times in all


def check(
    level: str, readable: Sequence[str], hidden: Sequence[str], trusted: Sequence[str], allow: Optional[bool] = None
) -> Report:
    """Start a box as a kernel's (``level``, ``readable``, ``hidden``, a uid taken as for a kernel) and judge
    what it can read of ``trusted`` and, below bubblewrap, whether every place it may write can be cleaned
    (``autograder.box.place_walk``: the folders found are cleaned at every later release in this process). A box
    that does not start is nothing the student did: it is started again, up to ``STARTS`` times, before the grader
    refuses."""
    from autograder.box import place_walk

    allow = allowed_by_env() if allow is None else allow
    answer: Dict = {}
    for _ in range(STARTS):
        answer, uid, cleanable = probe_once(level, readable, hidden, trusted)
        if "refused" in answer:
            return Report(level, 0, [], answer["refused"])
        if "error" not in answer:
            break
    if "error" in answer:
        report = judge(level, None, [], os.geteuid(), False)
        report.problem += f" ({answer['error'].strip()[-300:]})"
        return report
    problems, writable = [], []
    if level != "bwrap" and int(answer["uid"]) != os.geteuid():  # a uid of its own, on the grader's file system
        walked = place_walk.walk_places(level, readable, hidden)
        if "error" in walked:
            problems.append(f"where a box may write could not be found ({walked['error']})")
        problems += walked.get("uncleanable", [])
        writable = list(walked.get("dirs", []))
    if not cleanable:
        problems.append("the probe's own box left a task of its uid running after its release")
    report = judge(level, int(answer["uid"]), answer.get("read", []), os.geteuid(), allow, problems)
    report.writable = writable
    return report


def box_uid(uid: int) -> bool:
    """Whether ``uid`` is one a box is given here (its files go with that box's release)."""
    from autograder.box import uids

    return uids.in_range(uid)


def probe_once(level: str, readable: Sequence[str], hidden: Sequence[str], trusted: Sequence[str], walk: bool = False):
    """One probe box: ``(its answer, its uid, whether its release left nothing running)``; with ``walk`` (below
    bubblewrap, with a uid of its own), it also lists where it may write, and those folders are cleaned at its
    release and every later one in this process."""
    from autograder.box import limits, sandbox

    budget = limits.Budget(ram_mb=1024, pids=64, cpus=1.0, scratch_mb=16)
    allocation = limits.Allocation(budget, prefix="pkv-trust-", level=level)
    uid = allocation.uid
    cleanable = True
    try:
        work = os.path.join(allocation.folder, "work")
        os.makedirs(work, exist_ok=True)
        try:
            uid = kernel_uid_for(allocation.uid, level, readable)
        except UnisolatedKernel as error:
            return {"refused": str(error)}, uid, True
        spec = sandbox.BoxSpec(
            level=level,
            memory_mb=1024,
            cwd=work,
            private_dir=allocation.folder,
            readable=list(readable),
            hidden=list(hidden),
            quiet=False,
            uid=uid,
            cgroup=allocation.cgroup_paths,
            pids=64,
        )
        walk = walk and uid is not None and level != "bwrap"
        answer = run_probe(
            [sys.executable, sandbox.__file__, spec.to_json(), "--"],
            [p for p in trusted if p],
            walk=walk,
            skip=[allocation.folder],
        )
        if walk and "places" in answer:
            shared_places.remember(answer["places"].get("dirs", []))
    finally:
        cleanable = allocation.release()
    return answer, uid, cleanable


class UnisolatedKernel(RuntimeError):
    """A kernel would have to run as root: refused, never done."""


def kernel_uid_for(uid: Optional[int], level: str, readable: Sequence[str]) -> Optional[int]:
    """The uid a kernel at ``level`` runs as: ``uid`` (one taken for it) when it can use it here; the grading
    account's (None) when not root. As root without a usable uid, raises UnisolatedKernel (never root)."""
    from autograder.box import sandbox

    if uid is not None:
        problem = sandbox.own_uid_problem(level, readable)
        if not problem:
            return uid
        if os.geteuid() == 0:
            raise UnisolatedKernel(problem + "; a student's code never runs as root, so nothing is graded")
        return None
    if os.geteuid() == 0:
        raise UnisolatedKernel(
            "no free uid for a grading kernel (autograder.box.uids: none found free on this host in the range, or "
            "setpriv, prlimit or timeout is missing); a student's code never runs as root, so nothing is graded"
        )
    return None


def _course_config():
    """``HardenedExecute``'s settings in ``nbgrader_config.py`` (the course's one config file)."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course.layout import CONFIG_FILE

    return PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config().HardenedExecute


def course_trusted(extra: Sequence[str] = ()) -> List[str]:
    """The trusted paths of this course (nbgrader_config.py's ``HardenedExecute.trusted_paths``), the editions
    cache and ``extra``, without duplicates."""
    paths = list(_course_config().get("trusted_paths", []))
    return list(dict.fromkeys(paths + [str(editions_folder())] + list(extra)))


def course_box() -> Dict[str, List[str]]:
    """``readable`` and ``hidden`` of a grading kernel of this course, as the config sets them."""
    from autograder.box import sandbox

    execute = _course_config()
    private = list(execute.get("private_roots", []))
    return {
        "readable": sandbox.python_paths(private=private) + list(execute.get("readable_paths", [])),
        "hidden": list(execute.get("hidden_paths", [])),
    }


def editions_folder() -> Path:
    from autograder.editions.build import editions_dir

    return editions_dir()


def check_course(level: str, work: Path) -> Report:
    """``check`` with this course's box and trusted paths, a canary planted in ``work``."""
    box = course_box()
    canary = plant_canary(work)
    return check(level, box["readable"], box["hidden"], course_trusted([str(canary)]))
