"""What the class got wrong, at a glance: ``reports/<LAB>/insight.html`` (inert, self-contained), its data
as ``insight.json`` and its two plots as PNG files beside them.

Built only from what grading already wrote, never by running a notebook: the gradebook (each graded
cell's score), the events file of each student (each graded cell's verdict and the message its feedback
showed: ``autograder/work/events/<LAB>/<student>.json``), ``log.csv`` (repairs, limits, provenance
findings, similarity) and the error logs of students whose grading failed. The lab's source notebook
gives the cells' order, points and the section that teaches each.

- **scores**: histogram, median, how many at 0, at full marks and in between;
- **cells**: each graded cell's pass rate (full points) in lab order;
- **misconceptions**: one row per failure pattern: the hints failed checks gave, grouped across cells with
  numbers, case and spacing ignored (one mistake met on different cases counts once) but shown as the
  students read them, and hints that the very same students got merged into one row; with those students,
  most common first, and the section of the lab that teaches each hint (``taught in``: what the lab's checks
  say, ``TEACHES`` and ``@grades(..., teaches="§ 1")``, else the task's section); also ``misconceptions.csv``. Students whose file could not be
  read are listed apart ("ask them to resubmit");
- **every student**: a table of each graded cell's points, each student linked to their feedback page;
- **whom to look at**: provenance findings, similarity to the reference, time, memory and output limits,
  kernels that died, repairs, each with its student ids; and pairs of students whose own TODO code is
  near-identical (``similar_students``: instructor-only, nowhere a student reads);
- **grading health**: seconds per student (median, max), kernels restarted, box level, failed gradings.

The analysis is here; the plots and the page are drawn in ``insight_page``.

``python -m autograder.feedback.insight LAB`` (``make insight LAB=...``) rebuilds it; ``make grade`` writes it
at its end. Without a lab (``--across``, ``make insight``) it writes the class across labs (``across``):
``reports/across.html`` and ``across.csv``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import difflib
import io
import json
import keyword
import re
import statistics
import sys
import tokenize
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# The plots and the page are drawn in insight_page (analysis here, rendering there); insight.page stays.
from autograder.course import notebook as nbread
from autograder.verdict.events import read_record
from autograder.feedback.insight_page import across_page, page, plots  # noqa: F401

# Collection could not read the student's notebook (graded as the release): asked to resubmit, not a mistake.
UNREADABLE_KINDS = ("invalid-json", "not-a-notebook", "no-notebook", "several-notebooks")
#: What collection says of a student who submitted several times (``collect._note_superseded``): not repairs.
RESUBMISSION_KINDS = ("graded-submission", "superseded")
FLAG_KINDS = ("integrity", "similar-to-reference", "reached-stub", "not-triton", "launch-not-built")
LIMIT_KINDS = ("timeout", "memory", "output", "kernel-died", "notebook-timeout")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?")


# ----------------------------------------------------------------------------- reading what grading wrote


def lab_cells(source: Path) -> List[Dict[str, Any]]:
    """The lab's graded cells in order: ``grade_id``, ``points``, ``section`` (the heading above it), ``hidden``."""
    notebook = json.loads(source.read_text())
    section, cells = "", []
    for cell in notebook["cells"]:
        text = nbread.cell_text(cell)
        if cell.get("cell_type") == "markdown":
            headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
            section = headings[-1] if headings else section
            continue
        if nbread.is_graded(cell) and nbread.grade_id(cell):
            cells.append(
                {
                    "grade_id": nbread.grade_id(cell),
                    "points": float(nbread.nbgrader(cell).get("points", 0)),
                    "section": section,
                    "hidden": nbread.is_hidden_test(cell),
                }
            )
    return cells


def lab_headings(source: Path) -> List[str]:
    """Every markdown heading of the lab's notebook, in order (``1. When does a token need a new block?``)."""
    notebook = json.loads(source.read_text())
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
    notebook = json.loads(source.read_text())
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


