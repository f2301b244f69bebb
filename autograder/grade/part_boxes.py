"""A part's own box: the kernel that grades one part of a multi-part lab, and the cells it replays first."""

from __future__ import annotations

import ast
from time import monotonic
from typing import Any, Callable, List, Optional

from nbclient.util import run_sync

from autograder.grade import boxed_kernels, silent_runs
from autograder.grade.silent_runs import Kernel
from autograder.grade.timing import timed
from autograder.verdict import cells as verdicts
from autograder.verdict import channel as grading_channel
from autograder.verdict import notebook as nbview

STARTS = 2  # a part's box that does not start is started again (a fresh box, another uid) this many times in all


class PartBox:
    """The box that grades one part of a multi-part lab (a ``Part`` with ``own_box``: ``autograder/course/model.py``, declared by the lab in ``autograder/labs/``).

    Its edition of the package leaves out that part's TODOs only (and every later lab's), so
    ``with_reference_todos`` gives the student's code of this part the reference's other parts, and nothing
    in the process implements this part. Before a graded cell of the part it runs, silently and in order,
    every cell above that the notebook's main kernel ran without error (the student's code and the given
    cells); the cell is then decided against it as the main kernel's cells are. The main kernel (whose
    edition leaves out every part) still runs the notebook for what the feedback shows.
    """

    def __init__(self, executor, part: str, decide_in: Callable[[Any, Kernel], tuple]):
        self.executor, self.part = executor, part
        self.decide_in = decide_in  # (graded cell, kernel) -> (verdict, kernel dead?): ``GradedCells.verdict``
        self.kernel: Optional[Kernel] = None
        self.done = -1  # the last cell index it has run
        self.broken = ""  # why it cannot grade any more (shown in the verdict)

    def verdict(self, model, index: int) -> "verdicts.Verdict":
        if not self.broken:
            self._catch_up(index)
        if self.broken:
            return verdicts.failed(model.grade_id, grading_channel.KernelGone(self.broken))
        verdict, dead = self.decide_in(model, self.kernel)
        if dead:
            self.broken = "the kernel that grades this part stopped while it was tested"
        return verdict

    @timed("part boxes starting")
    def _start(self) -> None:
        """Start the part's box. A box that fails to start (nothing of the student's has run in it) is discarded,
        its uid released, and started again once with a fresh one before the part is given up."""
        for attempt in range(STARTS):
            try:
                self._start_once()
                return
            except Exception:  # noqa: BLE001 - the last failure is the part's reason
                if attempt == STARTS - 1:
                    raise

    def _start_once(self) -> None:
        executor = self.executor
        km = executor._kernel_manager(self.part)
        kc = None
        try:
            if not km.has_kernel:
                run_sync(km.start_kernel)(extra_arguments=list(executor.extra_arguments or []))
            kc = km.client()
            kc.start_channels()
            run_sync(kc.wait_for_ready)(timeout=executor.startup_timeout)
        except Exception:
            if kc is not None:
                try:
                    kc.stop_channels()
                except Exception:  # noqa: BLE001
                    pass
            boxed_kernels.discard(km)
            raise
        kc.allow_stdin = False
        self.kernel = Kernel(km, kc, grading_channel.Channel(km.private_dir))
        boxed_kernels.copy_assignment_files(executor.resources, km)
        silent_runs.run_silently(self.kernel, executor.preamble(), executor._limit("cell_timeout"))

    @timed("part boxes replaying")
    def _catch_up(self, index: int) -> None:
        executor = self.executor
        if self.kernel is None:
            try:
                self._start()
            except Exception as error:  # noqa: BLE001 - the part scores 0, with the reason
                self.broken = f"the kernel that grades this part could not start ({type(error).__name__})"
                return
        for cell_index, code in self._replay_plan(index):
            remaining = executor._notebook_deadline - monotonic()
            if remaining <= 0:
                self.broken = "the notebook's grading time was spent before this part's own kernel ran your cells"
                return
            outcome = silent_runs.run_silently(self.kernel, code, min(executor._limit("cell_timeout"), remaining))
            if outcome in ("dead", "timeout"):
                self.broken = (
                    f"the kernel that grades this part {'stopped' if outcome == 'dead' else 'ran out of time'} "
                    f"while it ran cell {cell_index} again (cells above a part's tests run again in a "
                    "kernel of that part's own)"
                )
                return
        self.done = max([self.done] + [i for i in self.executor._replayable if i < index])

    def _replay_plan(self, index: int) -> List[tuple]:
        """``(cell index, code)`` to run before the graded cell at ``index``, in order: every cell the student
        wrote that ran without error in the main kernel, whole, and of the given cells only the statements
        that bind what the student's cells read (their imports and helpers, and what those need): a part's
        box does not redraw pictures or rerun demos. Without the lab's source, every cell that ran."""
        executor = self.executor
        ran = [i for i in executor._replayable if self.done < i < index]
        view = executor._view
        if view is None:
            return [(i, executor.nb.cells[i].source) for i in ran]
        student = [c for c in view if c.student and c.index < index and c.tree is not None]
        needed = set().union(*(nbview.free_names(c.tree) for c in student)) if student else set()
        statements = [
            s for s in nbview.given_statements([c for c in view if c.index < index]) if s.cell in executor._replayable
        ]
        chosen = {id(statements[i]) for i in verdicts.plan_slice(needed, statements, set())}
        plan = []
        for i in ran:
            if view[i].student:
                plan.append((i, executor.nb.cells[i].source))
            else:
                code = "\n".join(ast.unparse(s.node) for s in statements if s.cell == i and id(s) in chosen)
                if code:
                    plan.append((i, code))
        return plan

    def close(self) -> None:
        if self.kernel is None:
            return
        try:
            self.kernel.channel.close()
        except OSError:
            pass
        try:
            self.kernel.kc.stop_channels()
        except Exception:  # noqa: BLE001
            pass
        boxed_kernels.discard(self.kernel.km)
        self.kernel = None
        self.done, self.broken = -1, ""  # a box started again for this part replays from the top
