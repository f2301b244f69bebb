"""Drive one JupyterLab notebook in a real browser the way a student does: menus, keys, clicks.

`NotebookPage` wraps a Playwright page showing one notebook. It only uses what a student uses
(menus, keyboard shortcuts, clicks, typing) and reads results back from the saved file and the
rendered page. Cells are addressed by their index in the notebook (the page keeps every cell in
the DOM: see `lab_server.TEST_SETTINGS`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

# Widget classes (ipywidgets 7 and 8 DOM) that show things but take no input.
PASSIVE_WIDGETS = {
    "widget-container",
    "widget-box",
    "widget-hbox",
    "widget-vbox",
    "widget-gridbox",
    "widget-output",
    "widget-html",
    "widget-htmlmath",
    "widget-label",
    "widget-image",
    "widget-inline-hbox",
    "widget-inline-vbox",
    "widget-readout",
    "widget-valid",
    "widget-progress",
    "widget-hprogress",
    "widget-vprogress",
    "widget-tab",
    "widget-accordion",
}
# Controls the test knows how to operate, by the widget class that marks them.
CONTROL_WIDGETS = {
    "widget-dropdown",
    "widget-select",
    "widget-slider",
    "widget-button",
    "widget-toggle-button",
    "widget-checkbox",
    "widget-radio",
    "widget-toggle-buttons",
}

_JS_CONTROLS = """(area) => {
  const passive = new Set(%s), controls = new Set(%s);
  const found = [], unknown = [];
  area.querySelectorAll('.jupyter-widgets').forEach((el) => {
    const kinds = Array.from(el.classList).filter((c) => c.startsWith('widget-'));
    const control = kinds.find((c) => controls.has(c));
    if (control) {
      const label = el.querySelector('.widget-label');
      found.push({kind: control, label: (label ? label.textContent : el.textContent).trim()});
    } else if (!kinds.every((c) => passive.has(c))) {
      unknown.push(kinds.join(' '));
    }
  });
  return {found, unknown};
}""" % (json.dumps(sorted(PASSIVE_WIDGETS)), json.dumps(sorted(CONTROL_WIDGETS)))

# What a widget shows: its output areas' text and pictures (not the controls' own labels/readouts).
_JS_SHOWN = """(area) => {
  const parts = [];
  area.querySelectorAll('.widget-output, .widget-html, .widget-htmlmath').forEach((o) => parts.push(o.innerText));
  area.querySelectorAll('img').forEach((i) => parts.push(i.src.length + ':' + i.src.slice(-64)));
  return parts.join('\\u241e');
}"""


@dataclass
class Reaction:
    """One control operated: which, and whether what the widget shows changed."""

    cell: int
    kind: str
    label: str
    changed: bool


class NotebookPage:
    """One notebook open in JupyterLab, in its own workspace (so no other notebook is open)."""

    def __init__(self, page, server_url: str, token: str, root: Path, path: str, workspace: str):
        self.page, self.root, self.path = page, root, path
        page.goto(f"{server_url}/lab/workspaces/{workspace}/tree/{path}?reset&token={token}")
        self.notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
        self.cells = self.notebook.locator(".jp-Cell")
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).some(e => /\\| Idle/.test(e.textContent))",
            timeout=120_000,
        )

    # --- running -----------------------------------------------------------------------------
    def menu(self, top: str, command: str) -> None:
        self.page.click(f".lm-MenuBar-item >> text={top}")
        self.page.click(f".lm-Menu-item[data-command='{command}']")

    def run_all(self, timeout_s: float) -> None:
        """Run > Run All Cells, then wait until nothing is queued or running."""
        self.menu("Run", "runmenu:run-all")
        self.wait_until_idle(timeout_s)

    def restart_and_run_all(self, timeout_s: float) -> None:
        """Kernel > Restart Kernel and Run All Cells…, confirmed in its dialog, then wait."""
        self.menu("Kernel", "runmenu:restart-and-run-all")
        self.page.click(".jp-Dialog .jp-mod-accept")
        self.wait_until_idle(timeout_s)

    def wait_until_idle(self, timeout_s: float) -> None:
        time.sleep(0.5)  # let the queued cells show their [*] prompts first
        self.page.wait_for_function(
            """() => {
            const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
            if (!nb) return false;
            const busy = Array.from(nb.querySelectorAll('.jp-InputPrompt')).some((e) => e.textContent.includes('*'));
            const indicator = nb.querySelector('.jp-Notebook-ExecutionIndicator');
            return !busy && indicator && indicator.getAttribute('data-status') === 'idle';
        }""",
            timeout=timeout_s * 1000,
            polling=250,
        )

    def save(self) -> dict:
        """File > Save Notebook; returns the notebook as saved on disk (a dict of the .ipynb JSON)."""
        self.menu("File", "docmanager:save")
        self.page.wait_for_selector(".lm-TabBar-tab.jp-mod-current:not(.jp-mod-dirty)", timeout=30_000)
        path = self.root / self.path
        for _ in range(50):  # the tab turns clean when the server answered; the file is then written
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                time.sleep(0.1)
        return json.loads(path.read_text())

    # --- editing -----------------------------------------------------------------------------
    def select(self, index: int) -> None:
        """Select cell ``index`` in command mode (a click on its left margin, then Escape)."""
        cell = self.cells.nth(index)
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputPrompt").first.click()
        self.page.keyboard.press("Escape")

    def type_into(self, index: int, text: str) -> None:
        """Replace the content of cell ``index`` by ``text``, as if typed (no auto-indent)."""
        cell = self.cells.nth(index)
        cell.scroll_into_view_if_needed()
        if "jp-MarkdownCell" in (cell.get_attribute("class") or ""):
            cell.locator(".jp-InputArea").dblclick(position={"x": 5, "y": 5})
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.insert_text(text)
        self.page.keyboard.press("Escape")

    def try_to_edit(self, index: int, text: str = "EDITED BY THE TEST") -> None:
        cell = self.cells.nth(index)
        cell.scroll_into_view_if_needed()
        if "jp-MarkdownCell" in (cell.get_attribute("class") or ""):
            cell.locator(".jp-InputArea").dblclick(position={"x": 5, "y": 5})
        editor = cell.locator(".cm-content")
        if editor.count() and editor.is_visible():
            editor.click()
            self.page.keyboard.press("Control+a")
            self.page.keyboard.insert_text(text)
        self.page.keyboard.press("Escape")

    def try_to_delete(self, index: int) -> None:
        """The two ways a student deletes a cell from the keyboard: `d d` and `x` (cut)."""
        for keys in (("d", "d"), ("x",)):
            self.select(index)
            for key in keys:
                self.page.keyboard.press(key)
            dialog = self.page.locator(".jp-Dialog")
            if dialog.count():
                dialog.locator(".jp-mod-reject").first.click()

    def editor_is_read_only(self, index: int) -> bool:
        return "jp-mod-readOnly" in (self.cells.nth(index).locator(".cm-editor").first.get_attribute("class") or "")

    # --- what the page shows -----------------------------------------------------------------
    def images(self) -> List[dict]:
        """Every picture in the outputs: loaded (natural size) and laid out (shown size)."""
        return self.notebook.evaluate("""(nb) => Array.from(nb.querySelectorAll('.jp-OutputArea-output img')).map((i) => ({
            cell: Array.from(nb.querySelectorAll('.jp-Cell')).indexOf(i.closest('.jp-Cell')),
            in_widget: !!i.closest('.jupyter-widgets'), complete: i.complete, natural: [i.naturalWidth, i.naturalHeight],
            shown: [i.getBoundingClientRect().width, i.getBoundingClientRect().height]}))""")

    def output_texts(self) -> Dict[int, str]:
        """The rendered text of each cell's outputs, by cell index (cells with outputs only)."""
        return self.notebook.evaluate("""(nb) => {
            const texts = {};
            nb.querySelectorAll('.jp-Cell').forEach((cell, i) => {
                const out = cell.querySelector('.jp-OutputArea');
                if (out && out.innerText.trim()) texts[i] = out.innerText;
            });
            return texts;
        }""")

    def widget_views(self) -> List[dict]:
        """Every widget shown in a cell's outputs (not widgets nested in widgets): its cell, its size."""
        return self.notebook.evaluate("""(nb) => Array.from(nb.querySelectorAll('.jp-OutputArea-output'))
            .filter((o) => !o.parentElement.closest('.jupyter-widgets'))
            .filter((o) => Array.from(o.children).some((c) => c.classList.contains('jupyter-widgets')))
            .map((o) => ({cell: Array.from(nb.querySelectorAll('.jp-Cell')).indexOf(o.closest('.jp-Cell')),
                          rendered: o.getBoundingClientRect().height > 0, text: o.innerText.slice(0, 300)}))""")

    def exercise_widgets(self, settle_s: float = 20) -> (List[Reaction], List[str]):
        """Operate every control of every widget, in page order; record whether its view changed.

        Dropdowns and selects take their next option, sliders move one step (keyboard), buttons,
        toggles and checkboxes are clicked. Returns the reactions and the widget kinds the test
        does not know how to operate (a new kind of control needs an action here).
        """
        reactions, unknown = [], []
        for index in range(self.cells.count()):
            area = self.cells.nth(index).locator(".jp-OutputArea").first
            if not area.count() or not area.locator(".jupyter-widgets").count():
                continue
            listing = area.evaluate(_JS_CONTROLS)
            unknown += [f"cell {index}: {kinds}" for kinds in listing["unknown"]]
            per_kind: Dict[str, int] = {}
            for control in listing["found"]:
                nth = per_kind.get(control["kind"], 0)
                per_kind[control["kind"]] = nth + 1
                element = area.locator(f".{control['kind']}").nth(nth)
                element.scroll_into_view_if_needed()
                before = area.evaluate(_JS_SHOWN)
                _ACTIONS[control["kind"]](self.page, element)
                changed = self._wait_for_change(area, before, settle_s)
                reactions.append(Reaction(index, control["kind"], control["label"], changed))
        return reactions, unknown

    def _wait_for_change(self, area, before: str, settle_s: float) -> bool:
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if area.evaluate(_JS_SHOWN) != before:
                return True
        return False

    # --- pictures ----------------------------------------------------------------------------
    def screenshot_cell(self, index: int, path: Path) -> None:
        """The viewport, scrolled so that cell ``index`` is in view (what the student looks at)."""
        self.cells.nth(index).scroll_into_view_if_needed()
        self.page.screenshot(path=str(path))

    def screenshot_whole_notebook(self, path: Path, max_height: int = 12000) -> List[Path]:
        """The whole notebook in tall pictures: the window is made as tall as the notebook (up to
        ``max_height`` pixels; a longer notebook comes in parts, ``NAME-part2.png`` and so on)."""
        size = self.page.viewport_size
        scroller = "(nb) => nb.querySelector('.jp-WindowedPanel-outer')"
        total = int(self.notebook.evaluate(f"(nb) => ({scroller})(nb).scrollHeight"))
        chrome = size["height"] - int(self.notebook.evaluate(f"(nb) => ({scroller})(nb).clientHeight"))
        self.page.set_viewport_size({"width": size["width"], "height": min(max_height, total + chrome)})
        time.sleep(0.5)
        step = int(self.notebook.evaluate(f"(nb) => ({scroller})(nb).clientHeight"))
        shots = []
        for part, top in enumerate(range(0, total, step), start=1):
            self.notebook.evaluate(f"(nb) => ({scroller})(nb).scrollTo(0, {top})")
            time.sleep(0.2)
            shot = path if top == 0 else path.with_name(f"{path.stem}-part{part}{path.suffix}")
            self.page.screenshot(path=str(shot))
            shots.append(shot)
            if top + step >= total:
                break
        self.page.set_viewport_size(size)
        return shots


