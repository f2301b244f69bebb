"""The class across labs (``make insight`` without a lab): ``reports/across.html`` and ``across.csv``, from the data
each lab's insight report is built from (``autograder.feedback.insight.build``): the students failing in several
labs (their names: the gradebook's, else as the download wrote them; the points lost in each lab) and each hint's
count of students per lab."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from autograder.feedback import insight
from autograder.feedback.insight_page import across_page


FAILING_BELOW = 0.6  # a student is failing a lab below this share of its points


def _names(work: Path) -> Dict[str, str]:
    """``{student id: "first last"}`` from the gradebook (only where it has a name)."""
    from nbgrader.api import Gradebook

    database = work / "gradebook.db"
    if not database.exists():
        return {}
    with Gradebook(f"sqlite:///{database}") as gradebook:
        names = {
            st.id: " ".join(n for n in (st.first_name, st.last_name) if n and n != "None") for st in gradebook.students
        }
    return {student: name for student, name in names.items() if name}


def across(work: Path, labs: Optional[Dict[str, Path]] = None) -> dict:
    """The class across labs, from the data each lab's report is built from (``insight.build``, without similarity):
    ``students``, those failing (under ``FAILING_BELOW`` of the points) in two labs or more, with the points they
    lost in every lab graded; ``misconceptions``, each hint key's count of students per lab; ``labs`` the labs
    with grading data, ``skipped`` those without (no events file and no gradebook entry)."""
    if labs is None:
        from autograder.course.layout import LABS, SOURCE_DIR, graded_labs

        labs = {lab: SOURCE_DIR / lab / LABS[lab] for lab in graded_labs()}
    included, skipped, per_lab = [], [], {}
    for lab, source in labs.items():
        data = insight.build(lab, work, source, similarity=False)
        if not data["students"]:
            skipped.append(lab)
            continue
        included.append(lab)
        per_lab[lab] = data
    written = {s: n for data in per_lab.values() for s, n in data.get("names", {}).items() if n}
    names = {**written, **_names(work)}  # the gradebook's name first, else the name as the download wrote it
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
    (folder / "across.csv").write_text(across_csv(data), encoding="utf-8")
    target = folder / "across.html"
    target.write_text(across_page(data), encoding="utf-8")
    return target, data
