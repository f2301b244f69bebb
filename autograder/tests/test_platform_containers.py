"""Gradescope and PrairieLearn as they really run: in a default Docker container, where neither bubblewrap nor
``unshare`` works (``container.py`` emulates one: Docker's capabilities and seccomp profile, no cgroup).

There the box falls back to level ``rlimits`` and trust comes from file permissions and a uid per kernel
(``autograder.box.trust``): the course folder is closed to every account but root's, a kernel imports only a
copy of its edition, and before grading a box started as a kernel's proves it can read nothing trusted. Graded
there, as dishonest students would try it (findings costing nothing, ``PAGED_KV_FINDINGS_COST=0``, so that no
score depends on the provenance report): an upload that opens the source notebook and runs its solution, one
whose error message carries the hidden tests' text, one that reports the kernel's uid and what it can read
and write and leaves a process behind; the honest upload; and a grader whose Python no kernel uid can reach.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import jsonschema
import nbformat
import pytest

import box_attacks
import container
import platform_harness
import test_platforms
from autograder.box import trust, uids
from autograder.course.notebook import BEGIN
from autograder.proof import classroom, report
from autograder.verdict.secrets import REMOVED

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAB = "02-atomic-prefill"
NOTEBOOK = "atomic_prefill.ipynb"
TODO = "lab02-prefill"
COURSES = ("/autograder/source/course", "/grade/tests/course")
TRUSTED = [
    f"{c}/{p}"
    for c in COURSES
    for p in (
        f"solutions/{LAB}/{NOTEBOOK}",
        "paged_kv/__init__.py",
        "autograder/labs/lab02_atomic_prefill/checks.py",
        "autograder/work/gradebook.db",
        "solutions",
    )
] + ["/var/cache/paged-kv-editions"]
MARKER = "pkv-left-behind-7f3a"
POD_UID = 1000  # the user of a Zero to JupyterHub single-user pod (jovyan)

pytestmark = pytest.mark.skipif(
    bool(container.problem() or platform_harness.mount_problem()),
    reason=container.problem() or platform_harness.mount_problem() or "ok",
)

DELEGATE = f'''
import json
for _course in {COURSES!r}:
    try:
        _cells = json.load(open(_course + "/solutions/{LAB}/{NOTEBOOK}"))["cells"]
        break
    except OSError as _error:
        _why = _error
else:
    raise _why
exec("".join(next(c["source"] for c in _cells if c["metadata"].get("nbgrader", {{}}).get("grade_id") == "{TODO}")))
'''

LEAK = f'''
class KVCacheManager(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        text = ["grader.check_oom_is_atomic(KVCacheManager)"]
        for course in {COURSES!r}:
            try:
                text.append(open(course + "/autograder/labs/lab02_atomic_prefill/checks.py").read())
            except OSError as error:
                text.append(str(error))
        raise RuntimeError("\\n".join(text))
'''

PROBE = f'''
import json, os, subprocess, sys
class KVCacheManager(KVCacheManagerWithoutPrefill):
    def allocate_for_prefill(self, req):
        def readable(path):
            try:
                if os.path.isdir(path):
                    return bool(os.listdir(path))
                with open(path, "rb") as handle:
                    return bool(handle.read(1))
            except OSError:
                return False
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)  # {MARKER}"],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        for folder in ("/tmp", "/dev/shm"):  # left for the next box or student
            with open(os.path.join(folder, "{MARKER}"), "w") as handle:
                handle.write("the answers")
            os.chmod(os.path.join(folder, "{MARKER}"), 0o644)
        info = {{"uid": os.getuid(), "euid": os.geteuid(),
                 "read": [p for p in {TRUSTED!r} if readable(p)],
                 "write": [p for p in ("/autograder/results", "/grade/results", "/autograder/source/course",
                                       "/grade/tests/course") if os.path.isdir(p) and os.access(p, os.W_OK)]}}
        raise RuntimeError("PROBE " + json.dumps(info))
'''


def _upload(tmp_path: Path, label: str, answer: str = "") -> Path:
    nb = nbformat.read(REPO / "solutions" / LAB / NOTEBOOK, as_version=4)
    if answer:
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == TODO)
        cell.source = answer
    return platform_harness.write_upload(tmp_path / "uploads" / label, {NOTEBOOK: nbformat.writes(nb).encode()})


def _secret() -> list:
    info = classroom.load_lab(LAB, REPO / "solutions", REPO / "course")
    return report.secret_lines(info) + [BEGIN.removeprefix("### "), "grader.check_oom_is_atomic(KVCacheManager)"]


def test_the_emulated_container_refuses_what_docker_refuses(tmp_path):
    """Inside: Docker's capability set, a seccomp filter; unshare, bubblewrap, mount and add_key fail; no cgroup;
    the checkout this test runs from is not there; a pid namespace of its own (its /proc shows its own processes)
    and world-writable folders of its own (a file left in them is not in the machine's). The box's own probe falls
    back to rlimits."""
    mark = f"pkv-own-places-{os.urandom(4).hex()}"
    script = (
        "grep -E '^(CapBnd|Seccomp):' /proc/self/status; "
        "unshare -n true 2>/dev/null && echo 'unshare: ran' || echo 'unshare: refused'; "
        "bwrap --ro-bind / / --unshare-net true 2>/dev/null && echo 'bwrap: ran' || echo 'bwrap: refused'; "
        "mount -t tmpfs tmpfs /mnt 2>/dev/null && echo 'mount: ran' || echo 'mount: refused'; "
        f"ls {REPO}/solutions >/dev/null 2>&1 && echo 'checkout: seen' || echo 'checkout: hidden'; "
        "echo processes: $(ls -d /proc/[0-9]* | wc -l); "
        f"for f in /tmp /var/tmp /run/lock /dev/shm; do touch $f/{mark}; done; "
        f"echo cgroups: $(ls /sys/fs/cgroup | wc -l); {os.path.realpath(container.sys.executable)} -I -c "
        "'import ctypes; print(\"add_key:\", ctypes.CDLL(None).syscall(248, b\"user\", b\"k\", b\"v\", 1, -3))'"
    )
    done = container.in_container(script, {}, tmp_path)
    out = done.stdout
    assert "CapBnd:\t00000000a80425fb" in out and "Seccomp:\t2" in out, out + done.stderr
    for line in ("unshare: refused", "bwrap: refused", "mount: refused", "checkout: hidden", "add_key: -1"):
        assert line in out, (line, out, done.stderr)
    assert "cgroups: 0" in out, "the cgroup folder must be empty"
    assert int(out.split("processes: ")[1].split()[0]) < 10, "the container's /proc shows only its own processes"
    assert not [f for f in ("/tmp", "/var/tmp", "/run/lock", "/dev/shm") if os.path.exists(f"{f}/{mark}")]
    assert done.after == {"tasks": [], "files": []}, done.after


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return platform_harness.gradescope_image(LAB, tmp_path_factory.mktemp("gradescope"))


def _gradescope(image: Path, upload: Path, tmp_path: Path, **options) -> platform_harness.Run:
    return platform_harness.run_gradescope(image, upload, tmp_path / "autograder", docker=True, **options)


def test_gradescope_in_a_docker_container_grades_by_permission(image, tmp_path, monkeypatch):
    """The honest upload earns full marks at level rlimits; reading the source notebook from the grader's disk
    earns 0; an error carrying hidden-test text reaches results.json without it; the kernel runs as a uid of its
    own, reads no trusted path, can write no result, and leaves no process and no file in the shared folders
    behind once grading returns."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")  # delegation must fail by construction, not by the report
    secret = _secret()
    honest = _gradescope(image, _upload(tmp_path, "honest"), tmp_path)
    assert honest.results["extra_data"]["box_level"] == "rlimits", honest.stdout[-2000:]
    assert honest.results["score"] == 10.0, honest.results
    assert "cannot be trusted" not in honest.stdout

    delegate = _gradescope(image, _upload(tmp_path, "delegate", DELEGATE), tmp_path)
    assert delegate.results["score"] == 0.0, delegate.results

    leak = _gradescope(image, _upload(tmp_path, "leak", LEAK), tmp_path)
    assert leak.results["score"] == 0.0
    assert platform_harness.leaked(leak, secret) == []
    assert REMOVED in json.dumps(leak.results), "the typed-in hidden-test line is replaced, not passed on"
    assert "Permission denied" in json.dumps(leak.results), "the grader files are closed to the kernel"

    probe = _gradescope(image, _upload(tmp_path, "probe", PROBE), tmp_path)
    finished = time.monotonic()
    found = re.search(r"PROBE (\{.*?\})", json.dumps(probe.results).replace('\\"', '"'))
    assert found, probe.results
    seen = json.loads(found.group(1))
    assert seen["uid"] != 0 and seen["euid"] != 0 and uids.in_range(seen["uid"]), seen
    assert seen["read"] == [] and seen["write"] == [], seen
    assert probe.after["tasks"] == [], "a kernel's process outlived grading in its container"
    assert probe.after["files"] == [], "a file outlived it in a world-writable folder"
    assert container.left_behind(probe.tmpdir, MARKER) == []
    assert time.monotonic() - finished < 20


