"""Hardened notebook execution for ``nbgrader autograde``: time budgets, a boxed kernel, crash recovery.

``HardenedExecute`` replaces nbgrader's ``Execute`` preprocessor (``nbgrader_config.py`` does this, so
every ``nbgrader autograde`` run with the course's config is hardened). For each notebook it

- gives every cell at most ``cell_timeout`` seconds and the whole notebook ``notebook_timeout``
  seconds of execution; a cell past its time is interrupted and scores 0, and once the notebook's
  time is spent the remaining cells are not run and their tests score 0;
- runs the kernel in ``autograder.sandbox``'s box (no network, ``memory_mb`` of address space, a
  read-only system, a private working folder instead of the grading folder);
- makes ``exit()``/``quit()`` behave like ``sys.exit()`` (an error in that cell only), and when the
  kernel dies anyway (``os._exit``, a kill, a crash) starts a fresh one, re-runs the cells above that
  are not tests, and goes on;
- keeps at most ``max_output_bytes`` of output per cell;
- explains every limit it applied in the cell's output and in the notebook's "Grading notes" cell,
  and records the events in ``events_dir/<lab>/<student>.json`` for the instructor.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from time import monotonic
from typing import Any, Dict, List, Optional

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode, from_dict
from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade
from traitlets import Dict as DictTrait
from traitlets import Integer, List as ListTrait, Unicode

from autograder import sandbox

NOTES_CELL_ID = "grading-notes"
NOTES_TITLE = "## Grading notes"

# Run silently in every fresh grading kernel, before the notebook: exit()/quit() become sys.exit().
PREAMBLE = """
def _pkv_no_exit(*args, **kwargs):
    raise SystemExit("exit() and quit() do not stop a graded notebook")
get_ipython().user_ns.update(exit=_pkv_no_exit, quit=_pkv_no_exit)
get_ipython().ask_exit = _pkv_no_exit
del _pkv_no_exit
"""

MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "DefaultCPUAllocator", "std::bad_alloc",
                "Cannot allocate memory")


def error_output(name: str, message: str) -> NotebookNode:
    return from_dict({"output_type": "error", "ename": name, "evalue": message,
                      "traceback": [f"\x1b[0;31m{name}\x1b[0m: {message}"]})


def note_output(message: str) -> NotebookNode:
    return from_dict({"output_type": "stream", "name": "stderr", "text": f"[grading] {message}\n"})


class BoxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in ``autograder.sandbox``'s box, over Unix sockets."""

    box_level = Unicode("bwrap")
    memory_mb = Integer(4096)
    file_mb = Integer(512)
    readable = ListTrait(Unicode())
    hidden = ListTrait(Unicode())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.private_dir = tempfile.mkdtemp(prefix="pkv-kernel-")
        self.workdir = os.path.join(self.private_dir, "work")
        os.mkdir(self.workdir)
        self.transport = "ipc"
        self.connection_file = os.path.join(self.private_dir, "kernel.json")
        self.ip = os.path.join(self.private_dir, "ipc")

    def format_kernel_cmd(self, extra_arguments: Optional[List[str]] = None) -> List[str]:
        command = super().format_kernel_cmd(extra_arguments)
        spec = sandbox.BoxSpec(level=self.box_level, memory_mb=self.memory_mb, file_mb=self.file_mb, cwd=self.workdir,
                               private_dir=self.private_dir, readable=list(self.readable),
                               hidden=list(self.hidden))
        return [sys.executable, sandbox.__file__, spec.to_json(), "--", *command]

    def exit_status(self) -> Optional[int]:
        process = getattr(self.provisioner, "process", None)
        return None if process is None else process.poll()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self.private_dir, ignore_errors=True)

    cleanup_resources = run_sync(_async_cleanup_resources)