def _select_next(page, element) -> None:
    select = element.locator("select")
    count = select.evaluate("(s) => s.options.length")
    current = select.evaluate("(s) => s.selectedIndex")
    select.select_option(index=(current + 1) % count)


def _slide_one_step(page, element) -> None:
    handle = element.locator(".noUi-handle, .ui-slider-handle").first
    handle.focus()
    at_max = handle.evaluate("(h) => h.getAttribute('aria-valuenow') === h.getAttribute('aria-valuemax')")
    page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")


def _click(page, element) -> None:
    element.click()


def _click_first_input(page, element) -> None:
    element.locator("input, button").first.click()


def _click_other_choice(page, element) -> None:
    choices = element.locator("input[type=radio], button")
    for i in range(choices.count()):
        choice = choices.nth(i)
        if not (
            choice.is_checked()
            if choice.evaluate("(c) => c.tagName") == "INPUT"
            else "mod-active" in (choice.get_attribute("class") or "")
        ):
            choice.click()
            return


_ACTIONS: Dict[str, Callable] = {
    "widget-dropdown": _select_next,
    "widget-select": _select_next,
    "widget-slider": _slide_one_step,
    "widget-button": _click,
    "widget-toggle-button": _click,
    "widget-checkbox": _click_first_input,
    "widget-radio": _click_other_choice,
    "widget-toggle-buttons": _click_other_choice,
}
assert set(_ACTIONS) == CONTROL_WIDGETS
