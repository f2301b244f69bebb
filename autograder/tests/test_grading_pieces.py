"""The grading pipeline's pieces on their own: LMS names, repairs, feedback filtering, the box's probe and
the handout (collection's reading and unzipping: test_collect_entries.py)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.course.notebook import BEGIN, END
from autograder.collect import collect, entry_names, repair

from autograder.handout import handout

from autograder.feedback import hide_hidden
from autograder.box import sandbox
from autograder.course.layout import RELEASE_DIR, SOURCE_DIR

LAB = "02-atomic-prefill"
NOTEBOOK = "atomic_prefill.ipynb"
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "entry, folder, expected",
    [
        ("doejane_12345_987654_atomic_prefill.ipynb", False, ("12345", "doejane", "atomic_prefill.ipynb")),
        ("doejane_late_12345_987654_atomic_prefill-1.ipynb", False, ("12345", "doejane", "atomic_prefill-1.ipynb")),
        (
            "doejane_12345_987654_lab_1_2_x.ipynb",
            False,
            ("12345", "doejane", "lab_1_2_x.ipynb"),
        ),  # before the attachment
        ("Jane Doe_4242_assignsubmission_file_", True, ("4242", "Jane Doe", "")),
        ("Jane Doe_4242_assignsubmission_file", True, ("4242", "Jane Doe", "")),  # Moodle 4's folders end so
        (
            "Jane Doe_4242_assignsubmission_file_Copy of atomic_prefill.ipynb",
            False,
            ("4242", "Jane Doe", "Copy of atomic_prefill.ipynb"),
        ),
        (
            "Mallory_42_assignsubmission_file__7_assignsubmission_file_",
            True,  # a folder is read from the right
            ("7", "Mallory_42_assignsubmission_file_", ""),
        ),
        ("alice.zip", False, ("alice", "alice", "alice.zip")),
        ("bob smith", True, ("bob_smith", "bob smith", "bob smith")),
    ],
)
def test_lms_entry_names_give_the_student(entry, folder, expected):
    reading = entry_names.read_entry(entry, folder)
    assert (reading.student, reading.name, reading.file) == expected and reading.ambiguous == ""


@pytest.mark.parametrize(
    "entry",
    [
        "Mallory_7_assignsubmission_file_x_42_assignsubmission_file_atomic_prefill.ipynb",  # a file name with a group
        "Mallory_42_assignsubmission_file__7_assignsubmission_file_atomic_prefill.ipynb",  # a display name with one
        "mallory_7_99_x_42_assignsubmission_file_atomic_prefill.ipynb",  # Canvas's and Moodle's at once
    ],
)
def test_a_file_whose_name_holds_two_lms_ids_is_read_as_nobodys(entry):
    reading = entry_names.read_entry(entry, folder=False)
    assert "more than one LMS student id (7, 42)" in reading.ambiguous
    assert reading.student == entry.split("_")[1]  # noted for the id the LMS wrote first


@pytest.mark.parametrize("entry, folder", [("", False), ("a/b", True), ("..", True), ("alice", None), (7, False)])
def test_reading_an_entry_refuses_what_is_not_one_entry_name(entry, folder):
    with pytest.raises(ValueError):
        entry_names.read_entry(entry, folder)


@pytest.mark.parametrize(
    "names, chosen",
    [
        (["atomic_prefill.ipynb", "Copy of atomic_prefill.ipynb"], "atomic_prefill.ipynb"),
        (["notes.txt", "Copy of atomic_prefill.ipynb"], "Copy of atomic_prefill.ipynb"),
        (["atomic_prefill (1).ipynb", "scratch.ipynb"], "atomic_prefill (1).ipynb"),
        (["my lab.ipynb"], "my lab.ipynb"),
        (["a.ipynb", "b.ipynb"], None),
    ],
)
def test_the_lab_notebook_is_picked_among_renamed_copies(tmp_path, names, chosen):
    files = [tmp_path / n for n in names]
    for f in files:
        f.write_text("{}")
    picked, _ = collect.pick_notebook(files, NOTEBOOK)
    assert (picked.name if picked else None) == chosen


def _release():
    return nbformat.read(RELEASE_DIR / LAB / NOTEBOOK, as_version=4)


def _solution_json():
    return json.loads((SOURCE_DIR / LAB / NOTEBOOK).read_text())


def test_repair_takes_tests_from_the_release_and_the_answer_from_the_student():
    data = _solution_json()
    for cell in data["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade"):
            cell["source"] = "pass  # tests removed"
    fixed = repair.repair(json.dumps(data).encode(), _release())
    release_tests = {c.id: c.source for c in _release().cells if c.metadata.get("nbgrader", {}).get("grade")}
    got_tests = {c.id: c.source for c in fixed.notebook.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert got_tests == release_tests
    answer = next(c for c in fixed.notebook.cells if c.metadata.get("nbgrader", {}).get("solution"))
    assert "BEGIN SOLUTION" in answer.source
    assert {k for k, _ in fixed.log} == {"edited-test"}
    assert fixed.notebook.cells[0].id == "grading-notes" and "edited" in fixed.notebook.cells[0].source


def test_a_cell_added_by_the_student_stays_after_the_cell_it_followed_without_grading_metadata():
    data = _solution_json()
    answer = next(i for i, c in enumerate(data["cells"]) if c["metadata"].get("nbgrader", {}).get("solution"))
    data["cells"].insert(
        answer + 1,
        {
            "cell_type": "code",
            "id": "mine",
            "metadata": {
                "nbgrader": {"grade": True, "grade_id": "fake", "points": 100, "locked": True, "solution": False}
            },
            "source": "helper = 1",
            "outputs": [],
            "execution_count": None,
        },
    )
    fixed = repair.repair(json.dumps(data).encode(), _release())
    ids = [c.id for c in fixed.notebook.cells]
    added = fixed.notebook.cells[ids.index("mine")]
    assert "nbgrader" not in added.metadata
    assert fixed.notebook.cells[ids.index("mine") - 1].metadata["nbgrader"].get("solution")


def test_feedback_filter_drops_hidden_code_and_grader_frames():
    cell = nbformat.v4.new_code_cell(
        f"# Hidden tests (3 points)\n{BEGIN}\nfrom autograder.labs."
        "lab02_atomic_prefill import checks as grader\ngrader.check_block_count(KVCacheManager)\n"
        f"{END}"
    )
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "x", "points": 3, "locked": True, "solution": False}
    cell.outputs = [
        nbformat.v4.new_output(
            "error",
            ename="AssertionError",
            evalue="[case] wrong",
            traceback=[
                "Cell In[4], line 4\n----> 4 grader.check_block_count(KVCacheManager)",
                "File /repo/autograder/labs/lab02_atomic_prefill/checks.py:40, in check_block_count",
                "Cell In[2], line 7, in allocate_for_prefill\n  needed = 1",
                "AssertionError: [case] wrong",
            ],
        )
    ]
    out, _ = hide_hidden.HideHiddenTests().preprocess_cell(cell, {}, 0)
    assert "check_block_count" not in out.source and BEGIN not in out.source
    text = "\n".join(out.outputs[0]["traceback"])
    assert "check_block_count" not in text and "autograder/labs" not in text
    assert "needed = 1" in text and "[case] wrong" in text


def test_a_boxed_kernel_user_reaches_files_that_live_under_tmp(tmp_path):
    """A repository cloned under /tmp (its .venv, its paged_kv/) must be readable in the box by the kernel's
    own uid: the folders above it are made in the kernel's /tmp with 0755, not bwrap's 0700."""
    import os
    import subprocess
    import sys
    import tempfile

    from autograder.box import limits

    if sandbox.probe()[0] != "bwrap":
        pytest.skip("needs bubblewrap")
    outside = Path(tempfile.mkdtemp(prefix="pkv-clone-", dir="/tmp"))
    allocation = limits.Allocation(limits.Budget(1024, 64, 1, 64))
    try:
        (outside / "deep" / "pkg").mkdir(parents=True)
        (outside / "deep" / "pkg" / "hello.txt").write_text("read from under /tmp")
        os.chmod(outside, 0o755)
        work = os.path.join(allocation.folder, "work")
        os.mkdir(work)
        spec = sandbox.BoxSpec(
            level="bwrap",
            memory_mb=2048,
            cwd=work,
            private_dir=allocation.folder,
            readable=sandbox.python_paths() + [str(outside / "deep" / "pkg")],
            quiet=False,
            uid=allocation.uid,
            cgroup=allocation.cgroup_paths,
        )
        result = subprocess.run(
            [
                sys.executable,
                sandbox.__file__,
                spec.to_json(),
                "--",
                sys.executable,
                "-c",
                f"import os; print(os.getuid(), open({str(outside / 'deep' / 'pkg' / 'hello.txt')!r}).read())",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "read from under /tmp" in result.stdout, result.stdout + result.stderr
    finally:
        allocation.release()
        import shutil

        shutil.rmtree(outside, ignore_errors=True)


def test_the_box_says_what_it_lacks():
    level, warning = sandbox.probe()
    assert level in sandbox.LEVELS
    assert (warning == "") == (level == "bwrap")


def test_the_handout_has_the_release_and_the_package_but_no_solutions_or_graders(tmp_path):
    target = handout.build(tmp_path / "handout.zip")
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
    assert all(n.startswith("paged-kv-course/") for n in names)
    parts = {Path(n).parts[1] for n in names}
    assert {"course", "paged_kv", "Makefile", "README.md", "pyproject.toml"} <= parts
    assert not parts & {"solutions", "autograder", "tests"}
    for lab in RELEASE_DIR.iterdir():
        assert any(n.startswith(f"paged-kv-course/course/{lab.name}/") for n in names)


def test_the_handout_files_keep_normal_modes(tmp_path):
    with zipfile.ZipFile(handout.build(tmp_path / "handout.zip")) as archive:
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in archive.infolist()}
    odd = {name: oct(mode) for name, mode in modes.items() if mode not in (0o644, 0o755)}
    assert not odd, odd


def _dry_run_lab(folder: Path, *args: str, path: str = "") -> str:
    """``make -n lab ARGS`` in ``folder`` (prints what it would run), also from inside ``make test``; ``path``:
    a folder put first on PATH."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "JUPYTER_CONFIG_PATH")}
    if path:
        env["PATH"] = os.pathsep.join([path, env.get("PATH", "")])
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_handouts_make_lab_opens_the_course_as_the_repositorys_does(tmp_path):
    """Same JupyterLab command (student settings, port, options), and it installs the course kernel."""
    with zipfile.ZipFile(handout.build(tmp_path / "handout.zip")) as archive:
        archive.extractall(tmp_path)
    unzipped = tmp_path / "paged-kv-course"
    args = ("PORT=8899", "LAB_ARGS=--no-browser --ip=127.0.0.1")

    def lab_command(folder: Path) -> str:
        lines = _dry_run_lab(folder, *args).replace("\\\n", " ").splitlines()
        command = next(line for line in lines if "jupyter lab" in line)
        return " ".join(command.replace(str(folder), "<root>").split())

    handed = lab_command(unzipped)
    assert handed == lab_command(handout.REPO)
    assert 'JUPYTER_CONFIG_PATH="<root>/student-lab' in handed and handed.endswith("--no-browser --ip=127.0.0.1")
    assert "paged_kv.lab.notebook_kernel install" in _dry_run_lab(unzipped)
    assert (unzipped / "student-lab" / "labconfig" / "page_config.json").is_file()


