"""Every release notebook in JupyterLab, in a real browser (Debian's Chromium driven by Playwright),
used the way a student uses it. One JupyterLab server and one browser serve all notebooks.

For each notebook in course/ (discovered, never listed):
- the untouched notebook, run with Run > Run All Cells, stops at the first test cell after its
  first TODO, with the TODO's NotImplementedError shown there as one short block (no traceback),
  and no error anywhere before it;
- with the solution typed into its answer cells (the source notebook's answer without nbgrader's
  marker lines), Kernel > Restart Kernel and Run All Cells runs every cell with no error output at
  all. Test cells count too: in course/ a hidden-test cell keeps only its visible part (nbgrader
  removed the part that calls the autograder), so "no error" means the visible checks pass and the
  hidden ones are empty;
- every picture renders as an image, every widget renders and each of its controls changes what
  the widget shows when operated;
- cells nbgrader locked cannot be edited or deleted (the first and last of each kind are poked at; every code
  cell's editor is read-only where it should be); answer cells take the student's typing;
- the page logs no JavaScript error and asks nothing from the internet but the Colab badge image.
A screenshot per notebook goes to test-artifacts/browser/ (git-ignored).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import nbformat
import pytest

from autograder.course.layout import LABS, RELEASE_DIR
from chromium import LAUNCH_ARGS, chromium_or_reason
from course_notebooks import answers, is_answer, is_read_only, is_test, nbgrader_meta, release_path
from jupyterlab_driver import NotebookPage, Reaction
from lab_server import STUDENT_CONFIG, TEST_SETTINGS, running_jupyterlab
from test_pitfalls import PITFALLS
from tools.sync_colab import COLAB_BADGE_SVG, MODELSCOPE_BADGE_SVG

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is missing: run `make env`")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
# Pitfalls a student types in the browser (test_pitfalls.PITFALLS' edits): a word the visible test's message must show.
BROWSER_PITFALLS = {
    "08-fork-and-share": {
        "Sharing the parent's token list": "token_ids",
        "Returning the beams in another order": "order of choices",
    }
}
RUN_ALL_TIMEOUT_S = 600  # a whole notebook on a 2-core CPU machine (Triton's interpreter included)
LONGEST_READABLE_FAILURE = 6  # lines: a block a student reads at a glance (paged_kv.lab.feedback's hook)
BADGE_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="117" height="20"><rect width="117" height="20" '
    'rx="3" fill="#555"/><rect x="50" width="67" height="20" rx="3" fill="#f9ab00"/><text x="6" y="14" '
    'fill="#fff" font-family="sans-serif" font-size="11">Open in</text><text x="56" y="14" fill="#fff" '
    'font-family="sans-serif" font-size="11">Colab</text></svg>'
)
# What JupyterLab shows instead of a widget it cannot draw (no widget manager, a model it cannot find).
UNRENDERED_WIDGET = re.compile(
    r"Error displaying widget|Loading widget|^(VBox|HBox|Box|Dropdown|IntSlider|Button)\(", re.M
)
# The badges at a notebook's top (tools/sync_colab.py), answered offline with a stand-in picture: the only
# addresses a page may ask the internet for.
EXTERNAL_ALLOWED = (COLAB_BADGE_SVG, MODELSCOPE_BADGE_SVG)


@dataclass
class LabRun:
    """What a student's session with one notebook produced, read back from the page and the file."""

    lab: str
    release: nbformat.NotebookNode
    after_pokes: dict = field(default_factory=dict)  # saved after trying to edit and delete locked cells
    untouched: dict = field(default_factory=dict)  # saved after Run All on the released notebook
    solved: dict = field(default_factory=dict)  # saved after typing answers and Restart & Run All
    read_only_flags: Dict[int, bool] = field(default_factory=dict)
    images: List[dict] = field(default_factory=list)
    widget_views: List[dict] = field(default_factory=list)
    output_texts: Dict[str, str] = field(default_factory=dict)
    untouched_texts: Dict[str, str] = field(default_factory=dict)
    reactions: List[Reaction] = field(default_factory=list)
    unknown_widgets: List[str] = field(default_factory=list)
    js_errors: List[str] = field(default_factory=list)
    external_requests: List[str] = field(default_factory=list)
    screenshots: List[Path] = field(default_factory=list)
    pitfall_texts: Dict[str, str] = field(default_factory=dict)  # a pitfall typed in: its visible test's output