def test_gradescope_refuses_where_a_kernel_uid_cannot_reach_python(image, tmp_path):
    """A Python under a folder other accounts cannot enter: a kernel would have to run as root, so nothing is
    graded, and that is no grade: no results.json and a non-zero exit (Gradescope's "The autograder failed to
    execute correctly", which the instructor reruns once the image is fixed), never a 0; the instructor reads why
    (run_autograder's stdout)."""
    run = _gradescope(image, _upload(tmp_path, "honest"), tmp_path, closed_python=True, may_fail=True)
    assert run.returncode != 0 and run.results == {}, (run.returncode, run.results)
    assert "WARNING: grading kernels cannot be trusted here" in run.stdout and "never runs as root" in run.stdout
    assert f"REFUSED: {LAB}: nothing was graded" in run.stdout


def test_prairielearn_in_a_docker_container_grades_by_permission(tmp_path, monkeypatch):
    """PrairieLearn's entrypoint at /grade, in the same container: the solution under another name 1.0, the
    solution in the Chinese release 1.0 (issue 49: every route grades a Chinese notebook as the English one),
    delegation to the source notebook 0, a broken file 0 and not gradable (it costs no attempt), with what to
    upload; every result valid and without hidden-test text; no process left."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")
    question = platform_harness.build_question(LAB, tmp_path)
    uploads = test_platforms._uploads(tmp_path)
    runs = {
        label: platform_harness.run_prairielearn(question, upload, tmp_path / "grade", docker=True)
        for label, upload in (
            ("honest", uploads["the solution, renamed 'Copy of'"][0]),
            ("chinese", uploads["the solution in Chinese (course/zh_CN/)"][0]),
            ("broken", uploads["a broken JSON file"][0]),
            ("delegate", _upload(tmp_path, "delegate", DELEGATE)),
        )
    }
    expected = {"honest": 1.0, "chinese": 1.0, "broken": 0.0, "delegate": 0.0}
    for label, run in runs.items():
        jsonschema.validate(run.results, platform_harness.SCHEMAS["prairielearn"])
        assert run.results["gradable"] is (label != "broken") and run.results["score"] == expected[label], (
            label,
            run.results,
        )
        assert platform_harness.leaked(run, _secret()) == [], label
    assert "upload" in runs["broken"].results["message"].lower()
    assert container.left_behind(*(run.tmpdir for run in runs.values())) == []


def test_the_isolation_judgement_never_allows_root_and_says_why():
    """Each rule alone: root is refused even when the instructor opts in; the grading account is refused below
    bubblewrap unless opted in; a readable trusted path is refused and named."""
    assert trust.judge("rlimits", 0, [], 0, allow=True).refused
    as_grader = trust.judge("rlimits", 1000, [], 1000, allow=False)
    assert as_grader.refused and "grading account" in as_grader.problem
    assert not trust.judge("rlimits", 1000, [], 1000, allow=True).refused
    assert not trust.judge("bwrap", 1000, [], 1000, allow=False).refused
    seen = trust.judge("rlimits", 61000, ["/srv/course/solutions"], 0, allow=False)
    assert seen.refused and "/srv/course/solutions" in seen.problem
    assert not trust.judge("rlimits", 61000, [], 0, allow=False).problem


def test_a_kernel_never_runs_as_root_when_its_uid_cannot_reach_python(tmp_path):
    """As root, a readable path closed to other accounts means no own uid: refused, never root."""
    if os.geteuid() != 0:
        pytest.skip("only root gives kernels uids of their own")
    closed = tmp_path / "closed"
    (closed / "env").mkdir(parents=True)
    closed.chmod(0o700)
    with pytest.raises(trust.UnisolatedKernel, match="never runs as root"):
        trust.kernel_uid_for(61000, "rlimits", [str(closed / "env")])
    assert trust.kernel_uid_for(61000, "bwrap", [str(closed / "env")]) == 61000


# Lab 08's copy part is decided in the notebook's own kernel, after the beam part's own box ran; that box's
# edition holds the reference copy_blocks. An added cell (the red team's ``box_attacks.serve_or_fetch``) serves it
# over an abstract Unix socket and files in /tmp and /dev/shm wherever it is the reference (the part's box) and
# fetches it wherever it is a stub (the notebook's kernel); the TODO runs what it fetched. In a container (no network namespace) only "no two boxes alive at once" stops it.
SERVE_OR_FETCH = box_attacks.serve_or_fetch(
    "paged_kv.engine.cache_ops", "copy_blocks", "_ref_module.copy_blocks([], [], [(0, 1)])", "pkv-cross-box-08"
)

DELEGATED_COPY = '''
def copy_blocks(k_caches, v_caches, copies):
    """Block dst gets every slot of block src, for each (src, dst) in copies, in every layer's K and V (in place)."""
    if not copies:
        return
    for _ in range(200):
        if _fetched:
            return types.FunctionType(marshal.loads(_fetched[0]), vars(_ref_module))(k_caches, v_caches, copies)
        time.sleep(0.05)
    raise RuntimeError("no box to delegate to")