class HardenedExecute(Execute):
    """nbgrader's Execute with time budgets, a boxed kernel and crash recovery (see the module doc)."""

    cell_timeout = Integer(30, help="Seconds one cell may run before it is interrupted.").tag(config=True)
    notebook_timeout = Integer(120, help="Seconds of execution for a whole notebook.").tag(config=True)
    memory_mb = Integer(4096, help="Address-space limit of the grading kernel, in MiB.").tag(config=True)
    file_mb = Integer(512, help="Largest file the grading kernel may write, in MiB.").tag(config=True)
    max_output_bytes = Integer(200_000, help="Output kept per cell; the rest is dropped.").tag(config=True)
    max_restarts = Integer(3, help="Fresh kernels started after the kernel died.").tag(config=True)
    isolation = Unicode("auto", help="auto, bwrap, unshare or rlimits (see autograder.sandbox).").tag(config=True)
    hidden_paths = ListTrait(Unicode(), help="Folders the grading kernel must not see.").tag(config=True)
    readable_paths = ListTrait(Unicode(), help="Folders the grading kernel may read.").tag(config=True)
    events_dir = Unicode("", help="Folder of <lab>/<student>.json grading events (instructor only).").tag(config=True)
    lab_limits = DictTrait(help="Per assignment: {'06-x': {'notebook_timeout': 300, ...}}.").tag(config=True)

    # ---- limits ------------------------------------------------------------------------------------
    def _limit(self, name: str) -> int:
        assignment = (self.resources or {}).get("nbgrader", {}).get("assignment", "")
        return int(self.lab_limits.get(assignment, {}).get(name, getattr(self, name)))

    def isolation_level(self) -> str:
        if self.isolation != "auto":
            return self.isolation
        level, warning = sandbox.probe()
        if warning:
            self.log.warning("Grading isolation is '%s': %s", level, warning)
        return level

    def create_kernel_manager(self):
        self.km = BoxedKernelManager(kernel_name=self.kernel_name or "python3", config=self.config,
                                     box_level=self._level, memory_mb=self._limit("memory_mb"),
                                     file_mb=self._limit("file_mb"),
                                     readable=sandbox.python_paths() + list(self.readable_paths),
                                     hidden=list(self.hidden_paths))
        return self.km

    def _timeout_for(self, cell) -> int:
        return max(1, int(self._cell_deadline - monotonic() + 0.999))

    # ---- the run -------------------------------------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._level = self.isolation_level()
        self.timeout_func = self._timeout_for
        self.iopub_timeout = 5
        self.shutdown_kernel = "immediate"  # nothing to save: a graceful shutdown only costs seconds
        self.events: List[Dict[str, Any]] = []
        started = monotonic()
        self._notebook_deadline = started + self._limit("notebook_timeout")
        replayable: List[int] = []
        index, restarts = 0, 0
        cells = self.nb.cells
        while index < len(cells):
            with self.setup_kernel():
                self._copy_assignment_files()
                self._silent(PREAMBLE)
                if restarts:
                    self._replay(replayable)
                while index < len(cells):
                    outcome = self._run_cell(cells[index], index)
                    index += 1
                    ran = cells[index - 1]
                    if outcome == "ok" and ran.cell_type == "code" and not is_grade(ran):
                        replayable.append(index - 1)
                    if outcome == "dead":
                        restarts += 1
                        break
            if restarts > self.max_restarts and index < len(cells):
                self._skip_rest(index, "Not run: the kernel died {} times, so grading stopped here.".format(restarts))
                break
        self._no_points_for_delegation()
        self.set_widgets_metadata()
        self._finish(monotonic() - started)
        return self.nb, self.resources

    def _run_cell(self, cell, index: int) -> str:
        if cell.cell_type != "code" or not cell.source.strip():
            return "ok"
        remaining = self._notebook_deadline - monotonic()
        if remaining <= 0:
            budget = self._limit("notebook_timeout")
            cell.outputs = [error_output("TimeBudgetExceeded",
                                         f"Not run: this notebook used up its grading time ({budget} s in all), "
                                         "so this cell scores 0. A cell above ran too long: see its 'Time limit' "
                                         "message.")]
            self._event(cell, index, "not-run", "notebook time budget spent")
            return "skipped"
        limit = int(min(self._limit("cell_timeout"), remaining) + 0.5) or 1
        self._cell_deadline = monotonic() + limit
        self._timed_out = False
        self._cut = False
        self._cell_bytes = 0
        self.error_on_timeout = {
            "ename": "TimeLimitExceeded",
            "evalue": f"Time limit: this cell ran for more than {limit} s and was stopped, so it scores 0. Look for "
                      "a loop that never ends (a condition that never changes, a list that never shrinks).",
            "traceback": []}
        self.error_on_timeout["traceback"] = [f"\x1b[0;31mTimeLimitExceeded\x1b[0m: {self.error_on_timeout['evalue']}"]
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            status = self.km.exit_status() if self.km is not None else None
            cell.outputs.append(error_output("KernelDied", self._death_message(status)))
            self._event(cell, index, "kernel-died", f"exit status {status}")
            return "dead"
        except CellTimeoutError:
            cell.outputs.append(error_output(
                "TimeLimitExceeded", f"Time limit: this cell ran for more than {limit} s and did not stop when "
                "interrupted, so its kernel was stopped and this cell scores 0. The cells below ran in a fresh "
                "kernel."))
            self._event(cell, index, "timeout", f"> {limit} s, kernel did not answer the interrupt")
            return "dead"
        if self._timed_out:
            # The interrupt we sent shows as a KeyboardInterrupt: the time-limit message says it better.
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "KeyboardInterrupt"]
            self._event(cell, index, "timeout", f"> {limit} s")
        if self._cut:
            cell.outputs.append(note_output(f"output cut after {self.max_output_bytes} bytes"))
            self._event(cell, index, "output-cut", f"> {self.max_output_bytes} bytes")
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        if any(sign in f"{o.get('ename')}: {o.get('evalue')}" for o in errors for sign in MEMORY_SIGNS):
            cell.outputs.append(note_output(
                f"Memory limit: the grading kernel may use at most {self._limit('memory_mb')} MiB, and this cell "
                "asked for more."))
            self._event(cell, index, "memory", f"> {self._limit('memory_mb')} MiB")
        if any(o.get("ename") == "SystemExit" for o in errors):
            cell.outputs.append(note_output("This cell called sys.exit() (or exit()/quit()): graded code must "
                                            "return normally."))
            self._event(cell, index, "exit-called", "SystemExit")
        return "error" if errors else "ok"

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    def output(self, outs, msg, display_id, cell_index):
        size = len(json.dumps(msg.get("content", {}), default=str))
        self._cell_bytes = getattr(self, "_cell_bytes", 0) + size
        if self._cell_bytes > self.max_output_bytes and msg.get("msg_type") != "error":
            self._cut = True
            return None
        return super().output(outs, msg, display_id, cell_index)

    # ---- helpers -----------------------------------------------------------------------------------
    def _copy_assignment_files(self) -> None:
        """The kernel works in a private copy of the assignment's data files, never in the grading folder."""
        source = (self.resources or {}).get("metadata", {}).get("path")
        if not source or not os.path.isdir(source):
            return
        for item in Path(source).iterdir():
            if item.suffix == ".ipynb" or item.is_symlink():
                continue
            target = Path(self.km.workdir) / item.name
            if item.is_dir():
                shutil.copytree(item, target, symlinks=False, dirs_exist_ok=True)
            elif item.is_file():
                shutil.copy(item, target)

    def _no_points_for_delegation(self) -> None:
        """A TODO that a hidden check caught delegating to the reference earns nothing in any test cell:
        visible tests run the student's code without the integrity guard, so they are zeroed too."""
        graded = [c for c in self.nb.cells if c.cell_type == "code" and is_grade(c)]
        caught = [c for c in graded if any("[integrity]" in f"{o.get('evalue', '')}{''.join(o.get('traceback', []))}"
                                           for o in c.get("outputs", []) if o.get("output_type") == "error")]
        if not caught:
            return
        graded_ids, caught_ids = {id(c) for c in graded}, {id(c) for c in caught}
        for index, cell in enumerate(self.nb.cells):
            if id(cell) in graded_ids and id(cell) not in caught_ids:
                cell.outputs.append(error_output(
                    "IntegrityError", "No points: a hidden check found that your TODO hands its work to paged_kv's "
                    "reference implementation (see its message), so no test of this notebook counts."))
                self._event(cell, index, "integrity", "delegation found by a hidden check")

    def _silent(self, code: str, timeout: Optional[float] = None) -> bool:
        """Run code without recording it; False when the kernel died or it failed."""
        try:
            msg_id = self.kc.execute(code, silent=True, store_history=False)
            reply = self._wait_reply(msg_id, timeout)
        except (DeadKernelError, CellTimeoutError, TimeoutError):
            return False
        return reply is not None and reply["content"].get("status") == "ok"

    def _wait_reply(self, msg_id: str, timeout: Optional[float]):
        deadline = monotonic() + (timeout if timeout is not None else 30)
        while monotonic() < deadline:
            try:
                msg = run_sync(self.kc.shell_channel.get_msg)(timeout=1)
            except Exception:  # noqa: BLE001  (queue.Empty: check the kernel and keep waiting)
                if self.km is not None and not run_sync(self.km.is_alive)():
                    raise DeadKernelError("Kernel died")
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        raise TimeoutError("no reply in time")

    def _replay(self, indices: List[int]) -> None:
        for index in indices:
            remaining = self._notebook_deadline - monotonic()
            if remaining <= 0 or not self._silent(self.nb.cells[index].source, timeout=remaining):
                self.log.warning("Replay stopped at cell %d", index)
                return

    def _skip_rest(self, start: int, message: str) -> None:
        for index in range(start, len(self.nb.cells)):
            cell = self.nb.cells[index]
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [error_output("NotRun", message)]

    def _death_message(self, status: Optional[int]) -> str:
        how = ""
        if status is not None and status > 128:
            how = f", killed by signal {status - 128}" + (" (perhaps out of memory)" if status == 137 else "")
        return (f"The kernel stopped while running this cell (exit status {status}{how}), so this cell scores 0. "
                "Graded code must not call os._exit() or kill its own process. The cells below ran in a fresh "
                "kernel, after the cells above them that are not tests were run again.")

    def _event(self, cell, index: int, kind: str, detail: str) -> None:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        self.events.append({"cell": grade_id or f"cell {index}", "kind": kind, "detail": detail,
                            "graded": bool(is_grade(cell))})

    def _finish(self, seconds: float) -> None:
        nbgrader = (self.resources or {}).get("nbgrader", {})
        record = {"student": nbgrader.get("student"), "assignment": nbgrader.get("assignment"),
                  "isolation": self._level, "seconds": round(seconds, 2), "events": self.events}
        self.resources.setdefault("nbgrader", {})["grading_events"] = record
        if self.events_dir and record["assignment"] and record["student"]:
            path = events_path(self.events_dir, record["assignment"], record["student"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=1))
        if self.events:
            lines = [f"- {e['cell']}: {describe(e)}" for e in self.events if e["graded"]]
            others = [e for e in self.events if not e["graded"]]
            if others:
                kinds = sorted({describe(e, detail=False) for e in others})
                lines.append(f"- {len(others)} cell(s) that are not tests: {'; '.join(kinds)}")
            add_notes(self.nb, ["While grading:"] + lines)


