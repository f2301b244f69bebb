"""Collecting from nbgrader's exchange never follows a link and never reads as root what a student names.

Real local accounts (``hub.accounts``, so root only) own an exchange laid out with nbgrader's modes
(``inbound/`` 2733, a submission folder 0777 and its files 0644, each the student's). One student submits
honestly; the others submit, as their notebook, a symbolic link to a root-only "solution" (in a 0700
folder of root's), to the honest student's inbound notebook and to ``/etc/shadow``, a hard link to the
honest student's notebook, and a notebook they made unreadable even to themselves (root could read it;
the collector, reading as the student, cannot). Each is refused and noted, the honest student is
collected, and no root-only byte lands anywhere in the course folder. A second test runs the real
``hub-grade`` step (collect, grade, ``nbgrader release_feedback``) on a smaller class.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

import nbformat
import pytest

from autograder.proof import report
from autograder.collect import collect
from autograder.exchange import exchange, inbound
from hub import accounts
from hub.layout import COURSE_ID, DEMO_PASSWORD, Layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real local accounts and uids: root only")

ROOT = Path(__file__).resolve().parents[2]
LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
WHEN = "2026-03-01 10:00:00.000000 UTC"
ROLES = ("honest", "to-solution", "to-peer", "to-shadow", "hard-link", "unreadable")


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    """``{role: account}`` of real local accounts made for this module (a random prefix: other test runs
    on this machine make their own), removed afterwards with their homes."""
    layout = Layout(tmp_path_factory.mktemp("accounts"), "c" + secrets.token_hex(2) + "-")
    names = layout.students(len(ROLES))
    accounts.ensure_accounts(layout, names, DEMO_PASSWORD)
    try:
        yield {role: pwd.getpwnam(name) for role, name in zip(ROLES, names)}
    finally:
        accounts.remove_accounts(layout)


def _marked_solution(marker: str) -> bytes:
    nb = nbformat.read(ROOT / "solutions" / LAB / NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(marker))
    return nbformat.writes(nb).encode()


def _submit(inbound_dir: Path, account, files: Dict[str, object]) -> Path:
    """A submission folder as ``nbgrader submit`` leaves it (0777, files 0644, the student's), with
    ``files``: bytes for a file, a ``Path`` for a symbolic link to it, ``("hard", Path)`` for a hard link."""
    folder = inbound_dir / f"{account.pw_name}+{LAB}+{WHEN}+{secrets.token_hex(4)}"
    folder.mkdir()
    made = dict(files, **{"timestamp.txt": WHEN.encode(), "submission_secret.txt": secrets.token_hex(64).encode()})
    for name, content in made.items():
        path = folder / name
        if isinstance(content, Path):
            path.symlink_to(content)
        elif isinstance(content, tuple):
            os.link(content[1], path)
            continue  # a hard link keeps its file's owner and mode
        else:
            path.write_bytes(content)
            path.chmod(0o644)
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    os.chown(folder, account.pw_uid, account.pw_gid)
    folder.chmod(0o777)
    return folder


def _exchange(base: Path) -> Path:
    """An exchange root (0777) with the course's ``inbound/`` (2733) as nbgrader 0.9.6 makes them."""
    root = base / "exchange"
    (root / COURSE_ID / "inbound").mkdir(parents=True)
    root.chmod(0o777)
    (root / COURSE_ID).chmod(0o755)
    (root / COURSE_ID / "inbound").chmod(0o2733)
    return root


@pytest.fixture(scope="module")
def secrets_on_disk(tmp_path_factory):
    """A root-only "solution" (a 0700 folder of root's) with a marker no submission may carry, and the
    first line of ``/etc/shadow``."""
    private = tmp_path_factory.mktemp("private")
    private.chmod(0o700)
    marker = "ROOT-ONLY-" + secrets.token_hex(8)
    solution = private / NOTEBOOK
    solution.write_bytes(_marked_solution(marker))
    solution.chmod(0o600)
    shadow = Path("/etc/shadow").read_bytes().splitlines()[0]
    return {"solution": solution, "marker": marker.encode(), "shadow": shadow}


def _bytes_in_tree(folder: Path, needle: bytes) -> list:
    return [str(p) for p in folder.rglob("*") if not p.is_symlink() and p.is_file() and needle in p.read_bytes()]


def test_links_and_files_a_student_could_not_give_are_refused_and_the_honest_student_is_collected(
    tmp_path, people, secrets_on_disk
):
    base = tmp_path / "hub"
    base.mkdir()
    root = _exchange(base)
    inbound_dir = root / COURSE_ID / "inbound"
    honest_marker = "HONEST-" + secrets.token_hex(8)
    honest = _submit(inbound_dir, people["honest"], {NOTEBOOK: _marked_solution(honest_marker)})
    _submit(inbound_dir, people["to-solution"], {NOTEBOOK: secrets_on_disk["solution"]})
    _submit(inbound_dir, people["to-peer"], {NOTEBOOK: honest / NOTEBOOK})
    _submit(inbound_dir, people["to-shadow"], {NOTEBOOK: Path("/etc/shadow")})
    _submit(inbound_dir, people["hard-link"], {NOTEBOOK: ("hard", honest / NOTEBOOK)})
    unreadable = _submit(inbound_dir, people["unreadable"], {NOTEBOOK: b"{}"})
    (unreadable / NOTEBOOK).chmod(0)  # its owner cannot read it; root could

    course = tmp_path / "course-root"
    found = inbound.collect_inbound(root, COURSE_ID, LAB, course / exchange.INBOX)
    records = {
        r["student"]: r
        for r in collect.write_submissions(LAB, found, course, ROOT / "course", NOTEBOOK, keep=exchange.EXCHANGE_FILES)
    }

    name = {role: account.pw_name for role, account in people.items()}
    assert [f.name for f in found[name["honest"]].files] == sorted([NOTEBOOK, *exchange.EXCHANGE_FILES])
    assert found[name["honest"]].refused == []
    why = {
        "to-solution": "symbolic link",
        "to-peer": "symbolic link",
        "to-shadow": "symbolic link",
        "hard-link": "belongs to another account",
        "unreadable": "Permission denied",
    }
    for role, reason in why.items():
        refused = found[name[role]].refused
        assert len(refused) == 1 and refused[0][0].endswith("/" + NOTEBOOK) and reason in refused[0][1], refused
        assert records[name[role]]["file"] == "(none)"
        assert ("refused-entry", f"{refused[0][0]}: {refused[0][1]}") in records[name[role]]["repairs"]
        graded = nbformat.read(course / "autograder" / "work" / "submitted" / name[role] / LAB / NOTEBOOK, 4)
        assert "was not collected" in graded.cells[0].source and reason in graded.cells[0].source
        # The exchange's files are still there, so that feedback can be released to them.
        assert (course / "autograder" / "work" / "submitted" / name[role] / LAB / "submission_secret.txt").exists()
    submitted = course / "autograder" / "work" / "submitted" / name["honest"] / LAB / NOTEBOOK
    assert honest_marker in submitted.read_text()
    for needle in (secrets_on_disk["marker"], secrets_on_disk["shadow"]):
        assert _bytes_in_tree(course, needle) == []
    for role in ("to-peer", "hard-link"):
        assert _bytes_in_tree(course / "autograder" / "work" / "submitted" / name[role], honest_marker.encode()) == []


def test_a_newer_link_in_place_of_a_submission_folder_is_refused_and_the_folder_is_collected(tmp_path, people):
    root = _exchange(tmp_path)
    inbound_dir = root / COURSE_ID / "inbound"
    account = people["honest"]
    _submit(inbound_dir, account, {NOTEBOOK: b'{"cells": []}'})
    link = inbound_dir / f"{account.pw_name}+{LAB}+2026-03-02 10:00:00.000000 UTC+ffff"
    link.symlink_to(tmp_path)
    os.chown(link, account.pw_uid, account.pw_gid, follow_symlinks=False)
    found = inbound.collect_inbound(root, COURSE_ID, LAB, tmp_path / "inbox")[account.pw_name]
    assert [f.name for f in found.files] == sorted([NOTEBOOK, *exchange.EXCHANGE_FILES])
    assert found.refused == [(link.name, "it is a symbolic link, not a folder")]


def test_the_hub_grading_step_grades_the_honest_student_and_releases_feedback_to_the_refused_ones(
    tmp_path, people, secrets_on_disk
):
    """``python -m autograder.exchange.exchange grade`` (what ``make hub-grade`` runs), on four students."""
    from nbgrader.utils import notebook_hash

    root = _exchange(tmp_path)
    inbound_dir = root / COURSE_ID / "inbound"
    honest = _submit(inbound_dir, people["honest"], {NOTEBOOK: _marked_solution("honest")})
    folders = {
        "honest": honest,
        "to-solution": _submit(inbound_dir, people["to-solution"], {NOTEBOOK: secrets_on_disk["solution"]}),
        "to-peer": _submit(inbound_dir, people["to-peer"], {NOTEBOOK: honest / NOTEBOOK}),
        "to-shadow": _submit(inbound_dir, people["to-shadow"], {NOTEBOOK: Path("/etc/shadow")}),
    }
    course = report.prepare_root(tmp_path / "course-root")
    env = dict(os.environ, PAGED_KV_COURSE_ROOT=str(course), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autograder.exchange.exchange",
            "--exchange",
            str(root),
            "--course-id",
            COURSE_ID,
            "grade",
            LAB,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    name = {role: people[role].pw_name for role in folders}
    for role in ("to-solution", "to-peer", "to-shadow"):
        assert f"refused for {name[role]}: " in done.stderr and "symbolic link" in done.stderr
    work = course / "autograder" / "work"
    with open(work / "reports" / "grades.csv", newline="") as handle:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle) if r["assignment"] == LAB}
    assert scores == {name["honest"]: 10.0, name["to-solution"]: 0.0, name["to-peer"]: 0.0, name["to-shadow"]: 0.0}
    with open(work / "reports" / LAB / "log.csv", newline="") as handle:
        refusals = {r["student_id"]: r["detail"] for r in csv.DictReader(handle) if r["kind"] == "refused-entry"}
    assert set(refusals) == {name["to-solution"], name["to-peer"], name["to-shadow"]}
    assert all("symbolic link" in detail for detail in refusals.values())
    for role, folder in folders.items():
        secret = (folder / "submission_secret.txt").read_text()
        released = root / COURSE_ID / "feedback" / f"{notebook_hash(secret=secret, notebook_id=NOTEBOOK[:-6])}.html"
        assert released.exists(), f"no feedback released to {role}"
        if role != "honest":
            assert "was not collected" in released.read_text()
    for needle in (secrets_on_disk["marker"], secrets_on_disk["shadow"]):
        assert _bytes_in_tree(course, needle) == []


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a second file system (/dev/shm)")
def test_a_forged_folder_set_aside_across_file_systems_is_copied_as_its_owner_not_as_root(tmp_path, people):
    """A forged folder (named after the honest student, made by another) that holds a hard link to a root-only
    file and a link to ``/etc/shadow``: moved to the quarantine on another file system, only its maker's own
    file goes with it."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        if os.stat(base).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system as the quarantine here")
        private = base / "private"
        private.mkdir(mode=0o700)
        (private / "secret").write_bytes(b"ROOT-ONLY-" + secrets.token_hex(8).encode())
        (private / "secret").chmod(0o600)
        root = _exchange(base)
        forger = people["to-peer"]
        folder = _submit(
            root / COURSE_ID / "inbound",
            forger,
            {NOTEBOOK: b"{}", "shadow": Path("/etc/shadow"), "hard": ("hard", private / "secret")},
        )
        forged_name = folder.name.replace(forger.pw_name, people["honest"].pw_name, 1)
        folder.rename(folder.parent / forged_name)
        quarantine = tmp_path / "quarantine"
        assert exchange.set_aside_forged(root, COURSE_ID, LAB, quarantine) == {forged_name: forger.pw_name}
        assert sorted(p.name for p in (quarantine / forged_name).iterdir()) == sorted(
            [NOTEBOOK, *exchange.EXCHANGE_FILES]
        )
        assert not (root / COURSE_ID / "inbound" / forged_name).exists()
        for needle in ((private / "secret").read_bytes(), Path("/etc/shadow").read_bytes().splitlines()[0]):
            assert _bytes_in_tree(quarantine, needle) == []
    finally:
        shutil.rmtree(base)


# --- the Kubernetes hub (deploy/): students are pod uids with no account, the grader is no root -------------

POD_GRADER, POD_UIDS = 41000, {"pkv-ada": 20007, "pkv-bob": 20008, "pkv-cy": 20009}  # uids no account has here

COLLECT_AS_GRADER = """
import json, os, sys
sys.path.insert(0, {repo!r})
from autograder.exchange import exchange, inbound  # imported first: this interpreter may be root's alone
import nbgrader.utils
os.setgroups([]); os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid})
found = inbound.collect_inbound({root!r}, {course!r}, {lab!r}, {inbox!r})
print(json.dumps({{"forged": exchange.forged_submissions({root!r}, {course!r}, {lab!r}),
                  "found": {{s: [[f.name for f in v.files], v.refused] for s, v in found.items()}}}}))