def test_the_handouts_make_lab_takes_torchs_cpu_build_on_linux_without_an_nvidia_driver(tmp_path):
    """Issue 37 item 5: PyPI's torch for Linux brings CUDA's libraries (several GB); where no nvidia-smi is found,
    the handout's install adds PyTorch's CPU index (torch==X then resolves to X+cpu); with a driver, or with
    TORCH_INDEX= given, it installs from PyPI alone."""
    import platform
    import shutil

    if platform.system() != "Linux":
        pytest.skip("the CPU index is chosen on Linux only (PyPI's macOS and Windows builds carry no CUDA)")
    with zipfile.ZipFile(handout.build(tmp_path / "handout.zip")) as archive:
        archive.extractall(tmp_path)
    unzipped = tmp_path / "paged-kv-course"
    cpu_index = "--extra-index-url https://download.pytorch.org/whl/cpu"

    def installs(*args: str, path: str = "") -> list:
        text = _dry_run_lab(unzipped, *args, path=path).replace("\\\n", " ")
        return [line for line in text.splitlines() if "pip install" in line and "requirements-lock.txt" in line]

    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (driver / "nvidia-smi").chmod(0o755)
    if shutil.which("nvidia-smi") is None:
        assert installs() and all(cpu_index in line for line in installs()), installs()
    assert installs(path=str(driver)) and not any(cpu_index in line for line in installs(path=str(driver)))
    assert installs("TORCH_INDEX=") and not any(cpu_index in line for line in installs("TORCH_INDEX="))