def taught_in(grade_id: str, hint: str, kind: str, task_section: str, teaches: Dict[str, Any]) -> str:
    """The section that teaches what a failed check's hint is about: the first ``TEACHES`` fragment the hint holds,
    else the cell's checks' ``teaches``, else the task's section (a TODO not written, a timeout: the task's)."""
    if kind not in ("check", "error"):
        return task_section
    low = hint.lower()
    for fragment, section in teaches.get("hints", {}).items():
        if fragment in low:
            return section
    return teaches.get("cells", {}).get(grade_id, task_section)


def _scores(work: Path, lab: str, notebook: str) -> Dict[str, Dict[str, float]]:
    """``{student: {grade_id: score}}`` from the gradebook, for every student graded in ``lab``."""
    from nbgrader.api import Gradebook, MissingEntry

    out: Dict[str, Dict[str, float]] = {}
    database = work / "gradebook.db"
    if not database.exists():
        return out
    with Gradebook(f"sqlite:///{database}") as gradebook:
        try:
            assignment = gradebook.find_assignment(lab)
        except MissingEntry:
            return out
        for submission in assignment.submissions:
            student = submission.student.id
            try:
                nb = gradebook.find_submission_notebook(notebook, lab, student)
            except MissingEntry:
                continue
            out[student] = {g.name: float(g.score or 0.0) for g in nb.grades}
    return out


def _events(work: Path, lab: str) -> Dict[str, dict]:
    folder = work / "events" / lab
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = read_record(path)
        except (OSError, ValueError):
            continue  # a file that is not a grading record is not a student's (the report counts who is missing)
        out[str(record.get("student") or path.stem)] = record
    return out


def _log_rows(reports: Path) -> List[Dict[str, str]]:
    path = reports / "log.csv"
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def hint_as_read(message: str, kind: str) -> str:
    """The reusable part of a failed check's message as the student read it: its hint (else its problem,
    without the case it was found on), on one line."""
    if kind == "todo":
        return "TODO not written yet"
    if kind == "integrity":
        return "a provenance finding cost this cell's points (see 'Whom to look at')"
    if kind == "timeout":
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


# ----------------------------------------------------------------------------- students with the same code

SIMILAR_THRESHOLD = 0.95  # two students' own code at least this alike (difflib ratio of normalised tokens)
SIMILAR_MAX_STUDENTS = 400  # compared pairwise (a class of 300 is about 45,000 cheap comparisons); the rest named
SIMILAR_MIN_TOKENS = 8  # fewer tokens of one's own than this is too little code to call two students alike
SIMILAR_MAX_RATIOS = 20_000  # full difflib comparisons at most (the cheap bounds leave far fewer in a real class)
_SHINGLE = 4


def answer_tokens(text: str) -> List[str]:
    """Python text as tokens that ignore what a copy changes cheaply: comments, blank lines and spacing dropped,
    strings made ``S``, every identifier made ``x`` (an attribute's name kept: it is the API's); text that does
    not tokenize falls back to its words."""
    out: List[str] = []
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, value = token.type, token.string
            if kind in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER) or (kind == tokenize.NEWLINE):
                if kind == tokenize.NEWLINE:
                    out.append(";")
                continue
            name = tokenize.tok_name.get(kind, "")
            if name in ("STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END"):  # an f-string's text too
                out += ["S"] if name in ("STRING", "FSTRING_START") else []
                previous = value
                continue
            if kind == tokenize.NAME and not keyword.iskeyword(value) and previous != ".":
                value = "x"
            elif kind == tokenize.INDENT:
                value = "{"
            elif kind == tokenize.DEDENT:
                value = "}"
            out.append(value)
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text.split()
    return out


def own_tokens(tokens: List[str], starter: List[str]) -> List[str]:
    """The tokens a student wrote: what is not part of the released starter's text (its given lines, docstrings)."""
    matcher = difflib.SequenceMatcher(None, starter, tokens, autojunk=False)
    return [t for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for t in tokens[j1:j2]]


