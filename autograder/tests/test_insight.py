"""The insight report tells the story (issue 37): hints as students read them, one row per failure pattern,
unreadable files apart, every student linked to their feedback, the misconceptions as CSV. Built here from
synthetic grading output (events files and log.csv, as make grade writes them); the class simulation checks
the report on real grading."""

from __future__ import annotations

import ast
import csv
import html
import io
import json
import re
from pathlib import Path
from typing import Any, List

from autograder.feedback import insight, insight_across, insight_hints, insight_page, insight_similar
from autograder.course import notebook as nbread
from autograder.feedback.inert import live_markup
from autograder.course.layout import LABS, SOURCE_DIR
from autograder.verdict.events import write_record

LAB = "05-prefix-cache"
SOURCE = SOURCE_DIR / LAB / LABS[LAB]


def _verdict(message: str, kind: str = "check") -> dict:
    return {"passed": False, "kind": kind, "message": message}


def _write(work, verdicts_by_student: dict, log_rows: list, lab: str = LAB) -> None:
    events = work / "events" / lab
    events.mkdir(parents=True)
    for student, verdicts in verdicts_by_student.items():
        write_record(
            events / f"{student}.json",
            {
                "student": student,
                "assignment": lab,
                "isolation": None,
                "seconds": 3.0,
                "events": [],
                "verdicts": verdicts,
            },
        )
    reports = work / "reports" / lab
    reports.mkdir(parents=True)
    with open(reports / "log.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["student_id", "stage", "kind", "detail"])
        writer.writeheader()
        writer.writerows(log_rows)
    # what collection wrote of the students: their repairs (as make collect writes collected.json)
    repairs: dict = {}
    for row in log_rows:
        if row["stage"] == "repair":
            repairs.setdefault(row["student_id"], []).append([row["kind"], row["detail"]])
    collected = [{"student": s, "name": s, "file": "x.ipynb", "repairs": r} for s, r in repairs.items()]
    (reports / "collected.json").write_text(json.dumps(collected))


def test_the_report_groups_hints_by_pattern_and_shows_them_as_read(tmp_path):
    block = "with block_size 16 the chain restarts: is your condition true for 16?"
    _write(
        tmp_path,
        {
            # one bug failing two cells with two hints, for two students who met it on different cases
            "ann": {
                "lab05-visible-hash-blocks": _verdict(f"[case 1] wrong\n  hint:     {block}"),
                "lab05-hidden-hash-blocks": _verdict("[trace 3] differs\n  hint:     Start the chain at -1"),
            },
            "bob": {
                "lab05-visible-hash-blocks": _verdict(f"[case 2] wrong\n  hint:     {block.replace('16', '4')}"),
                "lab05-hidden-hash-blocks": _verdict("[trace 7] differs\n  hint:     start the chain at -1"),
            },
            # a TODO left unwritten fails every cell of its part: one row, not one per cell
            "cat": {
                g: _verdict("", "todo")
                for g in ("lab05-visible-allocate", "lab05-hidden-hits", "lab05-hidden-admit-traces")
            },
            # a file that could not be read: graded as the release, listed apart
            "dan": {g: _verdict("", "todo") for g in ("lab05-visible-hash", "lab05-hidden-hash")},
        },
        [{"student_id": "dan", "stage": "repair", "kind": "invalid-json", "detail": "Expecting value"}],
    )
    data = insight.build(LAB, tmp_path, SOURCE)
    rows = data["misconceptions"]
    assert [(r["count"], r["students"]) for r in rows] == [(2, ["ann", "bob"]), (1, ["cat"])]
    pattern = rows[0]
    assert pattern["cells"] == ["lab05-visible-hash-blocks", "lab05-hidden-hash-blocks"]
    assert block in pattern["hints"] or block.replace("16", "4") in pattern["hints"], pattern  # verbatim, not "N"
    assert not any(" N" in h for h in pattern["hints"]) and len(pattern["hints"]) == 2  # capitals merged
    assert rows[1]["hints"] == ["TODO not written yet"] and len(rows[1]["cells"]) == 3
    assert data["unreadable"] == ["dan"] and all("dan" not in r["students"] for r in rows)

    page = insight.page(data, {})
    assert "ask them to resubmit" in page and "dan" in page
    assert not re.search(r"<script|\son[a-z]+\s*=|javascript:", page, re.IGNORECASE)
    for student in ("ann", "bob", "cat", "dan"):  # every student, linked to their feedback page
        assert f'href="../../feedback/{student}/{LAB}/prefix_cache.html"' in page, student
    table = list(csv.DictReader(io.StringIO(insight.misconceptions_csv(data))))
    assert [(t["students"], t["student_ids"]) for t in table] == [("2", "ann bob"), ("1", "cat")]
    assert "is your condition true for n?" in table[0]["pattern"] and " | " in table[0]["pattern"]
    assert table[0]["hint_as_read"] == " | ".join(pattern["hints"]) and table[1]["pattern"] == "todo not written yet"
    assert "lab05-hidden-hash-blocks" in table[0]["cells"]


def test_write_puts_the_csv_beside_the_page(tmp_path):
    _write(tmp_path, {"eve": {"lab05-visible-hash": _verdict("[x] no\n  hint:     use xxh64")}}, [])
    page = insight.write(LAB, tmp_path, SOURCE)
    folder = page.parent
    lines = (folder / "misconceptions.csv").read_text().splitlines()
    assert lines[0] == "pattern,hint_as_read,cells,students,student_ids,taught_in"
    # digits inside a name are not a number; a hint no TEACHES fragment holds is taught where its task is
    assert (
        lines[1]
        == 'use xxh64,use xxh64,lab05-visible-hash,1,eve,"2. Your task, part 1: `compute_hash(token_ids, prefix=-1)`"'
    )


def test_a_student_id_with_markup_is_escaped_and_its_link_stays_relative(tmp_path):
    """An id is the student's own text: in the table and the link it is quoted, never markup or a way out."""
    odd = 'x"><b>y&z'
    _write(tmp_path, {odd: {"lab05-visible-hash": _verdict("[x] no\n  hint:     <img src=q onerror=alert(1)>")}}, [])
    page = insight.page(insight.build(LAB, tmp_path, SOURCE), {})
    assert f'href="../../feedback/x%22%3E%3Cb%3Ey%26z/{LAB}/prefix_cache.html"' in page
    assert "<b>y" not in page and "<img src=q" not in page and "&lt;img src=q onerror" in page  # shown, as text
    assert not re.search(r"<script|<[^>]*\son[a-z]+\s*=|javascript:", page, re.IGNORECASE)  # no live markup
    assert live_markup(page) == [], live_markup(page)


def test_the_report_says_where_grading_time_went_and_names_the_outliers(tmp_path):
    """Each student's events file holds seconds by phase (``autograder.grade.timing.timed``): the report adds them up
    and names a student who took far longer than the others, with the phase that took their time."""
    events = tmp_path / "events" / LAB
    events.mkdir(parents=True)
    for student, seconds, phases in (
        ("fast1", 8.0, {"notebook cells": 3.0, "kernel start": 1.0}),
        ("fast2", 9.0, {"notebook cells": 4.0, "kernel start": 1.0}),
        ("fast3", 7.0, {"notebook cells": 2.5, "kernel start": 1.0}),
        ("stuck", 309.8, {"notebook cells": 5.0, "part boxes replaying": 300.1}),
    ):
        write_record(
            events / f"{student}.json",
            {
                "student": student,
                "assignment": LAB,
                "isolation": None,
                "seconds": seconds,
                "phases": phases,
                "events": [],
                "verdicts": {},
            },
        )
    health = insight.build(LAB, tmp_path, SOURCE)["health"]
    assert health["slowest"] == [
        {"student": "stuck", "seconds": 309.8, "phase": "part boxes replaying", "phase_seconds": 300.1}
    ]
    assert health["phases"]["notebook cells"] == 14.5 and list(health["phases"])[0] == "part boxes replaying"
    assert "stuck 309.8 s (most in part boxes replaying: 300.1 s)" in insight.page(
        insight.build(LAB, tmp_path, SOURCE), {}
    )


def test_a_student_who_submitted_several_times_is_named_with_the_graded_and_superseded_times(tmp_path):
    """Issue 37 item 6b: the hub's exchange keeps every submission; which was graded and which were superseded
    reaches the report (from log.csv's graded-submission and superseded lines), apart from the repairs."""
    _write(
        tmp_path,
        {"ann": {"lab05-visible-hash": _verdict("[x] no\n  hint:     use xxh64")}},
        [
            {"student_id": "ann", "stage": "repair", "kind": "graded-submission", "detail": "2026-01-03 09:15:00 UTC"},
            {
                "student_id": "ann",
                "stage": "repair",
                "kind": "superseded",
                "detail": "submission of 2026-01-01 10:00:00 UTC superseded by 2026-01-03 09:15:00 UTC",
            },
        ],
    )
    data = insight.build(LAB, tmp_path, SOURCE)
    assert data["resubmitted"] == {
        "ann": {
            "graded": "2026-01-03 09:15:00 UTC",
            "superseded": ["submission of 2026-01-01 10:00:00 UTC superseded by 2026-01-03 09:15:00 UTC"],
        }
    }
    assert "superseded" not in data["flagged"]["repairs"] and "graded-submission" not in data["flagged"]["repairs"]
    page = insight.page(data, {})
    assert "Submitted several times" in page and "superseded by 2026-01-03 09:15:00 UTC" in page
    assert live_markup(page) == []


def test_taught_in_names_the_section_that_teaches_the_hint_not_the_tasks(tmp_path):
    """Lab 05: the token check is taught in § 7 (a TEACHES fragment of the hint), the chain in § 1; a hint the
    lab's checks say nothing about, and a TODO not written, name the task's section."""
    _write(
        tmp_path,
        {
            "ann": {
                "lab05-hidden-hits": _verdict(
                    "[c] 1 != 0\n  hint:     on a hash hit compare the block's token_ids with the sequence's"
                )
            },
            "bob": {"lab05-visible-hash": _verdict("[c] x\n  hint:     feed the prefix into the digest")},
            "cat": {"lab05-hidden-admit-traces": _verdict("[c] x\n  hint:     walk full blocks from the start")},
            "dan": {"lab05-hidden-hits": _verdict("", "todo")},
        },
        [],
    )
    rows = {r["students"][0]: r for r in insight.build(LAB, tmp_path, SOURCE)["misconceptions"]}
    assert rows["ann"]["taught_in"] == ["7. Why the token check, and what it does not cover"]
    assert rows["bob"]["taught_in"] == ["1. What a block's keys and values depend on"]
    assert (
        rows["cat"]["taught_in"]
        == rows["dan"]["taught_in"]
        == ["5. Your task, part 4: admit a request (`can_allocate`, `allocate`)"]
    )
    page = insight.page(insight.build(LAB, tmp_path, SOURCE), {})
    assert "<td>7. Why the token check, and what it does not cover</td>" in page


def test_a_hidden_check_names_its_section_with_grades_teaches(tmp_path):
    """Lab 03's hidden checks are marked ``@grades(..., teaches="§ 2")``: a hint no fragment holds is taught in the
    section its cell's check names; the random workload's check names none, so its task's section (§ 3)."""
    lab = "03-decode-growth"
    _write(
        tmp_path,
        {
            "ann": {
                "lab03-hidden-rollback": _verdict("[c] x\n  hint:     With block_size 1 every token needs a block.")
            },
            "bob": {"lab03-hidden-random": _verdict("[c] x\n  hint:     the reference manager completes this decode")},
            "cat": {"lab03-visible": _verdict("[c] 2 != 3\n  hint:     8 % 4 == 0: a new block")},
        },
        [],
        lab,
    )
    rows = {r["students"][0]: r for r in insight.build(lab, tmp_path, SOURCE_DIR / lab / LABS[lab])["misconceptions"]}
    assert rows["ann"]["taught_in"] == ["2. Roll back on OOM"]
    assert rows["bob"]["taught_in"] == ["3. Your task: `allocate_for_decode`"]
    assert rows["cat"]["taught_in"] == ["1. When does a token need a new block?"]  # a visible test's hint, by fragment


def _labs_with_checks():
    """``(lab, notebook name, checks module)`` for every lab whose checks module imports."""
    import importlib

    from autograder.labs import checks_module

    for lab, name in LABS.items():
        try:
            module = importlib.import_module(checks_module(lab))
        except ImportError:
            continue
        yield lab, name, module


def test_every_teaches_reference_names_a_section_of_its_lab():
    """A ``teaches`` that names no heading of its lab's notebook (a renumbered section) fails here, not silently."""
    from autograder.labs.checking import grades

    marked = 0
    for lab, name, module in _labs_with_checks():
        headings = insight_hints.lab_headings(SOURCE_DIR / lab / name)
        refs = list(getattr(module, "TEACHES", {}).values())
        refs += [getattr(v, "__teaches__", "") for v in vars(module).values() if hasattr(v, "__grades__")]
        for ref in filter(None, refs):
            marked += 1
            assert insight_hints.section_named(ref, headings), (lab, ref)
    assert marked >= 10
    assert insight_hints.section_named("§ 12", ["1. One", "12. Twelve"]) == "12. Twelve"
    assert insight_hints.section_named("§ 1", ["12. Twelve", "1.2 Sub"]) is None
    try:
        grades(print, teaches="3.2")
    except ValueError:
        pass
    else:
        raise AssertionError("grades(teaches='3.2') must say how to name a section")


def _string_constants(source: str, leave_out: str = "") -> List[str]:
    """Every string a piece of code holds (adjacent literals joined, an f-string's literal parts), but those of
    the assignment to ``leave_out``; code that is not Python (a cell's ``%pip``) as it is."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [source]
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == leave_out for t in node.targets)
        for n in ast.walk(node)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skipped
    ]


def _hint_modules(module) -> List[Any]:
    """The checks module and the course modules it imports from (``autograder.labs.checking``'s helpers,
    ``paged_kv.lab``'s trace replays): where the hints its checks give are written."""
    import importlib
    import inspect

    found = {module.__name__: module}
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("paged_kv.lab", "autograder.labs")):
            parent = importlib.import_module(node.module)
            for alias in node.names:
                child = getattr(parent, alias.name, None)
                target = child if inspect.ismodule(child) else parent
                found[target.__name__] = target
    return list(found.values())


def test_every_teaches_fragment_occurs_in_a_hint_of_its_lab():
    """A ``TEACHES`` fragment that no hint of its lab holds any more (a reworded hint) fails here, not silently:
    each must occur, lower-cased, in a string of the lab's notebook's code cells (the visible tests' hints) or
    of its checks module and the course modules it imports from (the hidden checks' hints, and those of the
    trace replays that labs 07 and 09 share with their visible tests), ``TEACHES`` itself left out."""
    import inspect

    from autograder.course import notebook as nbread

    fragments = 0
    for lab, name, module in _labs_with_checks():
        teaches = getattr(module, "TEACHES", {})
        if not teaches:
            continue
        strings = [s for m in _hint_modules(module) for s in _string_constants(inspect.getsource(m), "TEACHES")]
        for cell in json.loads((SOURCE_DIR / lab / name).read_text())["cells"]:
            if cell.get("cell_type") == "code":
                strings += _string_constants(nbread.cell_text(cell))
        hints = "\n".join(strings).lower()
        for fragment in teaches:
            fragments += 1
            assert fragment == fragment.lower(), (lab, fragment)
            assert fragment in hints, f"{lab}: TEACHES fragment {fragment!r} is in no hint of the lab"
    assert fragments >= 15


STARTER_03 = '''class KVCacheManager(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req: Request) -> None:
        """Add one token to req; take one free block only if that token starts a new block.
        On OOM raise RuntimeError('OOM ...') and change nothing."""
        self._check_decode(req)  # given: a prefilled Request whose table matches its length
'''
ODD_03 = (
    STARTER_03
    + '''        pos = req.seq_len
        if pos % self.block_size == 0:
            if len(self.free_blocks) == 0:
                raise RuntimeError("OOM")
            blk = self.free_blocks[0]
            del self.free_blocks[0]
            req.block_table += [blk]
        req.seq_len = pos + 1
'''
)
COPY_03 = (
    STARTER_03
    + '''        p = req.seq_len   # the position of the new token
        if p % self.block_size == 0:

            if len(self.free_blocks) == 0:
                raise RuntimeError('OOM: no free block')
            b = self.free_blocks[0]
            del self.free_blocks[0]
            req.block_table += [b]
        req.seq_len = p + 1
'''
)
OTHER_03 = (
    STARTER_03
    + '''        needs = len(req.block_table) * self.block_size <= req.seq_len
        if needs and not self.free_blocks:
            raise RuntimeError("OOM")
        if needs:
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len += 1
'''
)


def _submit(work, lab: str, answers: dict) -> None:
    """Each student's submitted notebook: the lab's source with the TODO cell's text replaced by theirs."""
    import json

    source = json.loads((SOURCE_DIR / lab / LABS[lab]).read_text())
    for student, text in answers.items():
        notebook = json.loads(json.dumps(source))
        for cell in notebook["cells"]:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "lab03-decode":
                cell["source"] = text
        folder = work / "submitted" / student / lab
        folder.mkdir(parents=True)
        (folder / LABS[lab]).write_text(json.dumps(notebook))


def test_two_students_with_the_same_code_are_a_pair_for_the_instructor_only(tmp_path):
    """A copy with other names, comments and spacing is found; the solution, the untouched starter and a different
    answer are not paired; the pair shows under 'Whom to look at' and in no file outside the lab's report."""
    import json

    lab = "03-decode-growth"
    solution = json.loads((SOURCE_DIR / lab / LABS[lab]).read_text())
    solved = next(nbread.cell_text(c) for c in solution["cells"] if nbread.grade_id(c) == "lab03-decode")
    answers = {
        "ann": ODD_03,
        "bob": COPY_03,
        "cat": solved,  # the solution, twice: natural, not a pair
        "cid": solved.replace("new_seq_len", "n"),
        "dan": STARTER_03 + "        raise NotImplementedError()\n",  # the starter, twice
        "dee": STARTER_03 + "        # YOUR CODE HERE\n        raise NotImplementedError()\n",
        "eve": OTHER_03,
    }
    _submit(tmp_path, lab, answers)
    _write(tmp_path, {s: {"lab03-visible": _verdict("[c] x\n  hint:     y")} for s in answers}, [], lab)
    data = insight.build(lab, tmp_path, SOURCE_DIR / lab / LABS[lab])
    pairs = data["similar"]["pairs"]
    assert [p["students"] for p in pairs] == [["ann", "bob"]], pairs
    assert pairs[0]["similarity"] >= insight_similar.SIMILAR_THRESHOLD
    assert insight_similar.own_tokens(
        insight_similar.answer_tokens(COPY_03), insight_similar.answer_tokens(STARTER_03)
    )[:3] == ["x", "=", "x"]
    page = insight.page(data, {})
    whom = page[page.index("<h2>Whom to look at</h2>") :]
    assert (
        "<li>ann and bob: 100%</li>" in whom and "eve:" not in whom and "and eve" not in whom and "cat and" not in whom
    )

    insight.write(lab, tmp_path, SOURCE_DIR / lab / LABS[lab])
    mentions = [
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*")
        if p.is_file() and "submitted" not in p.parts and "ann and bob" in p.read_text(errors="replace")
    ]
    assert mentions == [f"reports/{lab}/insight.html"], mentions  # nothing a student is shown holds it


def test_no_student_facing_module_reads_the_similarity_of_students():
    """The pairs live in the insight report only: no feedback page, platform or LMS module reads them."""
    import autograder

    root = Path(autograder.__file__).parent
    readers = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if "tests" not in p.parts
        and ("similar_students" in p.read_text() or '["similar"]' in p.read_text() or '"similar"' in p.read_text())
    )
    assert readers == ["feedback/insight.py", "feedback/insight_page.py", "feedback/insight_similar.py"], readers