@pytest.fixture(scope="module")
def chromium(tmp_path_factory) -> str:
    path, reason = chromium_or_reason(tmp_path_factory.mktemp("apt") / "apt.log")
    if path is None:
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory) -> Path:
    """A copy of course/: the test saves notebooks, and must never write into the repository."""
    root = tmp_path_factory.mktemp("lab-root")
    for lab in LABS:
        shutil.copytree(RELEASE_DIR / lab, root / lab)
    return root


@pytest.fixture(scope="module")
def server(lab_root, tmp_path_factory):
    """JupyterLab as `make lab` starts it for students (nbgrader's instructor tools hidden)."""
    with running_jupyterlab(
        lab_root,
        tmp_path_factory.mktemp("jupyterlab"),
        settings=TEST_SETTINGS,
        env={"JUPYTER_CONFIG_PATH": str(STUDENT_CONFIG)},
    ) as lab:
        yield lab


@pytest.fixture(scope="module")
def browser(chromium):
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
        yield instance
        instance.close()


def _watch(page, run: LabRun, server_url: str) -> None:
    page.on("console", lambda m: run.js_errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: run.js_errors.append(f"page error: {e}"))

    def outside(route):
        url = route.request.url
        if url in EXTERNAL_ALLOWED:
            route.fulfill(status=200, content_type="image/svg+xml", body=BADGE_SVG)
        else:
            run.external_requests.append(url)
            route.abort()

    page.context.route(lambda url: not url.startswith(server_url), outside)


def _open(context, run: LabRun, server, lab_root: Path) -> NotebookPage:
    page = context.new_page()
    _watch(page, run, server.url)
    nb = NotebookPage(page, server.url, server.token, lab_root, f"{run.lab}/{LABS[run.lab]}", workspace=run.lab)
    shown, saved = nb.cells.count(), len(run.release.cells)
    assert shown == saved, f"{run.lab}: the page shows {shown} cells, the file has {saved}"
    return nb


def _changed_cells(release, saved: dict) -> List[str]:
    """What differs between the release and a saved copy: deleted cells, edited locked cells, metadata."""
    if len(saved["cells"]) != len(release.cells):
        return [f"{len(release.cells) - len(saved['cells'])} cell(s) deleted"]
    changes = []
    for i, (before, after) in enumerate(zip(release.cells, saved["cells"])):
        if after.get("id") != before.get("id"):
            changes.append(f"cell {i}: id {before.get('id')!r} became {after.get('id')!r}")
        if after["metadata"].get("nbgrader") != before.metadata.get("nbgrader"):
            changes.append(f"cell {i}: nbgrader metadata changed")
        if is_read_only(before) and _source(after) != before.source:
            changes.append(f"locked cell {i} was edited: {_source(after)[:120]!r}")
    return changes


def _shut_down_kernels(server) -> None:
    for session in server.api("/api/sessions") or []:
        server.api(f"/api/sessions/{session['id']}", method="DELETE")


def _poked(cells) -> List[int]:
    """The locked cells a student pokes at: the first and the last of each kind (markdown, given code, test cell), each
    lock being the same metadata (``test_every_locked_cell_carries_jupyterlabs_lock`` checks it on every cell of every
    release; every code cell's editor is checked read-only in the browser)."""
    kinds: Dict[tuple, List[int]] = {}
    for i, cell in enumerate(cells):
        if is_read_only(cell):
            kinds.setdefault((cell.cell_type, is_test(cell)), []).append(i)
    return sorted({i for found in kinds.values() for i in (found[0], found[-1])})


