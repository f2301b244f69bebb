"""One notebook's grading as a value, the limits it runs under, and the port through which its pieces reach kernels.

``HardenedExecute`` builds a ``NotebookRun`` when it starts on a notebook and hands it, with itself as the
``KernelPort``, to the pieces that grade (``graded_cells``, ``part_boxes``, ``findings``, ``grading_record``,
``timing``): they read and fill the run and start or use kernels through the port, and read nothing else of the
executor. ``Limits`` is resolved once per lab from the executor's settings and the lab's own
(``nbgrader_config.py``'s ``lab_limits``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from time import monotonic
from typing import Any, Dict, List, Mapping, Optional, Protocol, runtime_checkable

from nbgrader.utils import is_grade

from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.grade import cell_limits
from autograder.grade.silent_runs import Kernel
from autograder.grade.timing import Phases
from autograder.verdict.events import EventKind, event


@dataclass(frozen=True)
class Limits:
    """What one lab's notebook may use: seconds per cell and per notebook, and its box's sizes."""

    cell_timeout: int
    notebook_timeout: int
    memory_mb: int
    file_mb: int
    ram_mb: int
    pids: int
    cpus: float
    scratch_mb: int

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(
                    f"limit {item.name} is {value!r}: every limit is a positive number "
                    "(check HardenedExecute's settings and lab_limits in nbgrader_config.py)"
                )

    @classmethod
    def resolve(cls, defaults: Any, lab_limits: Mapping[str, Mapping[str, Any]], lab: str) -> "Limits":
        """The limits of ``lab``: each one from ``lab_limits[lab]`` where the lab sets it, else ``defaults``' (an
        object with an attribute per limit: the executor's settings). Every limit but ``cpus`` is whole."""
        own = lab_limits.get(lab, {}) or {}
        unknown = sorted(set(own) - {f.name for f in fields(cls)} - {"max_output_bytes", "max_restarts"})
        if unknown:
            raise ValueError(
                f"lab_limits[{lab!r}] names no limit {unknown}: the limits are {[f.name for f in fields(cls)]}"
            )
        values = {}
        for item in fields(cls):
            value = own.get(item.name, getattr(defaults, item.name))
            values[item.name] = float(value) if item.name == "cpus" else int(value)
        return cls(**values)


@dataclass
class NotebookRun:
    """The state of one notebook's grading: what the pieces of ``autograder.grade`` read and fill.

    ``view`` is the notebook's cells classified against the lab's source (None without it) and ``rules`` the graded
    cells' rules (``verdicts.rules_for``); ``deadline`` is when the notebook's time is spent (``monotonic()``);
    ``verdicts`` are filled by grade id, ``events`` by every piece, ``replayable`` with the indices of the cells the
    main kernel ran without error and that are not tests (what a part's box or a fresh kernel runs again), and
    ``phases`` with where the time went."""

    lab: str
    nb: Any
    limits: Limits
    deadline: float
    language: str = "en"
    todos: Any = None  # the lab's TODOs and parts (``autograder.editions.manifest.LabTodos``), None for no lab's
    view: Optional[List[Any]] = None
    rules: Any = None
    verdicts: Dict[str, Any] = field(default_factory=dict)
    events: List[Dict[str, Any]] = field(default_factory=list)
    replayable: List[int] = field(default_factory=list)
    phases: Phases = field(default_factory=Phases)

    def remaining(self) -> float:
        """Seconds left of the notebook's time (negative once spent)."""
        return self.deadline - monotonic()

    def model(self, index: int):
        """The source's view of the notebook's cell ``index`` (None without the source, or past its end)."""
        return self.view[index] if self.view is not None and 0 <= index < len(self.view) else None

    def event(self, cell, index: int, kind: EventKind, detail: str) -> None:
        """Record an event of the notebook's cell ``index`` (named by its grade id where it has one)."""
        grade_id = nbgrader_meta(cell).get("grade_id")
        self.events.append(event(grade_id or f"cell {index}", kind, detail, graded=bool(is_grade(cell))))

    def budget_spent(self, cell, index: int) -> bool:
        """True, with the cell's message and a not-run event, once the notebook's time is spent; else False."""
        if self.remaining() > 0:
            return False
        cell.outputs = [cell_limits.budget_spent(self.limits.notebook_timeout, self.language)]
        self.event(cell, index, EventKind.NOT_RUN, "notebook time budget spent")
        return True


@runtime_checkable
class KernelPort(Protocol):
    """How the grading pieces reach kernels (``HardenedExecute`` implements it)."""

    def run_visible(self, cell, index: int) -> str:
        """Run a cell in the notebook's main kernel, recorded as the student sees it: ``ok``, ``error``,
        ``skipped`` (the notebook's time was spent) or ``dead`` (its kernel died)."""

    def main_kernel(self) -> Kernel:
        """The notebook's main kernel (its manager, client and grading channel) as it is now."""

    def start_part_kernel(self, part: str) -> Kernel:
        """A started kernel in ``part``'s own box, ready (its preamble run, the assignment's files copied); it
        raises when the kernel cannot start (nothing of the student's has run in it)."""
