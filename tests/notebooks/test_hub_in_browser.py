"""A class on the course hub, in Debian's Chromium: what `make hub`, `make hub-release` and `make hub-grade` do.

One run (the ``class_run`` fixture) starts the hub with two students, releases lab 02, and then:

1. each student logs in for the first time and sees what a new student sees (the Assignments tab, lab 02
   in it, no question about Jupyter news), opens Nbgrader > Assignment List, fetches lab 02, types an
   answer (student 1 the solution, student 2 the solution with the floor bug), saves, validates and submits;
2. the instructor's grading runs (``python -m hub grade``: the exchange, the repair, hardened grading);
3. each student fetches feedback in the Assignments tab and opens it;
4. the instructor opens Formgrader, and its Autograde button answers with `make hub-grade`.

The tests then check the first screen, the scores (gradebook and feedback), that feedback shows no hidden
test, that no student reaches another's files or the instructor's course folder (through the hub, and as
that user on the machine), that the idle culler runs and the hub's log has no JupyterEventsVersionWarning,
and that cleaning up leaves no account, home, process or folder. Screenshots go to ``test-artifacts/hub/``.
Root only (it makes local accounts).

Every user gets the roles' own JupyterLab settings (``hub.roles``: no news question, no update check); the
test adds only what its own mechanics need (``HUB_TEST_SETTINGS``: no autosave, every cell in the page, no
extension manager), so what it sees of news is what users see.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import nbformat
import pytest

from autograder.course.notebook import BEGIN, END
from chromium import LAUNCH_ARGS, chromium_or_reason
from hub_class import Hub, leftovers, login, running_hub
from jupyterlab_driver import NotebookPage
from lab_server import ROOT, TEST_SETTINGS

from hub.feedback_policy import FEEDBACK_POLICY  # the header on the feedback a student fetched

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hub makes local accounts: root only")
sync_api = pytest.importorskip("playwright.sync_api")

LAB, NOTEBOOK = "02-atomic-prefill", "atomic_prefill.ipynb"
ANSWER_CELL = 5
MAX_SCORE = 10.0
CEIL, FLOOR = "needed = -(-req.seq_len // self.block_size)", "needed = req.seq_len // self.block_size"
HIDDEN_CODE = ("check_block_count", "lab02_prefill", BEGIN.removeprefix("### "))
ARTIFACTS = ROOT / "test-artifacts" / "hub"
NEWS = "official Jupyter news"  # JupyterLab's question: "Would you like to get notified about official Jupyter news?"
NEWS_WAIT_S = 5  # JupyterLab asks it right after it restores its layout and loads the settings
# The browser test's own user settings, less the notification settings: those are the roles' (hub.roles).
HUB_TEST_SETTINGS = {
    plugin: values
    for plugin, values in TEST_SETTINGS.items()
    if not plugin.startswith("@jupyterlab/apputils-extension/notification")
}


def answers() -> Dict[str, str]:
    """The right answer (the solution without nbgrader's markers) and a wrong one (floor, not ceiling)."""
    source = nbformat.read(ROOT / "solutions" / LAB / NOTEBOOK, as_version=4).cells[ANSWER_CELL].source
    right = "\n".join(line for line in source.splitlines() if "### " not in line)
    assert CEIL in right, "lab 02's solution changed: update CEIL"
    return {"right": right, "wrong": right.replace(CEIL, FLOOR)}


@dataclass
class ClassRun:
    hub: Hub = None
    seconds: Dict[str, float] = field(default_factory=dict)
    validate_text: Dict[str, str] = field(default_factory=dict)
    feedback_html: Dict[str, str] = field(default_factory=dict)
    feedback_policy: Dict[str, str] = field(default_factory=dict)
    feedback_tabs: Dict[str, List[str]] = field(default_factory=dict)  # per user: tabs opened by "(view feedback)"
    menu_items: List[str] = field(default_factory=list)
    first_screen: Dict[str, dict] = field(default_factory=dict)
    news: Dict[str, List[str]] = field(default_factory=dict)  # per user: toasts and text that ask about news
    formgrader_autograde: str = ""
    gradebook_after_formgrader: Dict[str, float] = field(default_factory=dict)
    culler: List[str] = field(default_factory=list)
    hub_log: str = ""
    grade_output: str = ""
    gradebook: Dict[str, float] = field(default_factory=dict)
    cross_requests: Dict[str, int] = field(default_factory=dict)
    own_formgrader: Dict[str, int] = field(default_factory=dict)
    as_user_reads: Dict[str, str] = field(default_factory=dict)
    open_link: Dict[str, str] = field(default_factory=dict)  # make hub started while a build output is open
    student_package: str = ""
    full_package: str = ""
    formgrader_text: str = ""
    left_after_cleanup: List[str] = field(default_factory=list)


class HubNotebook(NotebookPage):
    """A notebook already open in ``page`` (the student opened it from the Assignments tab)."""

    def __init__(self, page, home: Path, path: str):  # (no super().__init__: it would navigate)
        self.page, self.root, self.path = page, home, path
        self.notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
        self.cells = self.notebook.locator(".jp-Cell")
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).some(e => /\\| Idle/.test(e.textContent))",
            timeout=120_000,
        )


