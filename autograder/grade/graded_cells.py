"""Every graded cell is decided here, in the trusted process: in the notebook's kernel, or in its part's own box
(``part_boxes``) for a part that needs the other parts' reference; without bubblewrap a part's cells are decided
only once the notebook's kernel is down (``decide_deferred``). The cell's text runs here (``autograder.verdict.cells``)
while the agent in the kernel answers over the grading channel (``autograder.verdict.channel``); the verdict is
shown in the cell (``autograder.verdict.scoring``) and what went wrong becomes an event."""

from __future__ import annotations

from time import monotonic
from typing import Dict, List, Optional

from nbclient.exceptions import DeadKernelError

from autograder.course.notebook import BEGIN
from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.editions.build import LEFT_OUT
from autograder.grade import grading_record, silent_runs
from autograder.grade.cell_limits import MEMORY_SIGNS
from autograder.grade.notebook_run import KernelPort, NotebookRun
from autograder.grade.part_boxes import PartBox
from autograder.grade.silent_runs import Kernel
from autograder.grade.timing import timed
from autograder.verdict import cells as verdicts
from autograder.verdict import channel as grading_channel
from autograder.verdict import notebook as nbview
from autograder.verdict.events import EventKind, VerdictKind
from autograder.verdict.scoring import error_output, show_verdict, soften_errors
from autograder.verdict.student_text import N_, language_of

# Run silently in the kernel at each graded cell: the agent answers the grader until the cell is decided.
# A verdict of these kinds is also an event of the cell (a limit hit while the grader tested it).
LIMIT_EVENT = {
    VerdictKind.TIMEOUT: EventKind.TIMEOUT,
    VerdictKind.KERNEL: EventKind.KERNEL_DIED,
    VerdictKind.EXIT: EventKind.EXIT_CALLED,
}
AGENT_CALL = "__import__('autograder.agent.serve', fromlist=['serve']).serve({path!r}, globals())"