def test_the_handout_refuses_solution_code(tmp_path):
    bad = tmp_path / "course" / "x.ipynb"
    bad.parent.mkdir()
    bad.write_text("### BEGIN SOLUTION")
    with pytest.raises(ValueError, match="must not be handed out"):
        handout.check_clean([bad], tmp_path)


def _available_levels():
    best = sandbox.LEVELS.index(sandbox.probe()[0])
    return list(sandbox.LEVELS[best:])


LEVEL_RUN = """
import json, sys
import nbformat
from autograder.grade.hardened import HardenedExecute

level, folder, allow = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
nb = nbformat.v4.new_notebook(cells=[
    nbformat.v4.new_code_cell("import socket\\ntry:\\n    socket.create_connection(('1.1.1.1', 53), timeout=2)"
                              ".close(); print('network: open')\\nexcept OSError:\\n    print('network: blocked')"),
    nbformat.v4.new_code_cell("hog = bytearray(3 * 1024 ** 3)"),
    nbformat.v4.new_code_cell("print('still alive')")])
executor = HardenedExecute(cell_timeout=20, notebook_timeout=60, memory_mb=1024, isolation=level,
                           allow_unisolated=allow)
out, _ = executor.preprocess(nb, {"metadata": {"path": folder}, "nbgrader": {"assignment": "lab", "student": "s"}})
print("RESULT " + json.dumps({"cells": [c.get("outputs", []) for c in out.cells if c.cell_type == "code"],
                              "events": [e["kind"] for e in executor.run.events], "notes": out.cells[0].source}))
"""


