"""What a provenance finding costs: the tests that a TODO reaching the reference or the grading machinery
affects score 0 (``autograder.verdict.provenance`` finds them, in ``submission``), and the instructor reads why."""

from __future__ import annotations

from typing import List

from nbgrader.utils import is_grade

from autograder.grade.notebook_run import NotebookRun
from autograder.verdict import cells as verdicts
from autograder.verdict import notebook as nbview
from autograder.verdict import provenance
from autograder.verdict.events import EventKind, VerdictKind, event
from autograder.verdict.scoring import error_output


def apply_findings(
    run: NotebookRun, findings: List[provenance.Finding], similar: List[tuple], cost_points: bool
) -> None:
    """No points for a TODO whose text reaches the reference or the machinery (see provenance): every test it affects
    scores 0 in ``run.verdicts`` (and says why in its cell) when ``cost_points``, and each finding is an event of
    ``run`` (each TODO much like a reference too). Without the lab's source (``run.view`` None) every test says that
    no test could be decided."""
    nb, view, verdict_of, events = run.nb, run.view, run.verdicts, run.events
    if view is None:
        for cell in nb.cells:
            if cell.cell_type == "code" and is_grade(cell):
                cell.outputs = [
                    error_output(
                        "GradingError",
                        "The grader could not find this lab's source notebook, so no test could be decided.",
                    )
                ]
        return
    graded = [c for c in view if c.kind == nbview.GRADED]
    for finding in findings:
        bound: set = set()
        cell = view[finding.cell_index]
        if cell.tree is not None:
            bound = nbview.names_bound(cell.tree)
        for test in graded if cost_points else ():
            reads = nbview.free_names(test.tree) if test.tree is not None else set()
            hit = (test.index > finding.cell_index) if finding.scope == provenance.BELOW else bool(reads & bound)
            if hit:
                notebook_cell = nb.cells[test.index]
                notebook_cell.outputs = [
                    o
                    for o in notebook_cell.get("outputs", [])
                    if o.get("output_type") != "error"
                    and not (o.get("output_type") == "stream" and "tests passed" in o.get("text", ""))
                ]
                notebook_cell.outputs.append(
                    error_output(
                        "IntegrityError",
                        f"No points: {finding.describe()}. Graded code must be your own: fix that line and resubmit.",
                    )
                )
                verdict_of[test.grade_id] = verdicts.Verdict(test.grade_id, False, VerdictKind.INTEGRITY)
        events.append(
            dict(
                event(finding.cell_label, EventKind.INTEGRITY, finding.describe()),
                line=finding.line,
                code=finding.code,
                rule=finding.rule,
                cost_points=bool(cost_points),
            )
        )
    for todo, reference, ratio in similar:
        events.append(
            event(todo, EventKind.SIMILAR, f"{todo} is {ratio:.0%} like {reference} (normalised syntax): review it")
        )