def test_every_locked_cell_carries_jupyterlabs_lock():
    """What JupyterLab reads to refuse an edit or a deletion, on every cell nbgrader locked, in every release and its
    translations (the browser pokes at a sample of them: ``_poked``)."""
    from autograder.course.languages import translated_releases

    for lab in sorted(LABS):
        releases = {"en": nbformat.read(release_path(lab), as_version=4)}
        releases.update({k: nbformat.from_dict(v) for k, v in translated_releases(RELEASE_DIR, lab, LABS[lab]).items()})
        assert len(releases) > 1, f"{lab}: no translated release found"
        for language, notebook in releases.items():
            for i, cell in enumerate(notebook.cells):
                if is_read_only(cell):
                    lock = (cell.metadata.get("editable"), cell.metadata.get("deletable"))
                    assert lock == (False, False), f"{lab} ({language}), cell {i}: editable, deletable = {lock}"


@pytest.fixture(scope="module", params=sorted(LABS))
def lab_run(request, server, browser, lab_root) -> LabRun:
    lab = request.param
    run = LabRun(lab, nbformat.read(release_path(lab), as_version=4))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        nb = _open(context, run, server, lab_root)
        cells = run.release.cells
        # 1. A student pokes at the locked cells: types into them, tries `d d` and `x` on them.
        for i, cell in enumerate(cells):
            if cell.cell_type == "code" and (is_read_only(cell) or is_answer(cell)):
                run.read_only_flags[i] = nb.editor_is_read_only(i)
        for attempt in (nb.try_to_edit, nb.try_to_delete):
            for i in _poked(cells):
                if nb.cells.count() == len(cells):
                    attempt(i)
        run.after_pokes = nb.save()
        if _changed_cells(run.release, run.after_pokes):  # start again from the file as released
            context.close()
            shutil.copy(release_path(lab), lab_root / lab / LABS[lab])
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            nb = _open(context, run, server, lab_root)

        # ... and runs everything as released.
        nb.run_all(RUN_ALL_TIMEOUT_S)
        run.untouched = nb.save()
        run.untouched_texts = nb.output_texts()
        first_error = next(
            (
                i
                for i, c in enumerate(run.untouched["cells"])
                if any(o["output_type"] == "error" for o in c.get("outputs", []))
            ),
            0,
        )
        shot = ARTIFACTS / f"{lab}-untouched.png"
        nb.screenshot_cell(first_error, shot)
        run.screenshots.append(shot)

        # 2. The same student types the solution and starts over.
        typed = answers(lab)
        for i, cell in enumerate(cells):
            if is_answer(cell):
                nb.type_into(i, typed[nbgrader_meta(cell)["grade_id"]])
        nb.restart_and_run_all(RUN_ALL_TIMEOUT_S)
        run.solved = nb.save()
        run.images = nb.images()
        run.widget_views = nb.widget_views()
        run.output_texts = nb.output_texts()
        for old in ARTIFACTS.glob(f"{lab}-part*.png"):
            old.unlink()
        run.screenshots += nb.screenshot_whole_notebook(ARTIFACTS / f"{lab}.png")
        run.reactions, run.unknown_widgets = nb.exercise_widgets()

        # 3. Then types a pitfall into one answer, runs it and the visible test below it, and puts it right.
        for title in BROWSER_PITFALLS.get(lab, {}):
            run.pitfall_texts[title] = _type_a_pitfall(nb, cells, typed, PITFALLS[lab][title])
    except Exception:
        for page in context.pages:  # what the page showed when the session broke off
            page.screenshot(path=str(ARTIFACTS / f"{lab}-failure.png"))
        raise
    finally:
        _shut_down_kernels(server)
        context.close()
    return run


def _run_cell(nb: NotebookPage, index: int, timeout_s: float = 180) -> None:
    nb.select(index)
    nb.page.keyboard.press("Shift+Enter")
    nb.wait_until_idle(timeout_s)