@pytest.mark.parametrize("level", _available_levels())
def test_every_isolation_level_runs_a_kernel_with_its_limits(tmp_path, level):
    """Each fallback really runs: memory is capped at every level, the network is cut from unshare up. As root,
    each kernel runs as a uid of its own, in a mount namespace where this machine's Python is open to every
    account (``container.py``; a Python under ``/root`` would make the box refuse: tested in
    ``test_platform_containers``); otherwise as the grading account, which is allowed below bubblewrap only
    when the instructor opts in (``PAGED_KV_ALLOW_UNISOLATED``)."""
    import subprocess
    import sys

    import container

    allow = "0" if os.geteuid() == 0 or level == "bwrap" else "1"
    command = [sys.executable, "-c", LEVEL_RUN, level, str(tmp_path), allow]
    if os.geteuid() == 0 and not container.problem():
        done = container.in_container(
            f"cd {REPO} && " + " ".join(map(container.q, command)),
            {},
            tmp_path / "ns",
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            docker=False,
            seen=[tmp_path],
        )
    else:
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO))
        )
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(line[len("RESULT ") :])
    network, hog, after = result["cells"]
    if level != "rlimits":  # resource limits alone leave the network as the machine has it
        assert network[0]["text"].strip() == "network: blocked"
    assert any(o.get("ename") == "MemoryError" for o in hog)
    assert "Memory limit" in "".join(o.get("text", "") for o in hog)
    assert after[0]["text"].strip() == "still alive"
    assert result["events"] == ["memory"]
    assert "Grading notes" in result["notes"]