def test_the_view_across_labs_names_students_failing_in_several_and_each_hints_count_per_lab(tmp_path, monkeypatch):
    """Two labs with grading data and one without (skipped, and said so): a student failing both is listed with the
    points lost in each and their name from the gradebook; one failing a single lab is not; a hint key met in both
    labs has its count in each; the CSV holds the same and the page is inert."""
    import os
    import sys

    from nbgrader.api import Gradebook

    # nbgrader's Gradebook runs alembic, beside this interpreter (on PATH under make, not always under pytest)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    lab03 = "03-decode-growth"
    sources = {lab: SOURCE_DIR / lab / LABS[lab] for lab in (lab03, LAB, "01-capacity-ledger")}
    cells = {lab: nbread.lab_cells(sources[lab]) for lab in (lab03, LAB)}
    fail_all = {lab: {c["grade_id"]: _verdict("", "todo") for c in cells[lab]} for lab in cells}
    pass_all = {lab: {c["grade_id"]: {"passed": True, "kind": "pass"} for c in cells[lab]} for lab in cells}
    one_miss = dict(pass_all[LAB], **{"lab05-hidden-hits": _verdict("[c] x\n  hint:     walk full blocks")})
    _write(tmp_path, {"ann": fail_all[lab03], "bob": fail_all[lab03], "cat": fail_all[lab03]}, [], lab03)
    _write(
        tmp_path,
        {"ann": fail_all[LAB], "bob": one_miss, "cat": fail_all[LAB]},
        [{"student_id": "cat", "stage": "repair", "kind": "invalid-json", "detail": "x"}],
    )
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        gradebook.add_student("ann", first_name="Ann", last_name="Lee")
    data = insight_across.across(tmp_path, sources)
    assert data["labs"] == [lab03, LAB] and data["skipped"] == ["01-capacity-ledger"]
    maxima = {lab: sum(c["points"] for c in cells[lab]) for lab in cells}
    assert [(r["student"], r["name"], r["failing"]) for r in data["students"]] == [
        ("ann", "Ann Lee", [lab03, LAB]),
        ("cat", "", [lab03, LAB]),
    ]
    assert data["students"][0]["lost"] == maxima and data["students"][1]["unreadable"] == [LAB]
    todo = next(m for m in data["misconceptions"] if m["key"] == "todo not written yet")
    assert todo["counts"] == {lab03: 3, LAB: 1}  # cat's unreadable file is not a TODO left unwritten
    assert next(m for m in data["misconceptions"] if m["key"] == "walk full blocks")["counts"] == {LAB: 1}

    path, _ = insight_across.write_across(tmp_path, sources)
    table = list(csv.reader(io.StringIO((tmp_path / "reports" / "across.csv").read_text())))
    assert table[0] == ["row", "id", "name", "hint_as_read", lab03, LAB]
    assert table[1] == ["student", "ann", "Ann Lee", "", f"{maxima[lab03]:g}", f"{maxima[LAB]:g}"]
    assert ["misconception", "todo not written yet", "", "TODO not written yet", "3", "1"] in table
    page = path.read_text()
    assert "No grading data, skipped: 01-capacity-ledger" in page and "(file unreadable)" in page
    assert live_markup(page) == [] and "bob" not in page


