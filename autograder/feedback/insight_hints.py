"""The insight report's misconceptions: what each failed check's hint said, grouped into failure patterns, and
where the lab teaches it (``autograder.feedback.insight`` builds the report from them).

- ``hint_as_read``: the reusable part of a failed check's message, as the student read it; ``hint_key``: what makes
  two hints one mistake (numbers made ``N``, case and spacing ignored);
- ``misconceptions``: one row per failure pattern over the class's results (hints that the very same students got
  merged into one row), most students first, with the sections that teach it;
- ``teaching`` / ``taught_in``: where the lab teaches what a hint is about, as its checks say it (``TEACHES`` and
  ``@grades(..., teaches="§ 1")``), else the task's section;
- ``misconceptions_csv``: the rows as ``misconceptions.csv``.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from autograder.course import notebook as nbread
from autograder.verdict.events import VerdictKind
from autograder.verdict.result import GradingResult

_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?")


def lab_headings(source: Path) -> List[str]:
    """Every markdown heading of the lab's notebook, in order (``1. When does a token need a new block?``)."""
    notebook = json.loads(source.read_text(encoding="utf-8"))
    return [
        line.lstrip("#").strip()
        for cell in notebook["cells"]
        if cell.get("cell_type") == "markdown"
        for line in nbread.cell_text(cell).splitlines()
        if line.startswith("#")
    ]


def section_named(reference: str, headings: List[str]) -> Optional[str]:
    """The heading a ``teaches`` reference (``"§ 2"``, ``"§ 9.1"``) names, or None when no heading has its number."""
    number = reference.replace("§", "").strip()
    pattern = re.compile(rf"{re.escape(number)}\.?(\s|$)")
    return next((h for h in headings if number and pattern.match(h)), None)