def _assignments(page):
    page.click(".lm-MenuBar-item >> text=Nbgrader")
    page.click(".lm-Menu-item >> text=Assignment List")
    page.wait_for_selector("#released_assignments_list", timeout=30_000)


def _news_asked(page) -> List[str]:
    """After JupyterLab has had time to ask: every toast, and the page's text, that mention Jupyter news."""
    time.sleep(NEWS_WAIT_S)
    toasts = [t for t in page.locator(".Toastify__toast").all_inner_texts() if NEWS in t]
    return toasts + ([f"page text: ...{NEWS}..."] if NEWS in page.inner_text("body") and not toasts else [])


def _first_screen(page, user: str, run: ClassRun) -> None:
    """What a student sees on first login, before touching anything."""
    page.locator("#released_assignments_list .list_item", has_text=LAB).first.wait_for(timeout=60_000)
    run.news[user] = _news_asked(page)
    run.first_screen[user] = {
        "tabs": [t.strip() for t in page.locator("#jp-main-dock-panel .lm-TabBar-tab").all_inner_texts()],
        "current": [
            t.strip() for t in page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").all_inner_texts()
        ],
        "released": page.locator("#released_assignments_list .list_item").all_inner_texts(),
        "fetch_buttons": page.locator("#released_assignments_list button", has_text="Fetch").count(),
    }
    page.screenshot(path=str(ARTIFACTS / f"{user}-first-screen.png"))


def _student_submits(browser, hub: Hub, user: str, answer: str, run: ClassRun) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = login(context, hub, user)
    _first_screen(page, user, run)
    page.click(".lm-MenuBar-item >> text=Nbgrader")
    run.menu_items = [t.strip() for t in page.locator(".lm-Menu-item:visible").all_inner_texts() if t.strip()]
    page.keyboard.press("Escape")
    _assignments(page)
    page.locator("#released_assignments_list .list_item", has_text=LAB).locator("button", has_text="Fetch").click()
    fetched = page.locator("#fetched_assignments_list .list_item", has_text=LAB).first
    fetched.wait_for(timeout=60_000)
    fetched.locator("a.assignment-notebooks-link").click()
    page.locator("#fetched_assignments_list a", has_text=NOTEBOOK[: -len(".ipynb")]).click()
    notebook = HubNotebook(page, hub.home(user), f"{LAB}/{NOTEBOOK}")
    notebook.type_into(ANSWER_CELL, answer)
    notebook.save()
    page.screenshot(path=str(ARTIFACTS / f"{user}-answer.png"))
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=120_000)
    page.wait_for_function("() => !/Validating/.test(document.querySelector('.jp-Dialog').innerText)", timeout=120_000)
    run.validate_text[user] = dialog.inner_text()
    page.screenshot(path=str(ARTIFACTS / f"{user}-validate.png"))
    page.locator(".jp-Dialog .jp-mod-accept").first.click()
    page.click(".lm-TabBar-tab >> text=Assignments")
    page.locator("#fetched_assignments_list .list_item", has_text=LAB).locator(
        "button", has_text="Submit"
    ).first.click()
    page.locator("#submitted_assignments_list .list_item", has_text=LAB).first.wait_for(timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / f"{user}-submitted.png"))
    context.close()


