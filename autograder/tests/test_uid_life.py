"""A box's uid, owned end to end (``autograder.box.uids``) and every place its kernel could write
(``autograder.box.shared_places``): each rule alone, on this machine, as root (a uid per box needs root).

The whole path (a class through ``make grade``, Gradescope and PrairieLearn, two containers on one host) is
``test_leftovers_in_containers.py``'s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import leftovers
from autograder.box import limits, sandbox, shared_places, trust, uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a uid per box needs root")


def _as(uid: int, code: str, *args: str) -> subprocess.Popen:
    """``code`` run by this Python as ``uid``, in a session of its own (as a kernel's detached child)."""
    return subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", sys.executable, "-I", "-c", code]
        + list(args),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(predicate, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def _leftover_script(payload: str, **options) -> str:
    return leftovers.leftover_script(payload, seconds=60, files=False, **options)


@pytest.mark.parametrize(
    "options",
    [{}, {"nondumpable": True, "second_fork": True}],
    ids=["leader exits alone", "non-dumpable, second fork"],
)
def test_a_thread_group_whose_leader_left_is_alive_until_the_release_ends_it(options):
    """A process whose thread-group leader left with the raw exit call while a thread runs shows its leader as a
    zombie; it is a live task of its uid (every /proc task is read), and the release kills it as the uid and waits:
    nothing of the uid is left (at level rlimits the grader adopts a box's orphans and reaps them), the uid is never
    drawn again by this process."""
    allocation = limits.Allocation(limits.Budget(ram_mb=512, pids=64, scratch_mb=16), level="rlimits")
    uid = allocation.uid
    assert uid is not None and uids.in_range(uid)
    _as(uid, _leftover_script(leftovers.KILL_LOOP.replace("os.kill(-1, 9)", "pass"), **options))

    def leader_is_a_zombie_and_a_thread_runs():
        tasks = uids.tasks_of(uid)
        leaders = {tgid for tgid, tid, state, _ in tasks if tgid == tid and state == "Z"}
        return [t for t in tasks if t[0] in leaders and t[1] != t[0] and t[2] not in ("Z", "X")]

    assert _wait_for(leader_is_a_zombie_and_a_thread_runs), uids.tasks_of(uid)
    assert uids.live_tasks_of(uid)
    assert allocation.release() is True
    assert uids.tasks_of(uid) == [], "a task of the released uid is left (a zombie counts too: rlimits adopts them)"
    assert uid in uids._USED


def test_a_fork_chain_cannot_outrun_the_release():
    """Each generation forks and leaves at once: a kill one pid at a time always comes too late; ``kill -1`` as the
    uid reaches them all."""
    allocation = limits.Allocation(limits.Budget(ram_mb=512, pids=64, scratch_mb=16))
    uid = allocation.uid
    _as(uid, _leftover_script(leftovers.FORK_CHAIN.replace("os.kill(-1, 9)", "pass")))
    assert _wait_for(lambda: uids.live_tasks_of(uid))
    time.sleep(0.3)
    assert allocation.release() is True
    assert uids.live_tasks_of(uid) == []


def test_a_uid_some_task_holds_anywhere_on_the_host_is_never_taken(tmp_path):
    """A task of uid U that the grader cannot see (another container: its own pid namespace and /tmp) still makes U
    busy: the grader draws another uid; a range where every uid is busy gives none (after the wait), never a shared
    one. The kernel counts a uid's tasks host-wide; that is what ``take`` asks it."""
    outside = uids.take()
    assert outside is not None
    first = outside.uid
    rest = "import sys; sys.path.insert(0, sys.argv[1]); from autograder.box import uids; "
    code = rest + "held = uids.take(wait_s=1.0); print('TOOK', held.uid if held else None)"
    repo = str(Path(__file__).resolve().parents[2])
    try:
        for span, expected in ((f"{first}-{first + 1}", first + 1), (f"{first}-{first}", None)):
            done = subprocess.run(
                ["unshare", "-m", "-p", "-f", "--mount-proc", sys.executable, "-I", "-c", code, repo],
                env=dict(os.environ, PAGED_KV_UID_RANGE=span, PAGED_KV_UID_LOCKS=str(tmp_path / span)),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert f"TOOK {expected}" in done.stdout, done.stdout + done.stderr
    finally:
        assert outside.end_tasks()


def test_the_uid_range_is_wide_and_a_range_given_is_checked(monkeypatch):
    """Uids are drawn from 0x70000000-0x7FFDFFFF (systemd's unused range, below 2^31), not counted up from a number
    every grader takes first; ``PAGED_KV_UID_RANGE`` is refused with what to write when it is not a range of uids
    past every account."""
    monkeypatch.delenv(uids.RANGE_ENV, raising=False)
    assert uids.uid_range() == (0x70000000, 0x7FFDFFFF)
    held = [uids.take() for _ in range(3)]
    for each in held:
        assert each.end_tasks()
    drawn = {each.uid for each in held}
    assert len(drawn) == 3 and all(0x70000000 <= uid <= 0x7FFDFFFF for uid in drawn)
    for bad in ("61000", "1000-2000", "900000-800000", "70000-9999999999"):
        monkeypatch.setenv(uids.RANGE_ENV, bad)
        with pytest.raises(ValueError, match=uids.RANGE_ENV):
            uids.uid_range()


def test_a_dead_graders_uid_loses_its_tasks_and_files_to_the_sweep(tmp_path):
    """A grader that died (SIGKILL) leaves its lock and maybe a task and a file of its uid: the undertaker's sweep
    (and the next grader's first take) kills the tasks, removes the files, then the lock."""
    held = uids.take()
    uid = held.uid
    dead = subprocess.Popen(["true"])
    dead.wait()
    (uids.UID_LOCKS / str(uid)).write_text(f"{dead.pid} held")
    left = Path("/tmp") / f".pkv-sweep-{uid}"
    _as(uid, "import sys, time; open(sys.argv[1], 'w').write('x'); time.sleep(60)", str(left))
    assert _wait_for(left.exists)
    assert uids.sweep(dead=[dead.pid]) == []
    assert uids.live_tasks_of(uid) == [] and not left.exists()
    assert not (uids.UID_LOCKS / str(uid)).exists()


EVERY_FOLDER = """
import json, os, subprocess, sys
from autograder.box import limits, place_walk, sandbox, trust
place_walk.start("rlimits")  # as make grade does: in the background, once per grading run
report = trust.check("rlimits", sandbox.python_paths(private=[os.getcwd()]), [], [])
worker = subprocess.run([sys.executable, "-c", "import json; from autograder.box import place_walk; "
                         "place_walk._walk = None; print(json.dumps(place_walk.walk_places('rlimits', [], [])))"],
                        capture_output=True, text=True, timeout=60)
allocation = limits.Allocation(limits.Budget(ram_mb=512, pids=64, scratch_mb=16))
uid = allocation.uid
code = "import os, time\\n" + sys.argv[1] + "\\nprint(json.dumps(writable_folders()))"
done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", sys.executable, "-I",
                       "-c", "import json\\n" + code], capture_output=True, text=True, timeout=60)
wrote = [f for f in json.loads(done.stdout) if os.path.lexists(os.path.join(f, ".pkv-left-for-the-next-box"))]
clean = allocation.release()
left = [f for f in wrote + report.writable
        if os.path.lexists(os.path.join(f, ".pkv-left-for-the-next-box"))
        or os.path.lexists(os.path.join(f, ".pkv-left-folder"))]
print("EVERY " + json.dumps({"writable": report.writable, "wrote": wrote, "clean": clean, "left": left,
                             "problem": report.problem, "worker": worker.stdout + worker.stderr}))
"""


def test_a_file_in_every_world_writable_folder_is_gone_after_release(tmp_path):
    """In a container (``container.py``): the grader walks the file system as a box's uid (in the background, once
    per grading run: its workers read the walk and walk nothing) and finds every folder a box may write
    (``/run/lock`` too, 1777 on Debian and Ubuntu; ``/var/lock`` links to it); a box that leaves a file (0666) and a
    folder (0777, a folder inside) in each folder it may write finds nothing of it after its release."""
    import container
    import json

    if container.problem():
        pytest.skip(container.problem())
    script = f"cd {container.COURSE} && {sys.executable} -c {container.q(EVERY_FOLDER)} {container.q(leftovers.FILES)}"
    binds = container.checkout_binds(tmp_path / "closed")
    done = container.in_container(script, binds, tmp_path / "mounts", env=dict(os.environ, PYTHONPATH=container.COURSE))
    line = next((l for l in done.stdout.splitlines() if l.startswith("EVERY ")), "")
    assert line, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(line[len("EVERY ") :])
    assert {"/tmp", "/var/tmp", "/dev/shm", "/run/lock"} <= set(seen["writable"]), seen
    assert set(seen["wrote"]) >= {"/tmp", "/var/tmp", "/dev/shm", "/run/lock"}, seen
    assert seen["clean"] and seen["left"] == [], seen
    assert seen["problem"] == "", seen
    worker = json.loads(seen["worker"])  # a worker of the run reads the walk its grader made, and walks nothing
    assert worker["dirs"] == seen["writable"] and worker["uncleanable"] == [], seen["worker"]
    assert done.after == {"tasks": [], "files": []}, done.after


def test_a_place_no_release_can_clean_refuses_grading_below_bubblewrap(tmp_path):
    """What the walk found that no release can clean, each with why: a folder where a box's file is not its own, a
    check file the release left, a regular file any account may write that no box owns (a channel nobody empties),
    a walk cut short. Any of them refuses grading below bubblewrap (unless the instructor opts in), never with it."""
    shared = tmp_path / "shared-file"
    shared.write_text("")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / (shared_places.CHECK_FILE + "1879048192")).write_text("")
    found = {
        "dirs": [str(kept), str(tmp_path)],
        "files": [str(shared)],
        "foreign": [str(tmp_path / "mapped")],
        "complete": False,
    }
    problems = shared_places.uncleanable(found, 1879048192, uids.in_range)
    assert len(problems) == 4, problems
    for why in ("not its own", "outlived its release", "every account may write", "did not finish"):
        assert any(why in line for line in problems), (why, problems)
    os.chown(shared, 1879048192, 1879048192)  # a box's own file goes with that box's release
    assert not any("every account" in p for p in shared_places.uncleanable(found, 1879048192, uids.in_range))
    refused = trust.judge("rlimits", 1879048192, [], 0, allow=False, uncleanable=problems)
    assert refused.refused and "chmod o-w" in refused.problem and str(kept) in refused.problem
    assert not trust.judge("bwrap", 1879048192, [], 0, allow=False, uncleanable=problems).problem
    assert not trust.judge("rlimits", 1879048192, [], 0, allow=True, uncleanable=problems).refused


def test_a_probe_box_that_does_not_start_is_started_again_with_another_uid(monkeypatch):
    """The isolation probe's box failing to start is nothing the student did: a fresh box, another uid, before any
    verdict; only a box that never starts makes the grader refuse."""
    seen, real = [], trust.run_probe

    def fails_once(launch, trusted, **options):
        seen.append(sandbox.BoxSpec.from_json(launch[2]).uid)
        if len(seen) == 1:
            return {"error": "setpriv: failed to execute python: Resource temporarily unavailable"}
        return real(launch, trusted, **options)

    level = sandbox.probe()[0]
    if sandbox.own_uid_problem(level, sandbox.python_paths()):
        pytest.skip("this Python is closed to other accounts at this level: no box gets a uid of its own")
    monkeypatch.setattr(trust, "run_probe", fails_once)
    report = trust.check(level, sandbox.python_paths(), [], [])
    assert len(seen) == 2 and seen[0] != seen[1], seen
    assert report.uid == seen[1] and "did not run" not in report.problem

    monkeypatch.setattr(trust, "run_probe", lambda launch, trusted, **options: {"error": "never starts"})
    report = trust.check(level, sandbox.python_paths(), [], [])
    assert report.refused and "never starts" in report.problem


BOUNDS = """
import ctypes, errno, os, resource
libc = ctypes.CDLL(None, use_errno=True)
calls = {}
for name, number, args in NUMBERS:
    result = libc.syscall(number, *args)
    calls[name] = (result, errno.errorcode.get(ctypes.get_errno(), ""))
print("BOUNDS", resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_SIGPENDING)[0],
      resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0], calls)
"""


def test_what_a_box_can_use_up_of_its_uid_host_wide_is_bounded(tmp_path):
    """The kernel counts per uid on the whole host a uid's tasks, queued signals, message queue bytes, keys and
    inotify and fanotify instances. In a box of its own uid: its process limit is its ``pids``, its queued signals
    ``SIGPENDING``, its message queue bytes 0; add_key, keyctl, inotify_init1 and fanotify_init are refused."""
    from autograder.box import seccomp

    arch = seccomp.ARCHES.get(__import__("platform").machine())
    if arch is None:
        pytest.skip("no seccomp numbers for this architecture")
    numbers = [
        ("add_key", arch.numbers["add_key"], (b"user", b"pkv", b"v", 1, -3)),
        ("keyctl", arch.numbers["keyctl"], (0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the user keyring
        ("inotify_init1", arch.numbers["inotify_init1"], (0,)),
        ("fanotify_init", arch.numbers["fanotify_init"], (0, 0)),
    ]
    allocation = limits.Allocation(limits.Budget(ram_mb=1024, pids=48, scratch_mb=16))
    try:
        work = Path(allocation.folder) / "work"
        work.mkdir()
        level = sandbox.probe()[0]
        spec = sandbox.BoxSpec(
            level=level,
            memory_mb=1024,
            cwd=str(work),
            private_dir=allocation.folder,
            readable=sandbox.python_paths(),
            quiet=False,
            uid=trust.kernel_uid_for(allocation.uid, level, sandbox.python_paths()),
            cgroup=allocation.cgroup_paths,
            pids=48,
        )
        code = BOUNDS.replace("NUMBERS", repr(numbers))
        done = subprocess.run(
            [sys.executable, sandbox.__file__, spec.to_json(), "--", sys.executable, "-I", "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        allocation.release()
    line = next((l for l in done.stdout.splitlines() if l.startswith("BOUNDS")), "")
    assert line, done.stdout + done.stderr
    nproc, sigpending, msgqueue, calls = line.split(" ", 4)[1:]
    assert (int(nproc), int(sigpending), int(msgqueue)) == (48, sandbox.SIGPENDING, 0)
    calls = eval(calls)  # noqa: S307 - the box's own print of a dict of tuples
    assert all(result == -1 for result, _ in calls.values()), calls
