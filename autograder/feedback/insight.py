"""What the class got wrong, at a glance: ``reports/<LAB>/insight.html`` (inert, self-contained), its data
as ``insight.json`` and its two plots as PNG files beside them.

Built only from what grading already wrote, never by running a notebook: every student's result
(``autograder.verdict.lab_results``: the gradebook's points per cell, the grading record's verdicts, the messages
the feedback showed and the events, collection's name as written, late flag and repairs, the error logs of
gradings that failed). The lab's source notebook gives the cells' order, points and the section that teaches each.

- **not graded** first: students whose grading was refused (the grading box could not be trusted on the grading
  machine: nothing ran, so they have no score, never a 0) or failed; they take no part in the numbers below;
- **scores**: histogram, median, how many at 0, at full marks and in between;
- **cells**: each graded cell's pass rate (full points) in lab order;
- **misconceptions** (``insight_hints``): one row per failure pattern: the hints failed checks gave, grouped across
  cells with numbers, case and spacing ignored (one mistake met on different cases counts once) but shown as the
  students read them, and hints that the very same students got merged into one row; with those students, most
  common first, and the section of the lab that teaches each hint; also ``misconceptions.csv``. Students whose
  file could not be read are listed apart ("ask them to resubmit");
- **every student**: their name as written and late flag, each graded cell's points, each student linked to their
  feedback page;
- **whom to look at**: every kind of event grading notes, listed under its group (``EventGroup``: provenance
  findings and similarity, limits hit, what grading itself did), each with its students; repairs; and pairs of
  students whose own TODO code is near-identical (``insight_similar``: instructor-only, nowhere a student reads);
- **grading health**: seconds per student (median, max), kernels restarted, box level, failed gradings, where the
  time went.

The analysis is here and in ``insight_hints`` / ``insight_similar``; the plots and the page are drawn in
``insight_page``; the class across labs is ``insight_across``.

``python -m autograder.feedback.insight LAB`` (``make insight LAB=...``) rebuilds it; ``make grade`` writes it
at its end. Without a lab (``--across``, ``make insight``) it writes the class across labs:
``reports/across.html`` and ``across.csv``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional

from autograder.course.notebook import lab_cells
from autograder.feedback.insight_hints import misconceptions, misconceptions_csv, teaching
from autograder.feedback.insight_page import page, plots
from autograder.feedback.insight_similar import similar_students
from autograder.verdict import lab_results
from autograder.verdict.events import EventGroup, EventKind
from autograder.verdict.result import GradingResult, Status

# Collection could not read the student's notebook (graded as the release): asked to resubmit, not a mistake.
UNREADABLE_KINDS = ("invalid-json", "not-a-notebook", "no-notebook", "several-notebooks")
#: What collection says of a student who submitted several times (``collect._note_superseded``): not repairs.
RESUBMISSION_KINDS = ("graded-submission", "superseded")
#: The sections of "Whom to look at", each listing the event kinds of one ``EventGroup`` (every kind has one).
WHOM = {"findings": EventGroup.FINDING, "limits": EventGroup.LIMIT, "grading": EventGroup.GRADING}


def _flagged(results: List[GradingResult]) -> Dict[str, Dict[str, List[str]]]:
    """``{section: {kind: students}}``: each event kind under its group's section (``WHOM``), and the repairs."""
    found: Dict[str, Dict[str, set]] = {section: defaultdict(set) for section in (*WHOM, "repairs")}
    section_of = {group: section for section, group in WHOM.items()}
    for result in results:
        for event in result.events:
            found[section_of[event.kind.group]][event.kind.value].add(result.student.id)
        for kind, _ in result.repairs:
            if kind != "added-cells" and kind not in RESUBMISSION_KINDS:
                found["repairs"][kind].add(result.student.id)
    return {section: {kind: sorted(who) for kind, who in kinds.items()} for section, kinds in found.items()}


def _resubmitted(results: List[GradingResult]) -> Dict[str, Dict[str, Any]]:
    """``{student: {"graded": when, "superseded": [...]}}`` of the students who submitted several times."""
    out: Dict[str, Dict[str, Any]] = {}
    for result in results:
        for kind, detail in result.repairs:
            if kind in RESUBMISSION_KINDS:
                entry = out.setdefault(result.student.id, {"graded": "", "superseded": []})
                if kind == "graded-submission":
                    entry["graded"] = detail
                else:
                    entry["superseded"].append(detail)
    return {s: out[s] for s in sorted(out)}