def _student_reads_feedback(browser, hub: Hub, user: str, other: str, run: ClassRun) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = login(context, hub, user)
    _assignments(page)
    page.locator("#submitted_assignments_list .list_item", has_text=LAB).locator(
        "button", has_text="Fetch Feedback"
    ).first.click()
    page.locator("#submitted_assignments_list a", has_text="view feedback").first.wait_for(timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / f"{user}-feedback-fetched.png"))
    # One click on "(view feedback)" opens the page itself (hub/feedback_link), not only its folder.
    page.locator("#submitted_assignments_list a", has_text="view feedback").first.click()
    opened = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tabLabel", has_text=".html")
    try:
        opened.first.wait_for(timeout=30_000)
    except Exception:  # noqa: BLE001 - recorded; the test below names what was open instead
        pass
    run.feedback_tabs[user] = [
        t.strip() for t in page.locator(".lm-DockPanel-tabBar .lm-TabBar-tabLabel").all_inner_texts()
    ]
    page.screenshot(path=str(ARTIFACTS / f"{user}-view-feedback-clicked.png"))
    found = sorted((hub.home(user) / LAB / "feedback").glob(f"*/{NOTEBOOK[: -len('.ipynb')]}.html"))
    assert found, f"{user}: no feedback file after Fetch Feedback"
    relative = found[-1].relative_to(hub.home(user))
    feedback = context.new_page()
    response = feedback.goto(f"{hub.url}/user/{user}/files/{relative}")
    run.feedback_policy[user] = (response.headers.get("content-security-policy") or "") if response else ""
    run.feedback_html[user] = feedback.content()
    feedback.screenshot(path=str(ARTIFACTS / f"{user}-feedback.png"), full_page=False)
    run.own_formgrader[user] = page.request.get(f"{hub.url}/user/{user}/formgrader", max_redirects=0).status
    # Requests as this student for the other student's and the instructor's servers.
    for target in (other, hub.instructor):
        answer = page.request.get(f"{hub.url}/user/{target}/api/contents/{LAB}/{NOTEBOOK}", max_redirects=0)
        run.cross_requests[f"{user}->{target}"] = answer.status
    context.close()


def _instructor_opens_formgrader(browser, hub: Hub, run: ClassRun) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = login(context, hub, hub.instructor)
    run.news[hub.instructor] = _news_asked(page)
    page.goto(f"{hub.url}/user/{hub.instructor}/formgrader/manage_assignments")
    page.wait_for_selector("text=" + LAB, timeout=60_000)
    run.formgrader_text = page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / "instructor-formgrader.png"))
    # Formgrader's own Autograde button, on the first student's submission: refused, naming make hub-grade.
    page.goto(f"{hub.url}/user/{hub.instructor}/formgrader/manage_submissions/{LAB}")
    page.locator("tr", has_text=hub.students[0]).locator(".autograde a").first.click(timeout=60_000)
    dialog = page.locator("#error-modal")
    dialog.wait_for(state="visible", timeout=60_000)
    run.formgrader_autograde = dialog.inner_text()
    page.wait_for_timeout(1000)  # Bootstrap's fade-in, for the screenshot
    page.screenshot(path=str(ARTIFACTS / "instructor-formgrader-autograde.png"))
    context.close()


def _culler_processes() -> List[str]:
    """The command lines of running jupyterhub_idle_culler processes (the hub's service)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if b"jupyterhub_idle_culler" in words:
            found.append(" ".join(w.decode(errors="replace") for w in words if w))
    return found


def _read_as(user: str, path: Path) -> str:
    """What ``user`` gets when reading ``path`` on the machine: 'read', or the error's name."""
    done = subprocess.run(
        ["runuser", "-u", user, "--", "cat" if path.suffix else "ls", str(path)], capture_output=True, text=True
    )
    return "read" if done.returncode == 0 else ("denied" if "ermission denied" in done.stderr else done.stderr.strip())


def _package_of(user: str, folder: Path) -> str:
    """Which edition of the course package ``user``'s servers and kernels import (their PYTHONPATH)."""
    done = subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            "env",
            f"PYTHONPATH={folder / 'package'}",
            str(folder / "runtime" / "bin" / "python"),
            "-c",
            "import paged_kv.cache.edition as e; print(e.LAB)",
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    return done.stdout.strip() or done.stderr.strip()


# A student's cell that takes the edition off its path and imports the course package through the course
# environment (its editable install points at the checkout): the reference of the open lab's TODO, if it gets one.
FULL_PACKAGE = """
import sys
sys.path[:] = [p for p in sys.path if "package" not in p]
for name in [m for m in sys.modules if m.startswith("paged_kv")]:
    del sys.modules[name]
try:
    from paged_kv.cache.manager import KVCacheManager
    import inspect
    print("reference:", "TodoNotWritten" not in inspect.getsource(KVCacheManager.allocate_for_prefill))
except Exception as error:
    print("refused:", type(error).__name__)
"""