def _type_a_pitfall(nb: NotebookPage, cells, typed: Dict[str, str], edits) -> str:
    """Type ``edits`` (test_pitfalls' (old, new) pairs) into the answer cell holding them, run it and the visible
    test cell below it; return that test's output as shown, after typing the right answer back and running it
    and the answer cells after it (labs 05 and 08 tell students to: each part's class is built on the one before)."""
    answer_cells = [i for i, c in enumerate(cells) if is_answer(c)]
    sources = {i: typed[nbgrader_meta(cells[i])["grade_id"]].rstrip("\n") + "\n" for i in answer_cells}
    index = next(i for i in answer_cells if edits[0][0] in sources[i])
    buggy = sources[index]
    for old, new in edits:
        buggy = buggy.replace(old, new)
    buggy = buggy.rstrip("\n")
    visible = next(j for j in range(index + 1, len(cells)) if is_test(cells[j]))
    nb.type_into(index, buggy)
    _run_cell(nb, index)
    _run_cell(nb, visible)
    shown = nb.output_texts().get(str(visible), "")  # the page's keys are strings
    nb.type_into(index, sources[index])
    _run_cell(nb, index)
    for later in (j for j in answer_cells if j > index):  # as the lab says: a later part's class is built on this
        _run_cell(nb, later)  # one as it was when its own cell ran
    return shown


def _errors(notebook: dict) -> Dict[int, List[dict]]:
    return {
        i: [o for o in c.get("outputs", []) if o["output_type"] == "error"]
        for i, c in enumerate(notebook["cells"])
        if c["cell_type"] == "code"
    }


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_untouched_lab_stops_at_its_first_todo_with_a_readable_failure(lab_run):
    cells, saved = lab_run.release.cells, lab_run.untouched["cells"]
    failing = [i for i, errors in _errors(lab_run.untouched).items() if errors]
    answer_cells = [i for i, c in enumerate(cells) if is_answer(c)]
    if not answer_cells:
        assert not failing, f"{lab_run.lab} has no TODO, yet cells {failing} fail as released"
        assert all(c.get("execution_count") for c in saved if c["cell_type"] == "code"), "Run All stopped early"
        return
    assert failing, f"{lab_run.lab}: Run All on the untouched notebook raised nothing: is a TODO already solved?"
    stop = failing[0]
    assert is_test(cells[stop]) and stop > answer_cells[0], (
        f"{lab_run.lab}: the first error is in cell {stop} ({cells[stop].source[:80]!r}), not in a test cell after "
        f"the first TODO (cell {answer_cells[0]})"
    )
    error = lab_run.untouched["cells"][stop]["outputs"]
    # a stub's own NotImplementedError, or the course's TodoNotWritten (a NotImplementedError naming the TODO)
    assert [o["ename"] for o in error if o["output_type"] == "error"] in (
        ["NotImplementedError"],
        ["TodoNotWritten"],
    ), error
    ran = [i for i, c in enumerate(saved[:stop]) if c["cell_type"] == "code" and not c.get("execution_count")]
    assert not ran, f"{lab_run.lab}: cells {ran} before the first failure did not run"
    shown = lab_run.untouched_texts.get(str(stop), "")
    assert "NotImplementedError" in shown, f"{lab_run.lab}: the page does not show the TODO's error:\n{shown}"
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines) <= LONGEST_READABLE_FAILURE and "Traceback" not in shown, (
        f"{lab_run.lab}: the TODO's failure is not one short block ({len(lines)} lines):\n{shown}"
    )


def test_locked_cells_refuse_edits_and_deletion(lab_run):
    changes = _changed_cells(lab_run.release, lab_run.after_pokes)
    assert not changes, f"{lab_run.lab}: typing and `d d` / `x` on locked cells changed them: {changes}"
    cells = lab_run.release.cells
    for i, read_only in lab_run.read_only_flags.items():
        assert read_only == is_read_only(cells[i]), f"{lab_run.lab}: cell {i}'s editor read-only={read_only}"
    assert not _changed_cells(lab_run.release, lab_run.untouched), "Run All changed the notebook's cells"