'''


def test_a_part_cannot_delegate_to_another_parts_box_in_a_container(tmp_path, monkeypatch):
    """In a container a part's box holds the other parts' reference and nothing but time keeps it from the
    notebook's kernel: there a part's box decides only after the notebook's kernel has run every cell and is
    shut down, so lab 08's copy, delegated over a socket to the beam part's box, earns nothing; every other part
    is the solution's and keeps its points."""
    monkeypatch.setenv("PAGED_KV_FINDINGS_COST", "0")
    lab, name = "08-fork-and-share", "fork_and_share.ipynb"
    nb = nbformat.read(REPO / "solutions" / lab / name, as_version=4)
    todo = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "lab08-todo4")
    todo.source = DELEGATED_COPY
    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "lab08-todo1")
    nb.cells.insert(first, nbformat.v4.new_code_cell(SERVE_OR_FETCH))
    upload = platform_harness.write_upload(tmp_path / "uploads" / "cross-box", {name: nbformat.writes(nb).encode()})
    image = platform_harness.gradescope_image(lab, tmp_path / "gradescope")
    run = platform_harness.run_gradescope(image, upload, tmp_path / "autograder", docker=True)
    scores = {t["tags"][0]: (t["score"], t["max_score"]) for t in run.results["tests"]}
    assert run.results["extra_data"]["box_level"] == "rlimits"
    assert scores["lab08-visible-copy"][0] == 0 and scores["lab08-hidden-copy"][0] == 0, scores
    assert all(score == top for grade_id, (score, top) in scores.items() if "copy" not in grade_id.split("-")[-1:]), (
        scores
    )


def test_the_canary_is_planted_once_whoever_comes_first(tmp_path):
    """Two grading workers plant the work folder's canary at once: neither fails, the file is the grader's own."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        planted = set(pool.map(lambda _: trust.plant_canary(tmp_path), range(32)))
    assert planted == {tmp_path / trust.CANARY_NAME}
    assert (tmp_path / trust.CANARY_NAME).stat().st_mode & 0o777 == 0o600


def test_a_kubernetes_pod_refuses_to_grade_and_says_why(image, tmp_path):
    """The instructor's pod on Kubernetes (``deploy/``): a non-root user under the runtime's default seccomp
    profile, the course cloned in its home. No kernel can get a uid of its own there, so grading is refused
    before anything runs, and ``--probe`` says why (deploy/README: grade where bubblewrap runs)."""
    home = tmp_path / "jovyan"
    shutil.copytree(image / "source" / "course", home / "course", symlinks=True)
    for folder, _, files in os.walk(home):
        for name in [folder] + [os.path.join(folder, f) for f in files]:
            os.lchown(name, POD_UID, POD_UID)
    script = (
        f"cd /home/jovyan/course && exec setpriv --reuid={POD_UID} --regid={POD_UID} --clear-groups "
        f"env HOME=/home/jovyan PYTHONPATH=/home/jovyan/course {sys.executable} -m autograder.box.sandbox "
        "--probe"
    )
    done = container.in_container(script, {"/home/jovyan": home}, tmp_path / "mounts")
    out = done.stdout + done.stderr
    assert "isolation: rlimits" in out, out
    assert f"kernel uid: {POD_UID} (the grading account)" in out, out
    assert "REFUSED: at isolation level 'rlimits' grading kernels would run as the grading account" in out, out


def test_a_checkout_cloned_under_tmp_stays_reachable_in_the_containers_own_tmp(tmp_path):
    """The emulated container's /tmp is its own; a checkout (or its Python) cloned under the machine's /tmp is carried
    into it, with what is mounted in it, as an image would hold it (CI clones anywhere)."""
    assert container._machine_tmp_entries(["/tmp/ci.x/clone/.venv", "/tmp/ci.x/clone", "/usr/bin/python3", "/tmp"]) == [
        "/tmp/ci.x"
    ]
    lines = container.private_places(tmp_path, carried=["/tmp/ci.x"])
    carried = lines.index(f"mount --rbind /tmp/ci.x {tmp_path / 'tmp' / 'ci.x'}")
    assert carried < lines.index(f"mount --rbind {tmp_path / 'tmp'} /tmp")  # carried before the own /tmp covers it