def _full_package_of(user: str, folder: Path) -> str:
    """What ``user``'s kernel gets when it reaches past its edition for the whole package."""
    done = subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            "env",
            f"PYTHONPATH={folder / 'package'}",
            str(folder / "runtime" / "bin" / "python"),
            "-c",
            FULL_PACKAGE,
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    return done.stdout.strip() or done.stderr.strip()[-300:]


# dist/ as `make gradescope` wrote it before issue 47: folders 0755, a file 0644 holding the hidden tests.
PLANTED = ROOT / "dist" / "pkvt-hub-test" / "course" / "solutions" / LAB / NOTEBOOK
HIDDEN_TEXT = f"{BEGIN}\ncheck_block_count()\n{END}\n"


def _plant_build_output() -> List[Path]:
    """``PLANTED`` and its folders, open to every account (what the hub must close although it is open); the
    paths to remove afterwards (``dist/`` itself when it was not there)."""
    made = [] if PLANTED.parents[4].exists() else [PLANTED.parents[4]]
    PLANTED.parent.mkdir(parents=True, exist_ok=True)
    PLANTED.write_text(HIDDEN_TEXT)
    os.chmod(PLANTED, 0o644)
    for folder in PLANTED.parents[:5]:
        os.chmod(folder, 0o755)
    return made + [PLANTED.parents[3]]


def _remove(paths: List[Path]) -> None:
    for path in reversed(paths):
        shutil.rmtree(path, ignore_errors=True)