def teaching(lab: str, source: Path) -> Dict[str, Any]:
    """Where the lab teaches what its hints are about, as its checks say it: ``hints`` (the checks module's
    ``TEACHES``: a fragment of a hint, lower case, and its section's heading) and ``cells`` (a hidden cell's
    heading when every check it calls is marked ``@grades(..., teaches=...)`` with the same section). Empty for a
    lab whose checks say nothing (its rows name the task's section)."""
    import importlib

    from autograder.labs import checks_module

    out: Dict[str, Any] = {"hints": {}, "cells": {}}
    try:
        module = importlib.import_module(checks_module(lab))
    except Exception:  # noqa: BLE001 - a lab without checks (or one that cannot load here) names the task's section
        return out
    headings = lab_headings(source)

    def heading(reference: str) -> str:
        return section_named(reference, headings) or reference

    out["hints"] = {fragment.lower(): heading(ref) for fragment, ref in getattr(module, "TEACHES", {}).items()}
    notebook = json.loads(source.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if not (nbread.is_graded(cell) and nbread.grade_id(cell)):
            continue
        try:
            tree = ast.parse(nbread.cell_text(cell))
        except SyntaxError:
            continue
        called = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        called |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        marks = {
            getattr(getattr(module, name), "__teaches__", "")
            for name in called
            if hasattr(getattr(module, name, None), "__grades__")
        }
        if len(marks) == 1 and "" not in marks:
            out["cells"][nbread.grade_id(cell)] = heading(marks.pop())
    return out


def taught_in(grade_id: str, hint: str, kind, task_section: str, teaches: Dict[str, Any]) -> str:
    """The section that teaches what a failed check's hint is about: the first ``TEACHES`` fragment the hint holds,
    else the cell's checks' ``teaches``, else the task's section (a TODO not written, a timeout: the task's)."""
    if kind not in (VerdictKind.CHECK, VerdictKind.ERROR):
        return task_section
    low = hint.lower()
    for fragment, section in teaches.get("hints", {}).items():
        if fragment in low:
            return section
    return teaches.get("cells", {}).get(grade_id, task_section)


def hint_as_read(message: str, kind) -> str:
    """The reusable part of a failed check's message as the student read it: its hint (else its problem,
    without the case it was found on), on one line; ``kind`` is the verdict's (a ``VerdictKind``, or "")."""
    if kind == VerdictKind.TODO:
        return "TODO not written yet"
    if kind == VerdictKind.INTEGRITY:
        return "a provenance finding cost this cell's points (see 'Whom to look at')"
    if kind == VerdictKind.TIMEOUT:
        return "the cell ran past its time limit"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    hint = next((line[len("hint:") :].strip() for line in lines if line.startswith("hint:")), "")
    if not hint and lines:
        hint = re.sub(r"^\[[^\]]*\]\s*", "", lines[0])
    return re.sub(r"\s+", " ", hint or f"({kind or 'failed'}, no message)")[:400]


def hint_key(hint: str) -> str:
    """What makes two hints one misconception: numbers made ``N``, case and spacing ignored (the same mistake met
    on different cases, or worded with another capital, counts once)."""
    return re.sub(r"\s+", " ", _NUMBER.sub("N", hint)).strip().lower()


def misconceptions(
    cells: List[Dict[str, Any]], results: Iterable[GradingResult], teaches: Optional[Dict[str, Any]] = None
) -> List[Dict[str, Any]]:
    """One row per distinct failure pattern, most students first: each failed check's hint grouped by
    ``hint_key`` across cells (the hint shown as most students read it), then hints that the very same students
    got merged into one row (one bug that fails several checks is one row, with each of its hints). Its
    ``taught_in``: the sections that teach its hints (``taught_in``), most failures first; ``section`` joins them."""
    teaches = teaches or {}
    order = {c["grade_id"]: n for n, c in enumerate(cells)}
    section_of = {c["grade_id"]: c["section"] for c in cells}
    by_key: Dict[str, Dict[str, Any]] = {}
    for result in results:
        for cell in result.cells:
            if cell.passed is None or cell.passed or cell.grade_id not in order:
                continue
            kind = cell.kind or ""
            read = hint_as_read(cell.message, kind)
            group = by_key.setdefault(
                hint_key(read), {"read": Counter(), "students": set(), "cells": set(), "taught": Counter()}
            )
            group["read"][read] += 1
            group["taught"][taught_in(cell.grade_id, read, kind, section_of[cell.grade_id], teaches)] += 1
            group["students"].add(result.student.id)
            group["cells"].add(cell.grade_id)
    patterns: Dict[tuple, Dict[str, Any]] = {}
    for key, group in by_key.items():
        who = tuple(sorted(group["students"]))
        pattern = patterns.setdefault(who, {"hints": [], "keys": [], "cells": set(), "taught": Counter()})
        pattern["taught"].update(group["taught"])
        pattern["hints"].append(group["read"].most_common(1)[0][0])
        pattern["keys"].append(key)
        pattern.setdefault("by_key", {})[key] = pattern["hints"][-1]
        pattern["cells"] |= group["cells"]
    rows = []
    for who, pattern in patterns.items():
        ordered = sorted(pattern["cells"], key=order.get)
        taught = [name for name, _ in sorted(pattern["taught"].items(), key=lambda kv: (-kv[1], kv[0]))]
        rows.append(
            {
                "hints": sorted(pattern["hints"]),
                "hint": " / ".join(sorted(pattern["hints"])),
                "pattern": " | ".join(sorted(pattern["keys"])),
                "by_key": pattern["by_key"],
                "cells": ordered,
                "grade_id": ordered[0],
                "section": "; ".join(taught),
                "taught_in": taught,
                "count": len(who),
                "students": list(who),
            }
        )
    return sorted(rows, key=lambda r: (-r["count"], order[r["grade_id"]], r["hint"]))


def misconceptions_csv(data: dict) -> str:
    """The misconceptions as CSV, one row per failure pattern: ``pattern`` (its grouping keys: numbers as ``n``,
    lower case), ``hint_as_read`` (the hints verbatim), ``cells``, ``students`` (how many), ``student_ids`` and
    ``taught_in`` (the sections that teach its hints);
    several values in one field are joined by `` | `` (hints, keys) or a space (cells, ids)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["pattern", "hint_as_read", "cells", "students", "student_ids", "taught_in"])
    for row in data["misconceptions"]:
        writer.writerow(
            [
                row.get("pattern", ""),
                " | ".join(row["hints"]),
                " ".join(row["cells"]),
                row["count"],
                " ".join(row["students"]),
                " | ".join(row.get("taught_in", [])),
            ]
        )
    return buffer.getvalue()