def events_path(events_dir, assignment: str, student: str) -> Path:
    return Path(events_dir) / assignment / f"{student}.json"


def describe(event: Dict[str, Any], detail: bool = True) -> str:
    text = {"timeout": "stopped by the time limit", "not-run": "not run (the notebook's grading time was spent)",
            "kernel-died": "the kernel died", "memory": "hit the memory limit",
            "output-cut": "too much output, cut", "exit-called": "called sys.exit()",
            "integrity": "no points: the TODO delegates to the reference"}.get(event["kind"], event["kind"])
    return text + (f" ({event['detail']})" if detail and event["kind"] not in ("not-run", "integrity") else "")


def add_notes(nb, lines: List[str]) -> None:
    """Append lines to the notebook's "Grading notes" markdown cell (first cell; made if missing)."""
    cell = next((c for c in nb.cells if c.get("id") == NOTES_CELL_ID), None)
    if cell is None:
        cell = from_dict({"cell_type": "markdown", "id": NOTES_CELL_ID, "metadata": {},
                          "source": f"{NOTES_TITLE}\n\nThe autograder changed or noticed the following. "
                                    "Points were given for what ran."})
        nb.cells.insert(0, cell)
    cell.source = cell.source.rstrip("\n") + "\n\n" + "\n".join(lines)