def _refused_while_a_link_is_open(student: str) -> Dict[str, str]:
    """A build output kept elsewhere and linked at the checkout's top (``dist-pkvt-hub-test``, a folder every account
    reads): what ``student`` reads through it, and what ``python -m hub up`` says (it cannot close a link)."""
    outside = Path(tempfile.mkdtemp(prefix="pkvt-open-dist-", dir="/tmp"))
    os.chmod(outside, 0o755)
    (outside / NOTEBOOK).write_text(HIDDEN_TEXT)
    os.chmod(outside / NOTEBOOK, 0o644)
    link, folder = ROOT / "dist-pkvt-hub-test", outside / "hub"
    link.symlink_to(outside)
    try:
        read = _read_as(student, link / NOTEBOOK)
        done = subprocess.run(
            [sys.executable, "-m", "hub", "--dir", str(folder), "--prefix", "pkvt-", "up", "--students", "1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        link.unlink()
        shutil.rmtree(outside)
    return {
        "student reads through the link": read,
        "returncode": str(done.returncode),
        "said": done.stdout + done.stderr,
        "hub folder made": str(folder.exists()),
    }


def _gradebook_scores(hub: Hub) -> Dict[str, float]:
    from nbgrader.api import Gradebook

    db = hub.home(hub.instructor) / "paged-kv-course" / "autograder" / "work" / "gradebook.db"
    with Gradebook(f"sqlite:///{db}") as gb:
        return {s: gb.find_submission(LAB, s).score for s in hub.students}


@pytest.fixture(scope="module")
def class_run(tmp_path_factory) -> ClassRun:
    chromium, reason = chromium_or_reason(tmp_path_factory.mktemp("apt") / "apt.log")
    if chromium is None:
        pytest.skip(reason)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    run, started = ClassRun(), time.monotonic()
    log = ARTIFACTS / "jupyterhub.log"
    planted = _plant_build_output()
    with contextlib.ExitStack() as undo:
        undo.callback(_remove, planted)
        hub = undo.enter_context(running_hub(2, log, settings=HUB_TEST_SETTINGS))
        run.hub = hub
        run.seconds["hub up"] = time.monotonic() - started
        released = hub.step("release", LAB)
        assert released.returncode == 0, released.stdout + released.stderr
        run.seconds["released"] = time.monotonic() - started
        first, second = hub.students
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
            try:
                for user, answer in zip(hub.students, (answers()["right"], answers()["wrong"])):
                    _student_submits(browser, hub, user, answer, run)
                run.seconds["submitted"] = time.monotonic() - started
                graded = hub.step("grade", LAB)
                run.grade_output = graded.stdout + graded.stderr
                assert graded.returncode == 0, run.grade_output
                run.seconds["graded"] = time.monotonic() - started
                run.gradebook = _gradebook_scores(hub)
                for user, other in ((first, second), (second, first)):
                    _student_reads_feedback(browser, hub, user, other, run)
                _instructor_opens_formgrader(browser, hub, run)
                run.gradebook_after_formgrader = _gradebook_scores(hub)
            finally:
                browser.close()
        run.culler = _culler_processes()
        run.as_user_reads = {
            "student1 -> student2's notebook": _read_as(first, hub.home(second) / LAB / NOTEBOOK),
            "student1 -> instructor's course folder": _read_as(first, hub.home(hub.instructor) / "paged-kv-course"),
            "student1 -> own notebook": _read_as(first, hub.home(first) / LAB / NOTEBOOK),
            "student1 -> the checkout's solutions": _read_as(first, ROOT / "solutions" / LAB / NOTEBOOK),
            "student1 -> the checkout's package": _read_as(first, ROOT / "paged_kv" / "cache" / "manager.py"),
            "student1 -> the checkout's graders": _read_as(
                first, ROOT / "autograder" / "labs" / "lab02_atomic_prefill" / "checks.py"
            ),
            "student1 -> dist/, as make gradescope wrote it": _read_as(first, PLANTED),
            "student1 -> the test artifacts": _read_as(first, log),
        }
        run.open_link = _refused_while_a_link_is_open(first)
        run.full_package = _full_package_of(first, hub.folder)
        run.student_package = _package_of(first, hub.folder)
        names = [hub.instructor, *hub.students]
    run.left_after_cleanup = leftovers(hub.folder, names)
    run.hub_log = log.read_text(errors="replace")
    run.seconds["total"] = time.monotonic() - started
    (ARTIFACTS / "timings.json").write_text(json.dumps(run.seconds, indent=1))
    return run


def _score_in(html: str) -> float:
    text = re.sub(r"<[^>]+>", " ", html)
    found = re.search(r"Score:\s*([0-9.]+)\s*/\s*([0-9.]+)", text)
    assert found, f"no 'Score: x / y' in the feedback: {text[:500]}"
    assert float(found[2]) == MAX_SCORE
    return float(found[1])


def test_students_see_only_the_assignment_list_in_the_nbgrader_menu(class_run):
    assert class_run.menu_items == ["Assignment List"]


def test_a_students_own_server_has_no_formgrader(class_run):
    assert class_run.own_formgrader and set(class_run.own_formgrader.values()) == {404}, class_run.own_formgrader


def test_validate_passes_the_right_answer_and_flags_the_wrong_one(class_run):
    right, wrong = (class_run.validate_text[u] for u in class_run.hub.students)
    assert "Success" in right or "passed" in right.lower(), right
    assert "failed" in wrong.lower() or "error" in wrong.lower(), wrong


def test_the_gradebook_holds_full_marks_for_the_right_answer_and_fewer_for_the_wrong(class_run):
    first, second = class_run.hub.students
    assert class_run.gradebook[first] == MAX_SCORE, class_run.gradebook
    assert class_run.gradebook[second] < MAX_SCORE, class_run.gradebook


def test_each_student_fetches_feedback_with_their_own_score_and_no_hidden_test(class_run):
    for user in class_run.hub.students:
        html = class_run.feedback_html[user]
        assert _score_in(html) == class_run.gradebook[user], user
        shown = [code for code in HIDDEN_CODE if code in html]
        assert shown == [], f"{user}'s feedback shows hidden test code: {shown}"
        assert class_run.feedback_policy[user] == FEEDBACK_POLICY, (user, class_run.feedback_policy[user])


def test_one_click_on_view_feedback_opens_the_feedback_page(class_run):
    """Issue 37 item 6b: nbgrader's "(view feedback)" link, clicked in the Assignments tab, opens the fetched
    feedback page in a tab of its own (nbgrader alone only shows the folder that holds it)."""
    page = f"{NOTEBOOK[: -len('.ipynb')]}.html"
    for user in class_run.hub.students:
        assert page in class_run.feedback_tabs[user], (user, class_run.feedback_tabs[user])


def test_no_student_reaches_another_students_or_the_instructors_server(class_run):
    assert class_run.cross_requests and all(
        status in (302, 403, 404) for status in class_run.cross_requests.values()
    ), class_run.cross_requests


def test_no_student_reads_another_students_or_the_instructors_files_on_the_machine(class_run):
    reads = class_run.as_user_reads
    assert reads["student1 -> own notebook"] == "read", reads
    assert reads["student1 -> student2's notebook"] == "denied", reads
    assert reads["student1 -> instructor's course folder"] == "denied", reads
    for what in ("solutions", "package", "graders"):
        assert reads[f"student1 -> the checkout's {what}"] == "denied", reads


def test_no_student_reads_a_build_output_of_the_checkout(class_run):
    """Issue 47: dist/ as the platform builders wrote it before (the hidden tests, 0644 in 0755 folders) and the test
    artifacts are closed by make hub, like every entry of the checkout but its environment (hub.checkout)."""
    reads = class_run.as_user_reads
    assert reads["student1 -> dist/, as make gradescope wrote it"] == "denied", reads
    assert reads["student1 -> the test artifacts"] == "denied", reads


def test_make_hub_refuses_to_start_while_a_build_output_is_open_to_students(class_run):
    """A build output kept outside the checkout and linked at its top is one a student reads (as that account, on
    this machine) and make hub cannot close (it never follows a link): it refuses to start, naming it, before it
    makes any account or folder."""
    from hub.runtime import open_to_all

    seen = class_run.open_link
    # (where the checkout sits behind a folder only its owner enters, no student reaches the link at all)
    assert seen["student reads through the link"] == ("read" if open_to_all(ROOT) else "denied"), seen
    assert seen["returncode"] == "2" and "dist-pkvt-hub-test (a link)" in seen["said"], seen
    assert seen["hub folder made"] == "False", seen


def test_no_student_imports_the_whole_package_past_their_edition(class_run):
    """Taking the edition off sys.path and importing paged_kv through the course environment reaches no
    reference: the checkout is closed to students (hub.checkout)."""
    assert class_run.full_package.startswith("refused") or class_run.full_package == "reference: False", (
        class_run.full_package
    )


def test_the_instructor_sees_the_lab_in_formgrader(class_run):
    assert LAB in class_run.formgrader_text


def test_cleanup_leaves_no_account_home_process_or_folder(class_run):
    assert class_run.left_after_cleanup == []


def test_students_import_the_released_labs_edition_of_the_package(class_run):
    """`make hub-release LAB=02-...` gives the students lab 02's edition: no implementation of its TODOs."""
    assert class_run.student_package == LAB


def test_a_students_first_screen_is_the_assignments_tab_with_the_released_lab(class_run):
    """A new student's JupyterLab opens on Nbgrader's Assignments tab (hub/first_screen.py), not an empty
    Launcher: lab 02 is there with its Fetch button."""
    assert set(class_run.first_screen) == set(class_run.hub.students)
    for user, screen in class_run.first_screen.items():
        assert screen["tabs"] == ["Assignments"] and screen["current"] == ["Assignments"], (user, screen)
        assert any(LAB in item for item in screen["released"]) and screen["fetch_buttons"] >= 1, (user, screen)


def test_no_one_is_asked_about_jupyter_news(class_run):
    """The roles' settings answer JupyterLab's news question for every user (hub.roles.LAB_SETTINGS)."""
    assert set(class_run.news) == {*class_run.hub.students, class_run.hub.instructor}
    assert all(asked == [] for asked in class_run.news.values()), class_run.news


def test_formgraders_autograde_is_refused_naming_make_hub_grade_and_changes_nothing(class_run):
    assert "make hub-grade LAB=02-atomic-prefill" in class_run.formgrader_autograde, class_run.formgrader_autograde
    assert class_run.gradebook_after_formgrader == class_run.gradebook


def test_hub_grade_names_its_reports_by_their_absolute_paths(class_run):
    reports = f"/{class_run.hub.instructor}/paged-kv-course/autograder/work/reports"
    assert f"{reports}/grades.csv," in class_run.grade_output, class_run.grade_output[-1500:]
    assert f"{reports}/{LAB}/log.csv" in class_run.grade_output
    assert "grades: autograder/work" not in class_run.grade_output


def test_the_idle_culler_runs_and_kernels_are_culled_when_idle(class_run):
    assert len(class_run.culler) == 1 and "--timeout=3600" in class_run.culler[0], class_run.culler
    assert "Culling kernels with idle durations > 1800 seconds" in class_run.hub_log


def test_the_hubs_log_has_no_jupyter_events_version_warning_and_no_pycurl_advice(class_run):
    assert "JupyterEventsVersionWarning" not in class_run.hub_log
    assert "Could not load pycurl" not in class_run.hub_log  # hub/idle_culler_config.py