class GradedCells:
    """The graded cells of one notebook, decided for ``run`` (whose ``verdicts`` and ``events`` they fill) in the
    kernels ``port`` gives (``HardenedExecute``), with the parts' own boxes they needed."""

    def __init__(self, run: NotebookRun, port: KernelPort, deferred: bool):
        self.run, self.port = run, port
        self.phases = run.phases  # (``timed``)
        self.part_boxes: Dict[str, PartBox] = {}
        self.parts_used: set = set()  # the parts whose box was started (the next notebook gets a spare of each)
        self.parts_deferred = deferred  # decide the parts' cells once the notebook's kernel is down
        self.deferred: List[tuple] = []

    def grade(self, cell, index: int) -> str:
        """Show a visible test's run in the kernel; decide every graded cell here (see ``hardened``'s doc)."""
        run = self.run
        model = run.model(index)
        grade_id = nbgrader_meta(cell).get("grade_id", f"cell {index}")
        if model is None or model.kind != nbview.GRADED:
            cell.outputs = [
                error_output(
                    "GradingError", "The grader could not find this test cell in the lab's source, so it scores 0."
                )
            ]
            run.verdicts[grade_id] = verdicts.Verdict(grade_id, False, VerdictKind.ERROR)
            return "error"
        visible = BEGIN not in model.source
        kernel_error = False
        if visible:
            outcome = self.port.run_visible(cell, index)
            if outcome in ("dead", "skipped"):
                run.verdicts[grade_id] = verdicts.Verdict(
                    grade_id, False, VerdictKind.KERNEL if outcome == "dead" else VerdictKind.TIMEOUT
                )
                return outcome
            kernel_error = outcome == "error"
        else:
            cell.outputs = []
            if run.budget_spent(cell, index):
                run.verdicts[grade_id] = verdicts.Verdict(grade_id, False, VerdictKind.TIMEOUT)
                return "skipped"
        box = self.box_for(grade_id, index)
        if box is not None and self.parts_deferred:
            self.deferred.append((cell, index, model, grade_id, visible, kernel_error))
            return "deferred"  # decided once the notebook's kernel is down (``decide_deferred``)
        return self.decide(cell, index, model, grade_id, visible, kernel_error, box)

    def decide_deferred(self) -> None:
        """With the notebook's kernel shut down, decide each deferred graded cell in its part's own box, in the
        notebook's order; ``decide`` keeps one box alive at a time, so no box's code can reach another's."""
        deferred, self.deferred = self.deferred, []
        try:
            for cell, index, model, grade_id, visible, kernel_error in deferred:
                self.decide(cell, index, model, grade_id, visible, kernel_error, self.box_for(grade_id, index))
        finally:
            self.close_part_boxes()

    def decide(
        self, cell, index: int, model, grade_id: str, visible: bool, kernel_error: bool, box: Optional["PartBox"]
    ) -> str:
        """Decide a graded cell (in the notebook's kernel, or ``box``, its part's own) and show the verdict."""
        self.close_part_boxes(but=box)  # one box of this notebook decides at a time: no other is alive to reach
        if box is None:
            verdict, dead = self.verdict(model)
        else:  # graded in the part's own box: the kernel's run above only shows what the student's code did
            verdict, dead = box.verdict(model, index), False
            if kernel_error and verdict.passed:
                soften_errors(cell, box.part, language_of(self.run.nb))
            kernel_error = False
        self.run.verdicts[grade_id] = verdict
        show_verdict(cell, verdict, kernel_error, visible, language_of(self.run.nb))
        if verdict.kind in LIMIT_EVENT:
            self.run.event(
                cell,
                index,
                LIMIT_EVENT[verdict.kind],
                N_(f"while the grader tested it ({verdict.seconds:.1f} s)"),  # (N_: the notes translate it)
            )
        if LEFT_OUT in verdict.message:  # a route to the reference ends at a stub (a check may wrap what it raised)
            line = next((l for l in verdict.lines if LEFT_OUT in l), verdict.lines[0] if verdict.lines else "")
            self.run.event(
                cell,
                index,
                EventKind.REACHED_STUB,
                grading_record.ANSI.sub("", line).split("TODO not written yet", 1)[-1].strip()[:300],
            )
        if verdict.ename == "MemoryError" or any(sign in verdict.message for sign in MEMORY_SIGNS[1:]):
            self.run.event(
                cell,
                index,
                EventKind.MEMORY,
                N_(f"> {self.run.limits.memory_mb} MiB while the grader tested it"),
            )
        return "dead" if dead else ("ok" if verdict.passed and not kernel_error else "error")

    def box_for(self, grade_id: str, index: int) -> Optional["PartBox"]:
        """The part's own box for a graded cell of a part that needs the reference's other parts, else None."""
        todos = self.run.todos
        part = todos.part_of_cell(grade_id) if todos is not None else None
        if part is None or not part.own_box:
            return None
        if part.name not in self.part_boxes:
            self.part_boxes[part.name] = PartBox(self.run, self.port, part.name, self.verdict)
            self.parts_used.add(part.name)
        return self.part_boxes[part.name]

    def close_part_boxes(self, but: Optional["PartBox"] = None) -> None:
        """Shut down every part's box except ``but``: a part's box holds the reference of the other parts, so none
        may be alive while another box's code is graded (it would be a route to that reference)."""
        for box in self.part_boxes.values():
            if box is not but:
                box.close()

    @timed("deciding graded cells")
    def verdict(self, model, kernel: Optional["Kernel"] = None) -> tuple:
        """``(verdict, kernel dead?)``: run the cell's text here, the agent answering in the kernel (the main
        kernel, or ``kernel``)."""
        run = self.run
        kernel = kernel or self.port.main_kernel()
        limit = max(1.0, min(run.limits.cell_timeout, run.remaining()))
        deadline = monotonic() + limit
        interrupt = lambda: silent_runs.interrupt(kernel.km)  # noqa: E731
        try:
            msg_id = kernel.kc.execute(
                AGENT_CALL.format(path=kernel.channel.path), silent=True, store_history=False, allow_stdin=False
            )
        except Exception:  # noqa: BLE001 - a kernel that cannot take a request
            return verdicts.failed(model.grade_id, grading_channel.KernelGone("the grading kernel stopped")), True
        try:
            session = kernel.channel.accept(deadline, on_timeout=interrupt)
        except grading_channel.KernelGone as error:
            verdict = verdicts.failed(model.grade_id, error)
        else:
            try:
                verdict = verdicts.run_graded(model, run.view, session, run.rules)
            finally:
                session.end()
        try:
            silent_runs.wait_reply(kernel.kc, kernel.km, msg_id, grading_channel.GRACE_S)
            return verdict, False
        except DeadKernelError:
            return verdict, True
        except TimeoutError:
            interrupt()
            try:
                silent_runs.wait_reply(kernel.kc, kernel.km, msg_id, grading_channel.GRACE_S)
                return verdict, False
            except (DeadKernelError, TimeoutError):
                if verdict.passed:
                    verdict = verdicts.failed(
                        model.grade_id, grading_channel.KernelGone("the kernel did not finish after its tests")
                    )
                return verdict, True

    def close(self) -> None:
        for box in self.part_boxes.values():
            box.close()
