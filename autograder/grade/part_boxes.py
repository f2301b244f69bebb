"""A part's own box: the kernel that grades one part of a multi-part lab, and the cells it replays first."""

from __future__ import annotations

import ast
from typing import Any, Callable, List, Optional

from autograder.grade import boxed_kernels, silent_runs
from autograder.grade.notebook_run import KernelPort, NotebookRun
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

    def __init__(self, run: NotebookRun, port: KernelPort, part: str, decide_in: Callable[[Any, Kernel], tuple]):
        self.run, self.port, self.part = run, port, part
        self.phases = run.phases  # (``timed``)
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
        self.kernel = self.port.start_part_kernel(self.part)

    @timed("part boxes replaying")
    def _catch_up(self, index: int) -> None:
        run = self.run
        if self.kernel is None:
            try:
                self._start()
            except Exception as error:  # noqa: BLE001 - the part scores 0, with the reason
                self.broken = f"the kernel that grades this part could not start ({type(error).__name__})"
                return
        for cell_index, code in self._replay_plan(index):
            remaining = run.remaining()
            if remaining <= 0:
                self.broken = "the notebook's grading time was spent before this part's own kernel ran your cells"
                return
            outcome = silent_runs.run_silently(self.kernel, code, min(run.limits.cell_timeout, remaining))
            if outcome in ("dead", "timeout"):
                self.broken = (
                    f"the kernel that grades this part {'stopped' if outcome == 'dead' else 'ran out of time'} "
                    f"while it ran cell {cell_index} again (cells above a part's tests run again in a "
                    "kernel of that part's own)"
                )
                return
        self.done = max([self.done] + [i for i in run.replayable if i < index])

    def _replay_plan(self, index: int) -> List[tuple]:
        """``(cell index, code)`` to run before the graded cell at ``index``, in order: every cell the student
        wrote that ran without error in the main kernel, whole, and of the given cells only the statements
        that bind what the student's cells read (their imports and helpers, and what those need): a part's
        box does not redraw pictures or rerun demos. Without the lab's source, every cell that ran."""
        run = self.run
        ran = [i for i in run.replayable if self.done < i < index]
        view = run.view
        if view is None:
            return [(i, run.nb.cells[i].source) for i in ran]
        student = [c for c in view if c.student and c.index < index and c.tree is not None]
        needed = set().union(*(nbview.free_names(c.tree) for c in student)) if student else set()
        statements = [
            s for s in nbview.given_statements([c for c in view if c.index < index]) if s.cell in run.replayable
        ]
        chosen = {id(statements[i]) for i in verdicts.plan_slice(needed, statements, set())}
        plan = []
        for i in ran:
            if view[i].student:
                plan.append((i, run.nb.cells[i].source))
            else:
                code = "\n".join(ast.unparse(s.node) for s in statements if s.cell == i and id(s) in chosen)
                if code:
                    plan.append((i, code))
        return plan

    def close(self) -> None:
        if self.kernel is None:
            return
        boxed_kernels.close_kernel(self.kernel)
        self.kernel = None
        self.done, self.broken = -1, ""  # a box started again for this part replays from the top