"""


def _pod_submission(inbound_dir: Path, student: str, uid: int, notebook: bytes) -> Path:
    folder = inbound_dir / f"{student}+{LAB}+{WHEN}+{secrets.token_hex(4)}"
    folder.mkdir()
    for name, content in ((NOTEBOOK, notebook), ("timestamp.txt", WHEN.encode())):
        (folder / name).write_bytes(content)
        (folder / name).chmod(0o644)
        os.chown(folder / name, uid, uid)
    folder.chmod(0o755)  # as nbgrader submit leaves it for the instructor to read
    os.chown(folder, uid, uid)
    return folder


def test_on_the_kubernetes_hub_the_uid_registry_names_each_pod_user_and_the_grader_needs_no_root():
    """The hub's hook writes hub-uids/<uid> (deploy/z2jh-values.yaml); the grader runs as the course folder's
    owner, no root. Ada's own submission is collected (the registry names uid 20007 "pkv-ada"; /etc/passwd
    knows none of these uids). A folder Ada made under Bob's name is forged, owned by "pkv-ada". Cy wrote her
    own registry entry (not the course owner's file): not trusted, so her submission is owned by a bare uid."""
    base = Path(tempfile.mkdtemp(prefix="pkv-pod-exchange-"))
    try:
        base.chmod(0o755)
        root = _exchange(base)
        course = root / COURSE_ID
        registry = course / "hub-uids"
        registry.mkdir(mode=0o755)
        for name, uid in POD_UIDS.items():
            (registry / str(uid)).write_text(name + "\n")
            os.chown(registry / str(uid), POD_GRADER if name != "pkv-cy" else uid, 100)
        for path in (course, course / "inbound", registry):
            os.chown(path, POD_GRADER, 100)
        inbound_dir = course / "inbound"
        ada = _pod_submission(inbound_dir, "pkv-ada", POD_UIDS["pkv-ada"], _marked_solution("ada"))
        as_bob = _pod_submission(inbound_dir, "pkv-bob", POD_UIDS["pkv-ada"], b"{}")
        cy = _pod_submission(inbound_dir, "pkv-cy", POD_UIDS["pkv-cy"], b"{}")
        inbox = base / "grader" / "inbox"
        inbox.parent.mkdir()
        os.chown(inbox.parent, POD_GRADER, 100)
        script = COLLECT_AS_GRADER.format(
            uid=POD_GRADER, repo=str(ROOT), root=str(root), course=COURSE_ID, lab=LAB, inbox=str(inbox)
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["forged"] == {as_bob.name: "pkv-ada", cy.name: f"uid {POD_UIDS['pkv-cy']}"}
        assert result["found"] == {"pkv-ada": [[NOTEBOOK, "timestamp.txt"], []]}
        assert (inbox / "pkv-ada" / LAB / NOTEBOOK).read_bytes() == (ada / NOTEBOOK).read_bytes()
    finally:
        shutil.rmtree(base, ignore_errors=True)