def test_the_report_shows_every_event_kind_under_its_group(tmp_path):
    """Every ``EventKind`` grading can note (output cut, cells not run for the notebook's budget, exit(), ...) is
    listed under the section of its group, with what it means and who: the lists come from the enum, so a kind
    added there cannot be missing here."""
    from autograder.verdict.events import EventKind, event

    events = tmp_path / "events" / LAB
    events.mkdir(parents=True)
    kinds = list(EventKind)
    for n, kind in enumerate(kinds):
        write_record(
            events / f"s{n:02d}.json",
            {
                "student": f"s{n:02d}",
                "assignment": LAB,
                "isolation": "rlimits",
                "seconds": 1.0,
                "events": [event("lab05-hidden-hits", kind, f"detail of {kind.value}", graded=True)],
                "verdicts": {},
            },
        )
    data = insight.build(LAB, tmp_path, SOURCE)
    page = insight.page(data, {})
    whom = page[page.index("<h2>Whom to look at</h2>") :]
    for n, kind in enumerate(kinds):
        section = {"finding": "findings", "limit": "limits", "grading": "grading"}[kind.group.value]
        assert data["flagged"][section][kind.value] == [f"s{n:02d}"], kind
        title = insight_page.WHOM_TITLES[section]
        block = whom[whom.index(f"<h3>{title}</h3>") :]
        block = block[: block.index("</ul>")]
        assert f"<b>{kind.value}</b>: {kind.text} (1): s{n:02d}" in html.unescape(block), (kind, block)


