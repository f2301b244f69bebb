"""What a lab's boxes are given and kept from: the edition of the package a box imports, what of the grader's file
system it may read, what no box may read, and the isolation probe's verdict on that (once per grading process;
``refuse`` grades nothing where it refuses)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from nbgrader.utils import is_grade

from autograder.box import sandbox, trust
from autograder.course.notebook import nbgrader as nbgrader_meta
from autograder.editions import manifest as lab_todos
from autograder.editions.build import build_edition
from autograder.verdict import cells as verdicts
from autograder.verdict.events import EventKind, event
from autograder.verdict.scoring import add_notes, error_output

_TRUST: Dict[tuple, trust.Report] = {}  # per grading process: the isolation probe's report per box setting


def edition(lab: str, part: Optional[str], cache: Dict[tuple, str], log) -> str:
    """The folder of the package edition a box of ``lab`` imports (``autograder.editions``): the lab's TODOs (only
    ``part``'s, for a part's own box) and every later lab's are stubs. A lab the manifest does not know gets the
    strictest edition (every graded lab's TODOs left out), with an error in ``log`` (none for ``NO_TODOS``, lab 00).
    A lab's TODOs are declared by the lab itself (``autograder/labs/labNN_*/__init__.py``).
    ``cache`` holds the folders already built, by ``(lab, part)``."""
    key = (lab, part)
    if key not in cache:
        todos = lab_todos.BY_LAB.get(lab)
        if todos is None and lab not in lab_todos.NO_TODOS:
            log.error(
                "Lab %r has no lab model in autograder/labs/ (labNN_*/__init__.py, listed in autograder/labs/__init__.py): "
                "its box gets the edition that leaves out every graded lab's TODOs. Declare the lab's TODOs there.",
                lab,
            )
        if todos is None:
            lab, part = lab_todos.LABS[0].lab, None
        cache[key] = str(build_edition(lab, part))
    return cache[key]


def readable(private_roots: List[str], readable_paths: List[str]) -> List[str]:
    """What a box shows of the grader's file system (bubblewrap binds it; elsewhere permissions decide): the
    Python environment (without ``private_roots``) and ``readable_paths``. The box's own library is a copy in its
    private folder."""
    return sandbox.python_paths(private=list(private_roots)) + list(readable_paths)


def trusted(trusted_paths: List[str], source_notebook: Optional[Path], events_dir: str) -> List[str]:
    """What no box may read: ``trusted_paths``, the editions cache, the lab's source notebook and a canary (planted
    in ``events_dir``)."""
    extra = [str(source_notebook or "")]
    if events_dir:
        extra.append(str(trust.plant_canary(Path(events_dir))))
    from autograder.editions.build import editions_dir

    return list(dict.fromkeys(list(trusted_paths) + [str(editions_dir())] + [e for e in extra if e]))


def isolation_report(level: str, readable: List[str], hidden: List[str], trusted: List[str], allow: bool):
    """The isolation probe's report for a box of these settings (``autograder.box.trust``; run once per grading
    process and setting); a problem is said on stdout."""
    key = (level, tuple(readable), tuple(hidden), tuple(trusted), allow)
    if key not in _TRUST:
        _TRUST[key] = trust.check(level, readable, list(hidden), trusted, allow=allow)
        report = _TRUST[key]
        if report.problem:  # said on stdout: make grade's terminal, run_autograder's log (the instructor's)
            verb = "graded anyway (" + trust.ALLOW_ENV + "=1)" if report.allowed else "nothing is graded"
            print(f"WARNING: grading kernels cannot be trusted here, {verb}: {report.problem}", flush=True)
    return _TRUST[key]


def refuse(nb, verdict_of: Dict[str, "verdicts.Verdict"], events: List[dict], report: trust.Report) -> None:
    """Grade nothing (the probe refused this grader): no kernel starts; every graded cell scores 0 and says to tell
    the instructor."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if is_grade(cell):
            cell.outputs = [error_output("GradingRefused", trust.REFUSED_MESSAGE)]
            grade_id = nbgrader_meta(cell).get("grade_id", f"cell {index}")
            verdict_of[grade_id] = verdicts.Verdict(grade_id, False, "error", "GradingRefused", [trust.REFUSED_MESSAGE])
        else:
            cell.outputs = []
    events.append(event("notebook", EventKind.ISOLATION, report.problem))
    add_notes(nb, [trust.REFUSED_MESSAGE])
