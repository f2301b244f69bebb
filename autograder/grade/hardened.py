"""Hardened notebook execution for ``nbgrader autograde``: trusted verdicts, a boxed kernel, time budgets.

``HardenedExecute`` replaces nbgrader's ``Execute`` preprocessor (``nbgrader_config.py`` does this, so
every ``nbgrader autograde`` run with the course's config is hardened). For each notebook it

- decides every graded cell's score in this process, never in the kernel: the cell's text (from the
  lab's source notebook, hidden tests included) runs here (``autograder.verdict.cells``), driving the
  student's objects in the kernel through the grading channel (``autograder.verdict.channel``); hidden
  tests never reach the kernel, and a visible test cell runs in the kernel only for what it shows;
- reads the student's cells for code that reaches the reference or the grading machinery
  (``autograder.verdict.provenance``): a finding zeroes the TODO it is in (or every test below it);
- does not run the given cells below the last graded cell and the last cell the student wrote (they
  cannot change a score, they only show what was built): labs whose closing demos are slow grade faster;

- gives every cell at most ``cell_timeout`` seconds and the whole notebook ``notebook_timeout``
  seconds of execution; a cell past its time is interrupted and scores 0, and once the notebook's
  time is spent the remaining cells are not run and their tests score 0;
- runs the kernel in ``autograder.box.sandbox``'s box (no network, ``memory_mb`` of address space, a
  read-only system, a private working folder instead of the grading folder);
- makes ``exit()``/``quit()`` behave like ``sys.exit()`` (an error in that cell only), and when the
  kernel dies anyway (``os._exit``, a kill, a crash) starts a fresh one, re-runs the cells above that
  are not tests, and goes on;
- keeps at most ``max_output_bytes`` of output per cell;
- speaks the notebook's language (``autograder.course.languages``): the messages and notes it writes for the
  student, and every kernel's ``PAGED_KV_LANG``;
- explains every limit it applied in the cell's output and in the notebook's "Grading notes" cell,
  and records the events in ``events_dir/<lab>/<student>.json`` for the instructor.

It wires the pieces of ``autograder.grade`` that do each job: ``submission`` (the notebook read against its
source), ``lab_boxes`` (a box's edition, what it may read, the isolation probe), ``boxed_kernels`` (the kernels'
manager and spares), ``silent_runs`` (code run in a kernel unrecorded), ``graded_cells`` (where and how each graded
cell is decided) with ``part_boxes`` (a part's own box) and ``compile_box`` (lab 06's), ``cell_limits`` (what a
limit shows), ``findings`` (what a finding costs), ``grading_record`` (what leaves grading) and ``timing``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from time import monotonic
from typing import Any, Dict, List, Optional

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import from_dict
from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade
from traitlets import Dict as DictTrait
from traitlets import Bool, Float, Integer, List as ListTrait, Unicode

from autograder.course import languages
from autograder.course.notebook_client import PollingClient
from autograder.verdict.scoring import (
    MAX_ERROR_TEXT,
    error_output,
)
from autograder.verdict.events import (
    EventKind,
    events_path,
    write_record,
)
from autograder.box import limits, sandbox, trust
from autograder.grade import boxed_kernels, compile_box, findings, graded_cells, grading_record, lab_boxes
from autograder.grade import cell_limits, silent_runs, submission
from autograder.grade.cell_limits import MEMORY_SIGNS
from autograder.grade.boxed_kernels import BoxedKernelManager
from autograder.grade.notebook_run import Limits, NotebookRun
from autograder.grade.silent_runs import PREAMBLE, Kernel
from autograder.grade.timing import Phases, timed
from autograder.editions import manifest as lab_todos
from autograder.verdict import cells as verdicts
from autograder.verdict import kernels as kernel_builds
from autograder.verdict import channel as grading_channel
from autograder.verdict import notebook as nbview
from autograder.verdict import provenance
from autograder.verdict.student_text import N_, language_of
from paged_kv.lab.i18n import speaking


class HardenedExecute(PollingClient, Execute):
    """nbgrader's Execute with time budgets, a boxed kernel and crash recovery (see the module doc). It is the
    ``KernelPort`` of the pieces that grade (``run_visible``, ``main_kernel``, ``start_part_kernel``); one
    notebook's state is its ``run`` (a ``NotebookRun``, made by ``preprocess``)."""

    cell_timeout = Integer(30, help="Seconds one cell may run before it is interrupted.").tag(config=True)
    notebook_timeout = Integer(120, help="Seconds of execution for a whole notebook.").tag(config=True)
    memory_mb = Integer(
        limits.MEMORY_MB,
        help="Address space of the grading kernel's each process, in MiB (RLIMIT_AS, at every box level).",
    ).tag(config=True)
    file_mb = Integer(512, help="Largest file the grading kernel may write, in MiB.").tag(config=True)
    max_output_bytes = Integer(200_000, help="Output kept per cell; the rest is dropped.").tag(config=True)
    ram_mb = Integer(
        limits.RAM_MB,
        help="Memory of the kernel and all its children together, in MiB (a cgroup's memory.max, where cgroups exist).",
    ).tag(config=True)
    pids = Integer(256, help="Processes and threads of the kernel and its children together (cgroup).").tag(config=True)
    cpus = Float(1.0, help="CPU cores the kernel and its children may use together (cgroup).").tag(config=True)
    scratch_mb = Integer(1024, help="Size of the kernel's writable scratch folder, in MiB (tmpfs).").tag(config=True)
    max_restarts = Integer(3, help="Fresh kernels started after the kernel died.").tag(config=True)
    isolation = Unicode("auto", help="auto, bwrap, unshare or rlimits (see autograder.box.sandbox).").tag(config=True)
    hidden_paths = ListTrait(Unicode(), help="Folders the grading kernel must not see.").tag(config=True)
    readable_paths = ListTrait(Unicode(), help="Folders the grading kernel may read.").tag(config=True)
    private_roots = ListTrait(
        Unicode(), help="Folders the kernel sees only through readable_paths (and the Python environment inside them)."
    ).tag(config=True)
    events_dir = Unicode("", help="Folder of <lab>/<student>.json grading events (instructor only).").tag(config=True)
    lab_limits = DictTrait(help="Per assignment: {'06-x': {'notebook_timeout': 300, ...}}.").tag(config=True)
    source_dir = Unicode("", help="Folder of the labs' source notebooks (the trusted text of every test).").tag(
        config=True
    )
    spare_kernel = Bool(True, help="Boot the next notebook's kernel while this one's feedback is written.").tag(
        config=True
    )
    trusted_paths = ListTrait(
        Unicode(),
        help="What no grading kernel may read (the isolation probe checks it before grading: autograder.box.trust).",
    ).tag(config=True)
    allow_unisolated = Bool(
        False,
        help="Grade even where a kernel could read trusted files or would run as the "
        "grading account (never as root); PAGED_KV_ALLOW_UNISOLATED=1.",
    ).tag(config=True)
    findings_cost_points = Bool(
        True,
        help="Provenance findings zero the tests they affect (False: they are only "
        "reported; the red team uses it to show that delegation earns nothing "
        "by construction).",
    ).tag(config=True)

    # ---- limits ------------------------------------------------------------------------------------
    def _assignment(self) -> str:
        return (self.resources or {}).get("nbgrader", {}).get("assignment", "")

    def limits(self) -> Limits:
        """This lab's limits: each setting, or the lab's own in ``lab_limits`` (``Limits.resolve``)."""
        return Limits.resolve(self, self.lab_limits, self._assignment())

    def isolation_level(self) -> str:
        if self.isolation != "auto":
            return self.isolation
        level, warning = sandbox.probe()
        if warning:
            self.log.warning("Grading isolation is '%s': %s", level, warning)
        return level

    def _edition(self, part: Optional[str] = None) -> str:
        """The folder of the package edition a box of this lab imports (``lab_boxes.edition``), built once."""
        return lab_boxes.edition(self._assignment(), part, self.__dict__.setdefault("_edition_dirs", {}), self.log)

    def _kernel_settings(self, part: Optional[str] = None) -> Dict[str, Any]:
        edition = self._edition(part)
        limits = self.run.limits
        return dict(
            kernel_name=self.kernel_name or "python3",
            box_level=self._level,
            memory_mb=limits.memory_mb,
            file_mb=limits.file_mb,
            ram_mb=limits.ram_mb,
            pids=limits.pids,
            cpus=limits.cpus,
            scratch_mb=limits.scratch_mb,
            readable=self._readable(),
            hidden=list(self.hidden_paths),
            pythonpath=[edition],
        )

    def _readable(self) -> List[str]:
        """What a box shows of the grader's file system (``lab_boxes.readable``)."""
        return lab_boxes.readable(self.private_roots, self.readable_paths)

    def _trusted(self) -> List[str]:
        """What no box may read (``lab_boxes.trusted``)."""
        return lab_boxes.trusted(self.trusted_paths, self._source_notebook(), self.events_dir)

    @timed("isolation probe")
    def isolation_report(self) -> trust.Report:
        """The isolation probe's report for this lab's box (run once per grading process and setting)."""
        return lab_boxes.isolation_report(
            self._level, self._readable(), list(self.hidden_paths), self._trusted(), self.allow_unisolated
        )

    def _kernel_manager(self, part: Optional[str] = None):
        """A boxed kernel manager for the main box (``part`` None) or a part's box: the spare this worker
        booted after its last notebook with the same settings (it has run nothing yet), else a new one."""
        settings = self._kernel_settings(part)
        spare = boxed_kernels.take_spare(settings)
        if spare is not None:
            self._spares_used = getattr(self, "_spares_used", 0) + 1
            return spare
        return BoxedKernelManager(config=self.config, **settings)

    def create_kernel_manager(self):
        self.km = self._kernel_manager()
        return self.km

    # ---- the port to the kernels (``notebook_run.KernelPort``) ----------------------------------------
    def main_kernel(self) -> Kernel:
        """The notebook's main kernel as it is now (its manager, client and grading channel)."""
        return Kernel(self.km, self.kc, self._channel)

    def start_part_kernel(self, part: str) -> Kernel:
        """A kernel started in ``part``'s own box, its preamble run in it and the assignment's files copied."""
        kernel = boxed_kernels.start_kernel(self._kernel_manager(part), self.extra_arguments, self.startup_timeout)
        try:
            boxed_kernels.copy_assignment_files(self.resources, kernel.km)
        except BaseException:
            boxed_kernels.close_kernel(kernel)
            raise
        silent_runs.run_silently(kernel, self.preamble(), self.run.limits.cell_timeout)
        return kernel

    def run_visible(self, cell, index: int) -> str:
        """Run ``cell`` in the main kernel as the student sees it (``_execute_in_kernel``)."""
        return self._execute_in_kernel(cell, index)

    def _start_spare(self) -> None:
        """Boot the next notebook's kernels now (one per box this notebook used, nothing run in them)."""
        if not self.spare_kernel:
            return
        parts = [None] + sorted(self._graded.parts_used)
        boxed_kernels.start_spares(
            (self._kernel_settings(part) for part in parts), self.config, self.extra_arguments or []
        )

    @property
    def phases(self) -> Phases:
        """Where this notebook's grading time went (its run's: ``timing.timed`` adds to it)."""
        return self.run.phases

    def _timeout_for(self, cell) -> int:
        return max(1, int(self._cell_deadline - monotonic() + 0.999))

    # ---- the run -------------------------------------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        # What is decided here (the checks' messages, the notes) speaks the notebook's language, and so does every
        # kernel it starts (``preamble``).
        with speaking(language_of(nb)):
            return self._grade(nb, resources, km)

    def preamble(self) -> str:
        """What every fresh kernel of this notebook runs first, unrecorded: ``PREAMBLE``, and its environment's
        ``PAGED_KV_LANG`` set to the notebook's language (``languages.kernel_preamble``), whatever the grader's."""
        return PREAMBLE + languages.kernel_preamble(self._language())

    def _grade(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._level = self.isolation_level()
        self.timeout_func = self._timeout_for
        self.iopub_timeout = 5
        self.shutdown_kernel = "immediate"  # nothing to save: a graceful shutdown only costs seconds
        self._compile_dirs: List[str] = []
        self._spares_used = 0
        started = monotonic()
        limits = self.limits()
        self.run = NotebookRun(
            lab=self._assignment(),
            nb=self.nb,
            limits=limits,
            deadline=started + limits.notebook_timeout,
            language=self._language(),
            todos=lab_todos.BY_LAB.get(self._assignment()),
        )
        run = self.run
        self._read_submission()
        report = self.isolation_report()
        if report.refused:
            lab_boxes.refuse(self.nb, run.verdicts, run.events, report)
            self._finish(monotonic() - started)
            return self.nb, self.resources
        replayable = run.replayable  # cells a part's box runs too (``PartBox``)
        index, restarts = 0, 0
        # Without bubblewrap's namespaces nothing keeps a part's box from the notebook's kernel (a Unix or
        # loopback socket): there a part's hidden tests are decided once the notebook's kernel has run every cell
        # and is shut down, one part's box alive at a time (``GradedCells.decide_deferred``).
        self._graded = graded_cells.GradedCells(run, self, deferred=self._level != "bwrap")
        cells = self.nb.cells
        while index < len(cells):
            booting = monotonic()
            with self.setup_kernel():
                run.phases.add("kernel start", monotonic() - booting)
                self._channel = grading_channel.Channel(self.km.private_dir)
                self._kills_seen = 0
                try:
                    boxed_kernels.copy_assignment_files(self.resources, self.km)
                    silent_runs.silent(self.kc, self.km, self.preamble())
                    if restarts:
                        self._replay(replayable)
                    while index < len(cells):
                        outcome = self._run_cell(cells[index], index)
                        index += 1
                        ran = cells[index - 1]
                        self._note_memory_kills(ran, index - 1)
                        if outcome == "ok" and ran.cell_type == "code" and not is_grade(ran):
                            replayable.append(index - 1)
                        if outcome == "dead":
                            restarts += 1
                            break
                finally:
                    self._channel.close()
            if restarts > self.max_restarts and index < len(cells):
                self._skip_rest(index, "Not run: the kernel died {} times, so grading stopped here.".format(restarts))
                break
        self._graded.decide_deferred()  # the notebook's kernel is down
        run.events += verdicts.CONTEXT.kernel_events()
        verdicts.CONTEXT.reset()
        self._graded.close()
        for allocation in self._compile_dirs:
            allocation.release()
        self._start_spare()
        self._apply_findings()
        self._remove_secrets()
        self.set_widgets_metadata()
        self._finish(monotonic() - started)
        return self.nb, self.resources

    def _remove_secrets(self) -> None:
        """No line of the hidden tests or graders leaves grading (``grading_record.remove_secrets``)."""
        source = self._source_notebook()
        if source is None:
            return
        grading_record.remove_secrets(source, self.nb.cells, self.run.verdicts, self.run.events)

    # ---- what was submitted ----------------------------------------------------------------------------
    def _source_notebook(self) -> Optional[Path]:
        return submission.source_notebook(self.source_dir, self.resources)

    @timed("reading the submission")
    def _read_submission(self) -> None:
        """Classify the cells against the lab's source, read the student's text, find the lab's rules
        (``autograder.grade.submission``)."""
        self.findings: List[provenance.Finding] = []
        self.similar: List[tuple] = []
        source = self._source_notebook()
        if source is None:
            self.log.error(
                "No source notebook for this assignment under %s: its graded cells cannot be decided and score 0.",
                self.source_dir,
            )
            return
        read = submission.read(self.nb, source)
        self.run.view, self.run.rules, self._last_that_counts = read.view, read.rules, read.last_that_counts
        self.findings, self.similar = read.findings, read.similar
        view = self.run.view
        verdicts.CONTEXT.reset(view, lambda: kernel_builds.KernelBuilder(view, self._start_compile_box))

    def _start_compile_box(self) -> subprocess.Popen:
        """A fresh boxed process that builds the student's kernels from their text (``compile_box``)."""
        return compile_box.start(
            level=self._level,
            edition=self._edition(),
            readable=self._readable(),
            hidden=list(self.hidden_paths),
            memory_mb=self.run.limits.memory_mb,
            file_mb=self.run.limits.file_mb,
            ram_mb=self.run.limits.ram_mb,
            pids=self.run.limits.pids,
            cpus=self.cpus,  # (the setting, not the lab's own: as it always was)
            scratch_mb=self.run.limits.scratch_mb,
            allocations=self._compile_dirs,
            log=self.log,
        )

    # ---- one cell --------------------------------------------------------------------------------------
    def _run_cell(self, cell, index: int) -> str:
        if cell.cell_type != "code" or not cell.source.strip():
            return "ok"
        if is_grade(cell):
            return self._graded.grade(cell, index)
        if self._only_shows(index):
            shown = cell_limits.not_run_demo(self._language())
            cell.outputs = [from_dict({"output_type": "stream", "name": "stdout", "text": shown})]
            return "skipped"
        return self._execute_in_kernel(cell, index)

    def _only_shows(self, index: int) -> bool:
        """A given cell below the last graded cell and below every cell the student wrote: it cannot change a
        score or anything the student's code sees, it only shows what was built."""
        view = self.run.view
        if not view or index >= len(view) or view[index].kind != nbview.GIVEN:
            return False
        return index > self._last_that_counts

    def _language(self) -> str:
        """The language of the notebook graded (its release's metadata): what the cells' notes are written in."""
        return language_of(self.nb)

    @timed("notebook cells")
    def _execute_in_kernel(self, cell, index: int) -> str:
        run = self.run
        if run.budget_spent(cell, index):
            return "skipped"
        self._graded.close_part_boxes()  # a part's box lives only while its part is decided: never beside a cell
        remaining = run.remaining()
        limit = int(min(run.limits.cell_timeout, remaining) + 0.5) or 1
        self._cell_deadline = monotonic() + limit
        self._timed_out = False
        self._cut = False
        self._cell_bytes = 0
        self.error_on_timeout = cell_limits.time_limit_error(limit, self._language())
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            status = self.km.exit_status() if self.km is not None else None
            out_of_memory = self.km is not None and getattr(self.km, "out_of_memory", lambda: False)()
            message = cell_limits.death_message(status, out_of_memory, run.limits.ram_mb, self._language())
            cell.outputs.append(error_output("KernelDied", message))
            run.event(cell, index, EventKind.KERNEL_DIED, f"exit status {status}")
            if self._new_memory_kills():
                run.event(
                    cell, index, EventKind.MEMORY, N_(f"> {run.limits.ram_mb} MiB for the kernel and its children")
                )
            return "dead"
        except CellTimeoutError:
            cell.outputs.append(cell_limits.did_not_stop(limit, self._language()))
            run.event(cell, index, EventKind.TIMEOUT, N_(f"> {limit} s, kernel did not answer the interrupt"))
            return "dead"
        if self._timed_out:
            # The interrupt we sent shows as a KeyboardInterrupt: the time-limit message says it better.
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "KeyboardInterrupt"]
            run.event(cell, index, EventKind.TIMEOUT, f"> {limit} s")
        if self._cut:
            cell.outputs.append(cell_limits.output_cut(self.max_output_bytes, self._language()))
            run.event(cell, index, EventKind.OUTPUT_CUT, f"> {self.max_output_bytes} bytes")
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        if any(sign in f"{o.get('ename')}: {o.get('evalue')}" for o in errors for sign in MEMORY_SIGNS):
            cell.outputs.append(cell_limits.over_memory(run.limits.memory_mb, self._language()))
            run.event(cell, index, EventKind.MEMORY, f"> {run.limits.memory_mb} MiB")
        if any(o.get("ename") == "SystemExit" for o in errors):
            cell.outputs.append(cell_limits.exit_called(self._language()))
            run.event(cell, index, EventKind.EXIT_CALLED, "SystemExit")
        return "error" if errors else "ok"

    def _new_memory_kills(self) -> int:
        """Processes the kernel's memory limit stopped since we last looked (its cgroup counts them)."""
        kills = self.km.oom_kills() if self.km is not None and hasattr(self.km, "oom_kills") else 0
        seen = getattr(self, "_kills_seen", 0)
        self._kills_seen = max(kills, seen)
        return max(0, kills - seen)

    def _note_memory_kills(self, cell, index: int) -> None:
        """Report a kill by the memory limit on the cell during which it was seen. A process a cell forked can
        outlive the cell and be stopped while a later cell runs: it is reported there, never lost."""
        if self._new_memory_kills():
            cell.outputs.append(cell_limits.process_killed(self.run.limits.ram_mb, self._language()))
            self.run.event(
                cell, index, EventKind.MEMORY, N_(f"> {self.run.limits.ram_mb} MiB for the kernel and its children")
            )

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        if msg.get("msg_type") == "error":  # capped like every other output (an error can be megabytes)
            cell_limits.cap_error(content)
        size = len(json.dumps(content, default=str))
        self._cell_bytes = getattr(self, "_cell_bytes", 0) + size
        if self._cell_bytes > self.max_output_bytes and (
            msg.get("msg_type") != "error"
            or self._cell_bytes > self.max_output_bytes + cell_limits.MAX_TRACEBACK + 2 * MAX_ERROR_TEXT
        ):
            self._cut = True
            return None
        return super().output(outs, msg, display_id, cell_index)

    def _apply_findings(self) -> None:
        """No points for a TODO whose text reaches the reference or the machinery (``findings``)."""
        findings.apply_findings(self.run, self.findings, self.similar, bool(self.findings_cost_points))

    def _replay(self, indices: List[int]) -> None:
        for index in indices:
            remaining = self.run.remaining()
            if remaining <= 0 or not silent_runs.silent(
                self.kc, self.km, self.nb.cells[index].source, timeout=remaining
            ):
                self.log.warning("Replay stopped at cell %d", index)
                return

    def _skip_rest(self, start: int, message: str) -> None:
        for index in range(start, len(self.nb.cells)):
            cell = self.nb.cells[index]
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [error_output("NotRun", message)]

    def _finish(self, seconds: float) -> None:
        """The events record (in ``resources`` and ``events_dir``) and the student's notes (``grading_record``)."""
        record = grading_record.record(self.resources, self.run, self._level, seconds, self._spares_used)
        self.resources.setdefault("nbgrader", {})["grading_events"] = record
        if self.events_dir and record["assignment"] and record["student"]:
            write_record(events_path(self.events_dir, record["assignment"], record["student"]), record)
        grading_record.add_grading_notes(self.nb, self.run.events)