def answer_cell_ids(lab: str, notebook: dict) -> List[str]:
    """The grade ids of the lab's TODO answer cells: solution cells that define one of the lab's TODOs (every
    ungraded solution cell when the lab declares none)."""
    from autograder.labs import BY_ID

    lab_declared = BY_ID.get(lab)
    names = (
        {s.qualname.rsplit(".", 1)[-1] for part in lab_declared.parts for s in part.todos} if lab_declared else set()
    )
    out = []
    for cell in notebook.get("cells", []):
        meta = nbread.nbgrader(cell)
        if not meta.get("solution") or meta.get("grade") or not nbread.grade_id(cell):
            continue
        text = nbread.cell_text(cell)
        if not names or any(re.search(rf"\bdef\s+{re.escape(n)}\s*\(", text) for n in names):
            out.append(nbread.grade_id(cell))
    return out


def _answer_text(path: Path, ids: List[str]) -> Optional[str]:
    try:
        notebook = json.loads(path.read_text())
        cells = {nbread.grade_id(c): nbread.cell_text(c) for c in notebook.get("cells", []) if isinstance(c, dict)}
    except (OSError, ValueError, AttributeError):
        return None
    return "\n".join(cells.get(i, "") for i in ids)


def _ratio(a: List[str], b: List[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def similar_students(
    lab: str, work: Path, source: Path, students: List[str], release: Optional[Path] = None
) -> Dict[str, Any]:
    """Pairs of students of ``lab`` whose TODO answers are near-identical to each other: their own code (the
    answer cells as ``answer_tokens``, the released starter's text taken out) at least ``SIMILAR_THRESHOLD`` alike,
    and more alike to each other than either is to the solution (two natural answers to a six-line TODO are not a
    pair). A student whose code equals the starter or the solution is never paired. Instructor-only: it is in
    the insight report and nowhere a student reads."""
    from autograder.course.layout import RELEASE_DIR

    solution = json.loads(source.read_text())
    ids = answer_cell_ids(lab, solution)
    release = release or RELEASE_DIR / source.parent.name / source.name
    starter = answer_tokens(_answer_text(release, ids) or "") if release.exists() else []
    reference = own_tokens(answer_tokens(_answer_text(source, ids) or ""), starter)
    out: Dict[str, Any] = {
        "threshold": SIMILAR_THRESHOLD,
        "pairs": [],
        "compared": 0,
        "not_compared": [],
        "stopped_early": False,
    }
    if not ids:
        return out
    code: Dict[str, List[str]] = {}
    for student in students:
        text = _answer_text(work / "submitted" / student / lab / source.name, ids)
        mine = own_tokens(answer_tokens(text), starter) if text is not None else []
        if len(mine) >= SIMILAR_MIN_TOKENS and mine != reference:
            code[student] = mine
    names = sorted(code)
    out["not_compared"] = names[SIMILAR_MAX_STUDENTS:]
    names = names[:SIMILAR_MAX_STUDENTS]
    out["compared"] = len(names)
    shingles = {
        s: {tuple(code[s][i : i + _SHINGLE]) for i in range(max(1, len(code[s]) - _SHINGLE + 1))} for s in names
    }
    to_solution: Dict[str, float] = {}
    budget = SIMILAR_MAX_RATIOS
    for n, a in enumerate(names):
        for b in names[n + 1 :]:
            common = len(shingles[a] & shingles[b])
            if common < 0.7 * max(len(shingles[a]), len(shingles[b])):
                continue  # cheap bound: far apart in their 4-token runs
            matcher = difflib.SequenceMatcher(None, code[a], code[b], autojunk=False)
            if matcher.quick_ratio() < SIMILAR_THRESHOLD:
                continue
            budget -= 1
            if budget < 0:
                out["stopped_early"] = True
                break
            ratio = matcher.ratio()
            if ratio < SIMILAR_THRESHOLD:
                continue
            for who in (a, b):
                if who not in to_solution:
                    to_solution[who] = _ratio(code[who], reference) if reference else 0.0
            if ratio > max(to_solution[a], to_solution[b]):
                out["pairs"].append({"students": [a, b], "similarity": round(ratio, 3)})
        if out["stopped_early"]:
            break
    out["pairs"].sort(key=lambda p: (-p["similarity"], p["students"]))
    return out


# ----------------------------------------------------------------------------- the report's data


def build(lab: str, work: Path, source: Path, similarity: bool = True) -> dict:
    """The report's data (what ``insight.json`` holds); ``similarity=False`` leaves out the students' pairs."""
    cells = lab_cells(source)
    notebook = source.stem
    maximum = sum(c["points"] for c in cells)
    scores = _scores(work, lab, notebook)
    events = _events(work, lab)
    reports = work / "reports" / lab
    students = sorted(set(scores) | set(events))
    totals = {s: round(sum(scores.get(s, {}).values()), 3) for s in students}
    values = sorted(totals.values())
    passes = []
    for cell in cells:
        got = [scores[s].get(cell["grade_id"], 0.0) for s in students if s in scores]
        full = sum(1 for v in got if cell["points"] and v >= cell["points"] - 1e-9)
        passes.append(
            {**cell, "students": len(got), "full": full, "pass_rate": round(full / len(got), 4) if got else None}
        )
    rows = _log_rows(reports)
    unreadable = sorted(
        {r.get("student_id", "") for r in rows if r.get("stage") == "repair" and r.get("kind") in UNREADABLE_KINDS}
        - {""}
    )
    misconceptions = _misconceptions(
        cells, {s: r for s, r in events.items() if s not in unreadable}, teaching(lab, source)
    )
    flagged: Dict[str, Dict[str, List[str]]] = {
        "findings": defaultdict(list),
        "limits": defaultdict(list),
        "repairs": defaultdict(list),
    }
    resubmitted: Dict[str, Dict[str, object]] = {}
    for row in rows:
        kind, student = row.get("kind", ""), row.get("student_id", "")
        if row.get("stage") == "repair" and kind in RESUBMISSION_KINDS:
            entry = resubmitted.setdefault(student, {"graded": "", "superseded": []})
            if kind == "graded-submission":
                entry["graded"] = row.get("detail", "")
            else:
                entry["superseded"].append(row.get("detail", ""))
        elif row.get("stage") == "repair":
            if kind != "added-cells":
                flagged["repairs"][kind].append(student)
        elif kind in FLAG_KINDS:
            flagged["findings"][kind].append(student)
        elif kind in LIMIT_KINDS or kind.endswith("limit"):
            flagged["limits"][kind].append(student)
    flagged = {group: {kind: sorted(set(who)) for kind, who in kinds.items()} for group, kinds in flagged.items()}
    readable = [s for s in students if s not in unreadable]
    similar = similar_students(lab, work, source, readable) if similarity else {}
    points = {c["grade_id"]: c["points"] for c in cells}
    lost = {
        s: round(maximum - totals[s], 3)
        if s in scores
        else sum(p for g, p in points.items() if not (events[s].get("verdicts") or {}).get(g, {}).get("passed"))
        for s in students
    }
    seconds = [float(r.get("seconds", 0)) for r in events.values() if r.get("seconds") is not None]
    failed = sorted(p.stem[len("error-") :] for p in reports.glob("error-*.log")) if reports.is_dir() else []
    return {
        "lab": lab,
        "notebook": notebook,
        "students": len(students),
        "max_score": maximum,
        "table": {s: {c["grade_id"]: scores.get(s, {}).get(c["grade_id"]) for c in cells} for s in students},
        "lost": lost,
        "unreadable": unreadable,
        "resubmitted": {s: resubmitted[s] for s in sorted(resubmitted)},
        "scores": {
            "totals": totals,
            "median": statistics.median(values) if values else None,
            "zero": sum(1 for v in values if v <= 1e-9),
            "full": sum(1 for v in values if maximum and v >= maximum - 1e-9),
            "between": sum(1 for v in values if 1e-9 < v < maximum - 1e-9),
        },
        "cells": passes,
        "misconceptions": misconceptions,
        "flagged": flagged,
        "similar": similar,
        "health": {
            "seconds_median": round(statistics.median(seconds), 2) if seconds else None,
            "seconds_max": round(max(seconds), 2) if seconds else None,
            "kernels_restarted": sum(1 for r in rows if r.get("kind") == "kernel-died"),
            "spare_kernels": sum(int(r.get("spare_kernels") or 0) for r in events.values()),
            "isolation": sorted({str(r.get("isolation")) for r in events.values() if r.get("isolation")}),
            "failed_gradings": failed,
            "not_graded": sorted(set(scores) - set(events)),
            **_where_time_went(events),
        },
    }


def _where_time_went(events: Dict[str, dict]) -> Dict[str, Any]:
    """Seconds by phase of grading over the class (each student's events file has them), and the outliers: a
    student who took more than twice the median and 20 s over it, with the phase that took most of their time."""
    seconds = {s: float(r["seconds"]) for s, r in events.items() if r.get("seconds") is not None}
    median = statistics.median(seconds.values()) if seconds else 0.0
    phases: Dict[str, float] = defaultdict(float)
    for record in events.values():
        for name, value in (record.get("phases") or {}).items():
            phases[name] += float(value)
    slow = []
    for student, took in sorted(seconds.items(), key=lambda kv: -kv[1]):
        if took > max(2 * median, median + 20):
            own = events[student].get("phases") or {}
            phase, spent = max(own.items(), key=lambda kv: kv[1]) if own else ("(not recorded)", 0.0)
            slow.append(
                {"student": student, "seconds": round(took, 1), "phase": phase, "phase_seconds": round(spent, 1)}
            )
    return {
        "phases": {name: round(value, 1) for name, value in sorted(phases.items(), key=lambda kv: -kv[1])},
        "slowest": slow[:10],
    }


def _misconceptions(
    cells: List[Dict[str, Any]], events: Dict[str, dict], teaches: Optional[Dict[str, Any]] = None
) -> List[Dict[str, Any]]:
    """One row per distinct failure pattern, most students first: each failed check's hint grouped by
    ``hint_key`` across cells (the hint shown as most students read it), then hints that the very same students
    got merged into one row (one bug that fails several checks is one row, with each of its hints). Its
    ``taught_in``: the sections that teach its hints (``taught_in``), most failures first; ``section`` joins them."""
    teaches = teaches or {}
    order = {c["grade_id"]: n for n, c in enumerate(cells)}
    section_of = {c["grade_id"]: c["section"] for c in cells}
    by_key: Dict[str, Dict[str, Any]] = {}
    for student, record in events.items():
        for grade_id, verdict in (record.get("verdicts") or {}).items():
            if verdict.get("passed") or grade_id not in order:
                continue
            read = hint_as_read(str(verdict.get("message", "")), str(verdict.get("kind", "")))
            group = by_key.setdefault(
                hint_key(read), {"read": Counter(), "students": set(), "cells": set(), "taught": Counter()}
            )
            group["read"][read] += 1
            kind = str(verdict.get("kind", ""))
            group["taught"][taught_in(grade_id, read, kind, section_of[grade_id], teaches)] += 1
            group["students"].add(student)
            group["cells"].add(grade_id)
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


def write(lab: str, work: Path, source: Path) -> Path:
    """Write ``insight.html``, ``insight.json`` and the PNGs into ``work/reports/<lab>/``; the page's path."""
    data = build(lab, work, source)
    images = plots(data)
    folder = work / "reports" / lab
    folder.mkdir(parents=True, exist_ok=True)
    for name, png in images.items():
        (folder / name).write_bytes(png)
    (folder / "insight.json").write_text(json.dumps(data, indent=1))
    (folder / "misconceptions.csv").write_text(misconceptions_csv(data))
    target = folder / "insight.html"
    target.write_text(page(data, images))
    return target


# ----------------------------------------------------------------------------- across labs

FAILING_BELOW = 0.6  # a student is failing a lab below this share of its points


def _names(work: Path) -> Dict[str, str]:
    """``{student id: "first last"}`` from the gradebook (empty where it has no names)."""
    from nbgrader.api import Gradebook

    database = work / "gradebook.db"
    if not database.exists():
        return {}
    with Gradebook(f"sqlite:///{database}") as gradebook:
        return {
            st.id: " ".join(n for n in (st.first_name, st.last_name) if n and n != "None") for st in gradebook.students
        }


def across(work: Path, labs: Optional[Dict[str, Path]] = None) -> dict:
    """The class across labs, from the data each lab's report is built from (``build``, without similarity):
    ``students``, those failing (under ``FAILING_BELOW`` of the points) in two labs or more, with the points they
    lost in every lab graded; ``misconceptions``, each hint key's count of students per lab; ``labs`` the labs
    with grading data, ``skipped`` those without (no events file and no gradebook entry)."""
    if labs is None:
        from autograder.course.layout import LABS, SOURCE_DIR, graded_labs

        labs = {lab: SOURCE_DIR / lab / LABS[lab] for lab in graded_labs()}
    included, skipped, per_lab = [], [], {}
    for lab, source in labs.items():
        data = build(lab, work, source, similarity=False)
        if not data["students"]:
            skipped.append(lab)
            continue
        included.append(lab)
        per_lab[lab] = data
    names = _names(work)
    students = []
    for student in sorted({s for data in per_lab.values() for s in data["lost"]}):
        lost = {lab: data["lost"][student] for lab, data in per_lab.items() if student in data["lost"]}
        failing = [
            lab
            for lab in lost
            if per_lab[lab]["max_score"] and lost[lab] > (1 - FAILING_BELOW) * per_lab[lab]["max_score"] + 1e-9
        ]
        if len(failing) >= 2:
            unreadable = [lab for lab in lost if student in per_lab[lab]["unreadable"]]
            students.append(
                {
                    "student": student,
                    "name": names.get(student, ""),
                    "failing": failing,
                    "lost": lost,
                    "unreadable": unreadable,
                }
            )
    students.sort(key=lambda r: (-len(r["failing"]), -sum(r["lost"].values()), r["student"]))
    trend: Dict[str, Dict[str, Any]] = {}
    for lab, data in per_lab.items():
        for row in data["misconceptions"]:
            for key, hint in row.get("by_key", {}).items():
                entry = trend.setdefault(key, {"key": key, "hint": hint, "counts": {}})
                entry["counts"][lab] = entry["counts"].get(lab, 0) + row["count"]
    misconceptions = sorted(trend.values(), key=lambda r: (-len(r["counts"]), -sum(r["counts"].values()), r["key"]))
    return {
        "labs": included,
        "skipped": skipped,
        "max_score": {lab: per_lab[lab]["max_score"] for lab in included},
        "failing_below": FAILING_BELOW,
        "students": students,
        "misconceptions": misconceptions,
    }


def across_csv(data: dict) -> str:
    """The cross-lab view as one CSV: ``row`` is ``student`` (one per student failing in several labs; a lab's
    column holds the points lost there, empty where not graded) or ``misconception`` (a hint key; a lab's column
    holds how many students got it there)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["row", "id", "name", "hint_as_read", *data["labs"]])
    for r in data["students"]:
        writer.writerow(
            [
                "student",
                r["student"],
                r["name"],
                "",
                *(format(r["lost"][lab], "g") if lab in r["lost"] else "" for lab in data["labs"]),
            ]
        )
    for m in data["misconceptions"]:
        writer.writerow(["misconception", m["key"], "", m["hint"], *(m["counts"].get(lab, 0) for lab in data["labs"])])
    return buffer.getvalue()


def write_across(work: Path, labs: Optional[Dict[str, Path]] = None) -> Tuple[Path, dict]:
    """Write ``reports/across.html`` and ``reports/across.csv``; the page's path and the data."""
    data = across(work, labs)
    folder = work / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "across.csv").write_text(across_csv(data))
    target = folder / "across.html"
    target.write_text(across_page(data))
    return target, data


def main(argv: Optional[List[str]] = None) -> int:
    from autograder.course.layout import LABS, ROOT, SOURCE_DIR

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
    data = json.loads((path.parent / "insight.json").read_text())
    print(f"insight: {path.resolve()} ({data['students']} students, {len(data['misconceptions'])} distinct hints)")
    top = data["misconceptions"][:5]
    for m in top:
        print(f"  {m['count']:>4}  {m['grade_id']}: {m['hint'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