def build(lab: str, work: Path, source: Path, similarity: bool = True) -> dict:
    """The report's data (what ``insight.json`` holds); ``similarity=False`` leaves out the students' pairs."""
    cells = lab_cells(source)
    order = [c["grade_id"] for c in cells]
    maximum = sum(c["points"] for c in cells)
    everyone = {s: r for s, r in lab_results.read(work, lab, source).items() if r.status is not Status.NOT_GRADED}
    graded = {s: r for s, r in everyone.items() if r.status is Status.GRADED}
    in_gradebook = {s for s, r in graded.items() if r.raw_score is not None}
    by_cell = {s: {c.grade_id: c.score for c in r.cells} for s, r in graded.items()}
    totals = {s: round(r.score if r.score is not None else 0.0, 3) for s, r in graded.items()}
    values = sorted(totals.values())
    passes = []
    for cell in cells:
        got = [by_cell[s].get(cell["grade_id"]) or 0.0 for s in sorted(in_gradebook)]
        full = sum(1 for v in got if cell["points"] and v >= cell["points"] - 1e-9)
        passes.append(
            {**cell, "students": len(got), "full": full, "pass_rate": round(full / len(got), 4) if got else None}
        )
    unreadable = sorted(s for s, r in everyone.items() if any(k in UNREADABLE_KINDS for k, _ in r.repairs))
    passed = {s: {c.grade_id: c.passed for c in r.cells} for s, r in graded.items()}
    lost = {  # without the gradebook's points: those of every cell whose verdict did not pass
        s: round(maximum - totals[s], 3)
        if s in in_gradebook
        else sum(c["points"] for c in cells if not passed[s].get(c["grade_id"]))
        for s in graded
    }
    recorded = [r for r in everyone.values() if r.recorded]
    seconds = [r.seconds for r in recorded if r.seconds is not None]
    return {
        "lab": lab,
        "notebook": source.stem,
        "students": len(everyone),
        "graded": len(graded),
        "max_score": maximum,
        "refused": {s: r.why for s, r in sorted(everyone.items()) if r.status is Status.REFUSED},
        "failed": {s: r.why for s, r in sorted(everyone.items()) if r.status is Status.FAILED},
        "names": {s: r.student.shown for s, r in everyone.items() if r.student.shown != s},
        "late": sorted(s for s, r in everyone.items() if r.student.late),
        "table": {s: {g: by_cell[s].get(g) for g in order} for s in sorted(graded)},
        "lost": lost,
        "unreadable": unreadable,
        "resubmitted": _resubmitted(list(everyone.values())),
        "scores": {
            "totals": totals,
            "median": statistics.median(values) if values else None,
            "zero": sum(1 for v in values if v <= 1e-9),
            "full": sum(1 for v in values if maximum and v >= maximum - 1e-9),
            "between": sum(1 for v in values if 1e-9 < v < maximum - 1e-9),
        },
        "cells": passes,
        "misconceptions": misconceptions(
            cells, [r for s, r in graded.items() if s not in unreadable], teaching(lab, source)
        ),
        "flagged": _flagged(list(everyone.values())),
        "similar": similar_students(lab, work, source, [s for s in graded if s not in unreadable])
        if similarity
        else {},
        "health": {
            "seconds_median": round(statistics.median(seconds), 2) if seconds else None,
            "seconds_max": round(max(seconds), 2) if seconds else None,
            "kernels_restarted": sum(1 for r in everyone.values() for e in r.events if e.kind is EventKind.KERNEL_DIED),
            "spare_kernels": sum(r.spare_kernels for r in recorded),
            "isolation": sorted({str(r.isolation) for r in recorded if r.isolation}),
            "failed_gradings": sorted(s for s, r in everyone.items() if r.status is Status.FAILED),
            "not_graded": sorted(s for s in in_gradebook if not graded[s].recorded),
            **_where_time_went(recorded),
        },
    }


def _where_time_went(results: List[GradingResult]) -> Dict[str, Any]:
    """Seconds by phase of grading over the class (each student's record has them), and the outliers: a student
    who took more than twice the median and 20 s over it, with the phase that took most of their time."""
    seconds = {r.student.id: r.seconds for r in results if r.seconds is not None}
    phases_of = {r.student.id: dict(r.phases) for r in results}
    median = statistics.median(seconds.values()) if seconds else 0.0
    phases: Dict[str, float] = defaultdict(float)
    for own in phases_of.values():
        for name, value in own.items():
            phases[name] += float(value)
    slow = []
    for student, took in sorted(seconds.items(), key=lambda kv: -kv[1]):
        if took > max(2 * median, median + 20):
            own = phases_of[student]
            phase, spent = max(own.items(), key=lambda kv: kv[1]) if own else ("(not recorded)", 0.0)
            slow.append(
                {"student": student, "seconds": round(took, 1), "phase": phase, "phase_seconds": round(spent, 1)}
            )
    return {
        "phases": {name: round(value, 1) for name, value in sorted(phases.items(), key=lambda kv: -kv[1])},
        "slowest": slow[:10],
    }


def write(lab: str, work: Path, source: Path) -> Path:
    """Write ``insight.html``, ``insight.json`` and the PNGs into ``work/reports/<lab>/``; the page's path."""
    data = build(lab, work, source)
    images = plots(data)
    folder = work / "reports" / lab
    folder.mkdir(parents=True, exist_ok=True)
    for name, png in images.items():
        (folder / name).write_bytes(png)
    (folder / "insight.json").write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    (folder / "misconceptions.csv").write_text(misconceptions_csv(data), encoding="utf-8")
    target = folder / "insight.html"
    target.write_text(page(data, images), encoding="utf-8")
    return target


def main(argv: Optional[List[str]] = None) -> int:
    from autograder.course.layout import LABS, ROOT, SOURCE_DIR
    from autograder.feedback.insight_across import write_across

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lab", nargs="?", choices=sorted(LABS))
    parser.add_argument("--across", action="store_true", help="every graded lab: reports/across.{html,csv}")
    args = parser.parse_args(argv)
    if args.across or args.lab is None:
        path, data = write_across(ROOT / "autograder" / "work")
        print(
            f"insight across labs: {path.resolve()} ({len(data['labs'])} labs, "
            f"{len(data['students'])} students failing in several)"
            + (f"; no grading data, skipped: {', '.join(data['skipped'])}" if data["skipped"] else "")
        )
        return 0
    path = write(args.lab, ROOT / "autograder" / "work", SOURCE_DIR / args.lab / LABS[args.lab])
    data = json.loads((path.parent / "insight.json").read_text(encoding="utf-8"))
    print(f"insight: {path.resolve()} ({data['students']} students, {len(data['misconceptions'])} distinct hints)")
    if data["refused"]:
        print(f"  {len(data['refused'])} refused (no score): {', '.join(list(data['refused'])[:10])}")
    for m in data["misconceptions"][:5]:
        print(f"  {m['count']:>4}  {m['grade_id']}: {m['hint'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