def test_a_quiet_boxs_stderr_stays_in_its_private_folder(tmp_path, capfd):
    """A kernel's stderr (a traceback if it dies while starting) never mixes into the grader's output."""
    import subprocess
    import sys

    level = sandbox.probe()[0]
    private = tmp_path / "private"
    (private / "work").mkdir(parents=True)
    spec = sandbox.BoxSpec(
        level=level,
        memory_mb=2048,
        cwd=str(private / "work"),
        private_dir=str(private),
        readable=sandbox.python_paths(),
        quiet=True,
    )
    done = subprocess.run(
        [
            sys.executable,
            sandbox.__file__,
            spec.to_json(),
            "--",
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('kernel noise')",
        ],
        timeout=120,
    )
    assert done.returncode == 0
    assert "kernel noise" not in capfd.readouterr().err
    assert "kernel noise" in (private / "stderr.log").read_text()


def test_grading_groups_keep_their_order_and_budgets():
    from autograder.grade import grade

    spec = [{"students": ["a", "b"]}, {"students": ["c"], "budgets": {"PAGED_KV_CELL_TIMEOUT": "5"}}]
    assert grade.parse_groups(json.dumps(spec)) == [(["a", "b"], {}), (["c"], {"PAGED_KV_CELL_TIMEOUT": "5"})]


@pytest.mark.parametrize(
    "text, says",
    [
        ("[{", "not JSON"),
        ('{"students": ["a"]}', "must be a list"),
        ('[{"students": []}]', "non-empty list"),
        ('[{"students": ["a"], "budgets": {"PATH": "/tmp"}}]', "may only set"),
        ('[{"students": ["a"], "budgets": {"PAGED_KV_CELL_TIMEOUT": "five"}}]', "whole numbers"),
    ],
)
def test_grading_groups_refuse_what_they_cannot_use(text, says):
    from autograder.grade import grade

    with pytest.raises(SystemExit, match=says):
        grade.parse_groups(text)


def test_the_sweep_removes_only_cgroups_whose_grader_is_gone():
    """Two graders on one machine: one's sweep must not remove the other's new (still empty) cgroup."""
    import subprocess as sp

    from autograder.box import limits

    if os.geteuid() != 0 or not limits.cgroup_version():
        pytest.skip("needs root and cgroups")
    dead = sp.Popen(["true"])
    dead.wait()
    budget = limits.Budget(256, 64, 1.0, 16)
    mine = limits.Cgroup(limits.cgroup_name(), budget)
    gone = limits.Cgroup(f"pkv-{dead.pid}-{'0' * 12}", budget)
    try:
        limits.sweep_stale_cgroups()
        assert all(p.exists() for p in mine.paths), "the sweep removed a live grader's empty cgroup"
        assert not any(p.exists() for p in gone.paths), "the sweep kept a dead grader's empty cgroup"
    finally:
        mine.destroy()
        gone.destroy()


