"""The walk of every place a box may write (``shared_places.WALK``), once per grading run and out of its way.

Below bubblewrap the isolation probe must know every folder a box's uid may write before anything is graded
(``autograder.box.trust``). Walking the whole file system takes a second or so for a Python environment with
torch, as much as grading one student at level ``rlimits``: so ``start`` walks in the background as soon as the
grader knows its level (``autograder.grade.grade``), while it builds the gradebook, and ``walk_places`` finds it
done. One walk serves the whole run: its answer depends only on what "other" may write, the same for every fresh
uid; the grader's workers read it from ``RECORD`` (written by the process that started them). Where nobody
started one (``--probe``, a test), ``walk_places`` walks there and then.

The walk runs in a box of its own, exactly as a kernel's (same level, a uid taken the same way); it leaves a check
file in each folder it may write, and its answer is read only after its box was released: what the release could
not remove is a place that cannot be cleaned (``shared_places.uncleanable``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Dict, Optional, Sequence

from autograder.box import shared_places

_RUNS: Dict[str, dict] = {}  # this process's walks by level: {"thread": ..., "result": ...}
WAIT_S = shared_places.WALK_BUDGET_S + 60  # how long a worker waits for the run's walk before walking itself


def start(level: str) -> None:
    """Walk, in the background, where a box of ``level`` may write (as root, below bubblewrap; once per process and
    level), with this course's box (``trust.course_box``). Never raises: a walk that fails is walked again by
    ``walk_places``."""
    if level == "bwrap" or os.geteuid() != 0 or level in _RUNS:
        return
    run: dict = {"result": None}

    def walk() -> None:
        try:
            from autograder.box import trust

            box = trust.course_box()
            run["result"] = _walk(level, box["readable"], box["hidden"])
        except Exception as error:  # noqa: BLE001 - said to whoever waits for it
            run["result"] = {"error": f"{type(error).__name__}: {error}"}
        _publish(level, run["result"])

    _publish(level, None)
    run["thread"] = threading.Thread(target=walk, name="pkv-place-walk", daemon=True)
    _RUNS[level] = run
    run["thread"].start()


def walk_places(level: str, readable: Sequence[str], hidden: Sequence[str]) -> dict:
    """``{"dirs": [...], "uncleanable": [...]}`` for a box of ``level`` (``{"error": why}`` when the walk could not
    run): this process's background walk, else the one of the grading run that started this process, else a walk
    now. The folders found are cleaned at every later release in this process (``shared_places.remember``)."""
    run = _RUNS.get(level)
    if run is not None:
        run["thread"].join()
        result = run["result"]
    else:
        result = _from_record(level)
        if result is None:
            result = _walk(level, readable, hidden)
    if "dirs" in result:
        shared_places.remember(result["dirs"])
    return result


def _walk(level: str, readable: Sequence[str], hidden: Sequence[str]) -> dict:
    from autograder.box import trust

    answer: dict = {"error": "not run"}
    for _ in range(trust.STARTS):  # a box that does not start is started again, with another uid
        answer, uid, cleanable = trust.probe_once(level, readable, hidden, [], walk=True)
        if "refused" in answer:
            return {"error": answer["refused"]}
        if "error" not in answer:
            break
    if "error" in answer:
        return {"error": answer["error"].strip()[-300:]}
    places = answer.get("places") or {}
    problems = shared_places.uncleanable(places, int(answer["uid"]), trust.box_uid)
    if not cleanable:
        problems.append("the walk's own box left a task of its uid running after its release")
    return {"dirs": list(places.get("dirs", [])), "uncleanable": problems}


def _publish(level: str, result: Optional[dict]) -> None:
    """Write ``RECORD`` for this process's workers (and the undertaker's sweep): the walk of ``level``, or that it is
    still under way (``result`` None)."""
    path = shared_places.record_path()
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path.with_suffix(".new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"pid": os.getpid(), "level": level, "done": result is not None, "result": result}, handle)
        os.replace(path.with_suffix(".new"), path)
    except OSError:
        pass


def _from_record(level: str) -> Optional[dict]:
    """The walk of the grading run this process belongs to (started by its parent), waited for while under way;
    None when there is none (or it failed, or its owner died)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            record = json.loads(shared_places.record_path().read_text())
        except (OSError, ValueError):
            return None
        if record.get("pid") != os.getppid() or record.get("level") != level:
            return None
        result = record.get("result")
        if record.get("done"):
            return result if isinstance(result, dict) and "dirs" in result else None
        time.sleep(0.05)
    return None