def test_answer_cells_take_what_the_student_types(lab_run):
    typed = answers(lab_run.lab)
    for cell in lab_run.solved["cells"]:
        if is_answer(cell):
            assert _source(cell) == typed[nbgrader_meta(cell)["grade_id"]], "typing into an answer cell failed"


def test_solved_lab_runs_every_cell_without_error_after_a_restart(lab_run):
    cells = lab_run.solved["cells"]
    failing = {
        i: [f"{o['ename']}: {o['evalue']}" for o in errors] for i, errors in _errors(lab_run.solved).items() if errors
    }
    assert not failing, f"{lab_run.lab}: errors with the solution typed in: {failing}"
    counts = [c.get("execution_count") for c in cells if c["cell_type"] == "code"]
    assert all(counts) and counts == sorted(counts) and counts[0] == 1, (
        f"{lab_run.lab}: not all cells ran in order: {counts}"
    )


def test_every_plot_renders_as_an_image(lab_run):
    pictures = sum(1 for c in lab_run.solved["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    shown = [img for img in lab_run.images if img["complete"] and min(img["natural"]) > 0 and min(img["shown"]) > 0]
    broken = [img for img in lab_run.images if img not in shown]
    assert not broken, f"{lab_run.lab}: pictures that did not render: {broken}"
    outside_widgets = [img for img in shown if not img["in_widget"]]
    assert len(outside_widgets) == pictures, f"{lab_run.lab}: {pictures} pictures saved, {len(outside_widgets)} shown"
    as_text = {i: t for i, t in lab_run.output_texts.items() if re.search(r"<(Figure size|\S*Figure object at)", t)}
    assert not as_text, f"{lab_run.lab}: a figure shows as text instead of a picture: {as_text}"


def test_every_widget_renders_and_reacts(lab_run):
    views = sum(
        1
        for c in lab_run.solved["cells"]
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    )
    assert len(lab_run.widget_views) == views, (
        f"{lab_run.lab}: {views} widget outputs saved, {len(lab_run.widget_views)} on the page"
    )
    broken = [v for v in lab_run.widget_views if not v["rendered"]]
    broken += [text for text in lab_run.output_texts.values() if UNRENDERED_WIDGET.search(text)]
    assert not broken, f"{lab_run.lab}: widgets that did not render: {broken}"
    assert not lab_run.unknown_widgets, (
        f"{lab_run.lab}: widget controls the test cannot operate: {lab_run.unknown_widgets}"
    )
    if views:
        assert lab_run.reactions, f"{lab_run.lab}: widgets without a single control"
    dead = [r for r in lab_run.reactions if not r.changed]
    assert not dead, f"{lab_run.lab}: controls that changed nothing the widget shows: {dead}"


def test_page_logs_no_javascript_error_and_stays_offline(lab_run):
    assert not lab_run.js_errors, f"{lab_run.lab}: " + "\n".join(lab_run.js_errors)
    assert not lab_run.external_requests, f"{lab_run.lab}: the page asked the internet for {lab_run.external_requests}"


def test_a_pitfall_typed_in_fails_its_visible_test_readably(lab_run):
    """As a student sees it: the listed pitfall typed into its answer, that cell and its visible test run, the
    test shows one short block naming what is wrong (not a long traceback), not 'Visible tests passed.'"""
    expected = BROWSER_PITFALLS.get(lab_run.lab)
    if not expected:
        pytest.skip(f"{lab_run.lab}: no pitfall is typed in the browser")
    for title, word in expected.items():
        shown = lab_run.pitfall_texts[title]
        assert word in shown and "Visible tests passed" not in shown, (title, shown)
        assert len(shown.strip().splitlines()) <= 12 and "Traceback" not in shown, (title, shown)


def test_screenshots_are_saved(lab_run):
    for shot in lab_run.screenshots:
        assert shot.exists() and shot.stat().st_size > 10_000, f"{shot} is missing or blank"


def test_a_lab_from_the_unzipped_handout_is_the_repositorys_student_experience(browser, tmp_path_factory):
    """The handout a student downloads (``make handout``), unzipped: JupyterLab as its ``make lab`` starts it
    (its own student settings; the same command as the repository's, checked in test_grading_pieces) opens
    lab 02 saved (no unsaved mark: the course kernel), without nbgrader's instructor menu, and Run All stops
    at the first TODO with one short block."""
    import zipfile

    from autograder.handout import handout

    scratch = tmp_path_factory.mktemp("handout")
    with zipfile.ZipFile(handout.build(scratch / "handout.zip")) as archive:
        archive.extractall(scratch)
    unzipped = scratch / "paged-kv-course"
    lab = "02-atomic-prefill"
    with running_jupyterlab(
        unzipped / "course",
        tmp_path_factory.mktemp("handout-lab"),
        settings=TEST_SETTINGS,
        env={"JUPYTER_CONFIG_PATH": str(unzipped / "student-lab")},
    ) as server:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        run = LabRun(lab, nbformat.read(unzipped / "course" / lab / LABS[lab], as_version=4))
        try:
            nb = _open(context, run, server, unzipped / "course")
            nb.page.wait_for_timeout(1500)  # a kernel that rewrote the notebook's metadata marks the tab now
            assert nb.page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() == 0, (
                "the notebook opened marked unsaved: its kernel is not the course kernel"
            )
            menus = nb.page.locator(".lm-MenuBar-item").all_inner_texts()
            assert "Nbgrader" not in menus and "Run" in menus, menus
            nb.run_all(RUN_ALL_TIMEOUT_S)
            saved = nb.save()
            texts = nb.output_texts()
            nb.screenshot_whole_notebook(ARTIFACTS / "handout-02.png")
        finally:
            _shut_down_kernels(server)
            context.close()
    failing = [i for i, errors in _errors(saved).items() if errors]
    assert failing and is_test(run.release.cells[failing[0]]), failing
    shown = texts.get(str(failing[0]), "")
    assert "NotImplementedError" in shown and "Traceback" not in shown, shown
    assert not run.js_errors and not run.external_requests, run.js_errors + run.external_requests


# Lab 05's parts each subclass the part before (issue 37, items 3 and 4), as a student meets them.
LAB05 = "05-prefix-cache"
LAB05_PARTS = ("lab05-todo-hash", "lab05-todo-release", "lab05-todo-register", "lab05-todo-admit")
LAB05_VISIBLE = ("lab05-visible-hash", "lab05-visible-release", "lab05-visible-hash-blocks", "lab05-visible-allocate")
BIG_ENDIAN = ('h.update(prefix.to_bytes(8, "little"))', 'h.update(prefix.to_bytes(8, "big"))')
PART3_CRASH = (
    "            block.update(h, token_ids)\n",
    "            del self.hash_to_block_id[block.hash]\n            block.update(h, token_ids)\n",
)


def _cell_index(notebook, grade_id: str) -> int:
    return next(i for i, c in enumerate(notebook.cells) if nbgrader_meta(c).get("grade_id") == grade_id)


def _lab05_session(browser, server, root: Path, name: str, edits: Dict[str, tuple]):
    """Open a copy of lab 05's notebook under ``root`` as ``name``, type every part's answer (with ``edits``:
    ``{answer grade_id: (old, new)}``) and Restart & Run All; the page, the notebook and its cells' indices."""
    release = nbformat.read(root / LAB05 / LABS[LAB05], as_version=4)
    shutil.copy(root / LAB05 / LABS[LAB05], root / LAB05 / name)
    run = LabRun(LAB05, release)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    _watch(page, run, server.url)
    nb = NotebookPage(page, server.url, server.token, root, f"{LAB05}/{name}", workspace=name.removesuffix(".ipynb"))
    typed = answers(LAB05)
    for grade_id in LAB05_PARTS:
        text = typed[grade_id].rstrip("\n")
        if grade_id in edits:
            old, new = edits[grade_id]
            assert text.count(old) == 1, (grade_id, old)
            text = text.replace(old, new)
        nb.type_into(_cell_index(release, grade_id), text)
    nb.restart_and_run_all(RUN_ALL_TIMEOUT_S)
    index = {g: _cell_index(release, g) for g in LAB05_PARTS + LAB05_VISIBLE}
    return context, nb, index, typed


def _shown(nb: NotebookPage, index: int) -> str:
    return nb.output_texts().get(str(index), "")


def _readable_block(shown: str) -> bool:
    lines = [line for line in shown.splitlines() if line.strip()]
    return 1 <= len(lines) <= LONGEST_READABLE_FAILURE and "Traceback" not in shown


def test_fixing_part_1_of_lab_05_reaches_parts_2_to_4_when_run_again_as_the_lab_says(server, browser, lab_root):
    """A student wrote all four parts on a part 1 with a mistake, then fixes part 1 and runs its cell: part 4's
    visible test says, in one short block, which cells to run again; after running them in order, every part's
    visible test passes."""
    context, nb, at, typed = _lab05_session(
        browser, server, lab_root, "fix_part_1.ipynb", {"lab05-todo-hash": BIG_ENDIAN}
    )
    try:
        assert "Visible tests passed" not in _shown(nb, at["lab05-visible-hash"])  # Run All stopped there
        for part in LAB05_PARTS[1:]:  # the student ran the later parts' cells anyway: built on the wrong part 1
            _run_cell(nb, at[part])
        nb.type_into(at["lab05-todo-hash"], typed["lab05-todo-hash"].rstrip("\n"))
        _run_cell(nb, at["lab05-todo-hash"])
        _run_cell(nb, at["lab05-visible-hash"])
        assert "Visible tests passed." in _shown(nb, at["lab05-visible-hash"])
        _run_cell(nb, at["lab05-visible-allocate"])
        stale = _shown(nb, at["lab05-visible-allocate"])
        assert _readable_block(stale) and "again" in stale and "BlockManager" in stale, stale
        for part in LAB05_PARTS[1:]:  # what the block says: the later parts' cells again, in order
            _run_cell(nb, at[part])
        for visible in LAB05_VISIBLE[1:]:
            _run_cell(nb, at[visible])
            assert "Visible tests passed." in _shown(nb, at[visible]), (visible, _shown(nb, at[visible]))
    finally:
        _shut_down_kernels(server)
        context.close()


def test_a_part_3_crash_shows_in_part_4_of_a_class_handout_as_one_short_block(browser, tmp_path_factory):
    """On a class's handout for lab 05 (its edition: no reference for any part, so part 4's test runs the
    student's part 3), a hash_blocks that raises KeyError shows in part 4's visible test as one short block
    naming part 3, not as a traceback."""
    import zipfile

    from autograder.handout import handout

    scratch = tmp_path_factory.mktemp("handout-05")
    with zipfile.ZipFile(handout.build(scratch / "handout.zip", lab=LAB05)) as archive:
        archive.extractall(scratch)
    unzipped = scratch / "paged-kv-course"
    with running_jupyterlab(
        unzipped / "course",
        tmp_path_factory.mktemp("handout-05-lab"),
        settings=TEST_SETTINGS,
        env={"JUPYTER_CONFIG_PATH": str(unzipped / "student-lab")},
        package=unzipped,
    ) as server:
        context, nb, at, _ = _lab05_session(
            browser, server, unzipped / "course", "crash_in_part_3.ipynb", {"lab05-todo-register": PART3_CRASH}
        )
        try:
            assert "Visible tests passed" not in _shown(nb, at["lab05-visible-hash-blocks"])  # Run All stopped there
            _run_cell(nb, at["lab05-todo-admit"])
            _run_cell(nb, at["lab05-visible-allocate"])
            shown = _shown(nb, at["lab05-visible-allocate"])
            nb.screenshot_cell(at["lab05-visible-allocate"], ARTIFACTS / "handout-05-part-3-crash.png")
        finally:
            _shut_down_kernels(server)
            context.close()
    assert _readable_block(shown) and "part 3" in shown and "KeyError" in shown, shown