KEYRING_PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = libc.syscall({add_key}, b"user", b"pkv-left-for-the-next-student", b"the marker", 4, -3)
err_add = ctypes.get_errno()
found = libc.syscall({request_key}, b"user", b"pkv-left-for-the-next-student", None, -3)
err_find = ctypes.get_errno()
print("KEYS", made, os.strerror(err_add), found, os.strerror(err_find))
"""


def test_no_box_can_leave_a_key_for_the_next_student(tmp_path):
    """The kernel keyring is shared by every process of a uid and not namespaced: every box refuses add_key,
    keyctl and request_key (autograder.box.seccomp), so a key cannot be left in one box and read in the next
    box given the same uid."""
    import subprocess
    import sys

    from autograder.box import limits, seccomp

    if not seccomp.supported():
        pytest.skip("no seccomp numbers for this architecture")
    numbers = seccomp.ARCHES[__import__("platform").machine()].numbers
    code = KEYRING_PROBE.format(add_key=numbers["add_key"], request_key=numbers["request_key"])
    level = sandbox.probe()[0]
    answers = []
    for run in range(2):  # the same uid twice, as the next kernel usually gets it
        allocation = limits.Allocation(limits.Budget(ram_mb=1024, pids=64, scratch_mb=16))
        try:
            work = Path(allocation.folder) / "work"
            work.mkdir()
            uid = allocation.uid if not sandbox.own_uid_problem(level, sandbox.python_paths()) else None
            spec = sandbox.BoxSpec(
                level=level,
                memory_mb=1024,
                cwd=str(work),
                private_dir=allocation.folder,
                readable=sandbox.python_paths(),
                quiet=False,
                uid=uid,
                cgroup=allocation.cgroup_paths,
            )
            done = subprocess.run(
                [sys.executable, sandbox.__file__, spec.to_json(), "--", sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            allocation.release()
        answers.append(next(l for l in done.stdout.splitlines() if l.startswith("KEYS")))
    for answer in answers:
        assert answer.split()[1] == "-1" and "Operation not permitted" in answer, answer
        assert " -1 Operation not permitted" in answer.split("permitted", 1)[1], answer


def test_the_cross_part_attack_earns_its_part_wherever_it_reaches_the_reference():
    """The red team's lab 05 cross-part delegation (``box_attacks.cross_part_attack``), run as a plain notebook where the
    whole package is at hand: its register part passes its visible and hidden tests. So the 0 it gets when graded
    (the class simulation) comes from the boxes, not from an attack that never worked."""
    import sys

    from autograder.course.notebook_client import NotebookClient

    from autograder.proof import classroom, report

    sys.path.insert(0, str(Path(__file__).parent))
    import box_attacks

    info = classroom.load_lab(box_attacks.CROSS_PART_LAB, report.REPO / "solutions", report.REPO / "course")
    [(_, nb)] = box_attacks.cross_part_attack(info)
    nb = nbformat.reads(json.dumps(nb), as_version=4)
    try:
        NotebookClient(
            nb,
            timeout=120,
            allow_errors=True,
            kernel_name="python3",
            resources={"metadata": {"path": str(report.REPO / "solutions" / box_attacks.CROSS_PART_LAB)}},
        ).execute()
    finally:  # what it served as files (0666, this account's): a channel the box's probe would refuse below bwrap
        for folder in ("/tmp", "/dev/shm"):
            Path(folder, "pkv-cross-part-05").unlink(missing_ok=True)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in box_attacks.CROSS_PART_CELLS:
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert errors == [], errors[0].get("evalue") if errors else ""


def test_a_killed_process_not_yet_reaped_is_not_a_live_process_of_its_uid():
    """Releasing a kernel waits until no task of its uid is alive; a zombie (killed, its parent has not reaped it
    yet) runs nothing, so it does not count: the release does not wait for the reaping."""
    import signal
    import subprocess
    import time

    from autograder.box import uids

    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in uids.live_tasks_of(os.getuid())
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "\nState:\tZ" not in open(f"/proc/{child.pid}/status").read() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.pid not in uids.live_tasks_of(os.getuid())
    finally:
        child.kill()
        child.wait()