def test_a_refused_student_is_listed_first_with_no_score_and_names_and_late_flags_show(tmp_path):
    """A student whose grading was refused (the record's isolation event) has no score: listed first, apart, and in
    the student table as ``refused``, out of the totals, the histogram and the pass rates. Every student's name as
    written (any script) and late flag reach the table, and names reach the lists of whom to look at."""
    from autograder.verdict.events import EventKind, event

    _write(
        tmp_path,
        {
            "ann": {"lab05-visible-hash": _verdict("[x] no\n  hint:     use xxh64")},
            "ZhangSan-1a2b": {"lab05-visible-hash": {"passed": True, "kind": "pass"}},
        },
        [],
    )
    write_record(
        tmp_path / "events" / LAB / "bob.json",
        {
            "student": "bob",
            "assignment": LAB,
            "isolation": "rlimits",
            "seconds": 0.5,
            "events": [event("notebook", EventKind.ISOLATION, "grading kernels would run as root")],
            "verdicts": {"lab05-visible-hash": {"passed": False, "kind": "error", "message": "GradingRefused"}},
        },
    )
    collected = [
        {"student": "ann", "name": "Ann Lee", "file": "x.ipynb", "repairs": [], "late": True},
        {"student": "bob", "name": "bob", "file": "x.ipynb", "repairs": []},
        {"student": "ZhangSan-1a2b", "name": "张三", "file": "x.ipynb", "repairs": [["file-name", "x"]], "late": False},
    ]
    (tmp_path / "reports" / LAB / "collected.json").write_text(json.dumps(collected))
    data = insight.build(LAB, tmp_path, SOURCE)
    assert data["refused"] == {"bob": "grading kernels would run as root"} and "bob" not in data["scores"]["totals"]
    assert data["students"] == 3 and data["graded"] == 2 and all(c["students"] == 0 for c in data["cells"])
    assert data["names"] == {"ann": "Ann Lee", "ZhangSan-1a2b": "张三"} and data["late"] == ["ann"]
    assert all("bob" not in m["students"] for m in data["misconceptions"])
    page = insight.page(data, {})
    assert page.index("Not graded: grading was refused (1)") < page.index("students graded")
    assert "<b>no score</b> (not 0)" in page and "grading kernels would run as root" in page
    table = page[page.index("<h2>Every student</h2>") :]
    rows = re.findall(r"<tr><td><a [^>]*>([^<]*)</a></td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", table)
    assert rows[0] == ("bob", "", "", "refused"), rows
    assert ("ann", "Ann Lee", "late", "0") in rows and ("ZhangSan-1a2b", "张三", "", "0") in rows, rows
    assert "ZhangSan-1a2b (张三)" in page[page.index("<h2>Whom to look at</h2>") :]  # under its repairs
    assert live_markup(page) == []
