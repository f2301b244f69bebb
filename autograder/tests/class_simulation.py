"""A whole class per lab goes through the real pipeline (collect, nbgrader autograde, generate_feedback,
export) and every student is graded as described: the solution full marks, the untouched release zero,
catalogued bugs lose the points of the checks they break, correct variants keep full marks, delegation
earns nothing, and every broken or hostile submission is graded on what it earns, with its note.

Labs are discovered from solutions/, so a new lab is simulated with no change here. Each lab grades its own
students (its catalogue's first bugs and variants: ``report.CLASS_BUGS``; test_graders.py grades every one with
the lab's checks), the replaced checks and one attack that takes its turn (the members of ``report.TAKING_TURNS``
take turns over the labs); the hostile and broken submissions, the three leaks and the five harm attacks are each
dealt to one lab, the other disguises of delegation to some (``report.shared_class``), so that ``make test`` stays
within its time; ``make grader-report`` grades every student of every lab. The labs are graded in two halves, one test file each
(``test_class_simulation_a.py``, ``_b.py``: every other lab), so that ``make test``'s two workers share them;
``define_tests(namespace, half)`` puts one half's fixture and tests into its file. The class is graded with the default budgets, except the
students whose code never ends: they are graded in a second run with short budgets (5 s a cell, 60 s a
notebook: with 12 s, lab 06's cells above its first test once used the whole budget in CI, so the loop
was never reached; ``make test`` runs these files beside the others, so the budget leaves room for a
shared CPU) so that they cost little; ``make grader-report`` grades everyone with the default
budgets. Each lab's first catalogued bug and one attack (``platform_picks``) are graded again through the
Gradescope harness (``platform_harness``), and must score as ``make grade`` scored them, cell for cell.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
from pathlib import Path
from typing import List

import pytest

import platform_harness
from attacks import (
    CONSTEXPR_VARIES,
    DOCSTRING_DEF,
    INTERPRETER_ONLY,
    LAUNCHERS_REPLACED,
    REFERENCE_ROUTES,
    SYNTAX_FAMILIES,
)
from autograder.course.notebook import BEGIN
from autograder.proof import classroom, report

LABS = report.graded_labs(report.REPO / "solutions")
LOOP_BUDGET = {"PAGED_KV_CELL_TIMEOUT": "5", "PAGED_KV_NOTEBOOK_TIMEOUT": "60"}
HALVES = 2
# What the instructor's log must show over the whole class (each half checks the share its students bring).
LOGGED = {
    ("repair", "restored-test"),
    ("repair", "invalid-json"),
    ("run", "timeout"),
    ("run", "kernel-died"),
    ("run", "integrity"),
    ("run", "memory"),
}


# One attack of each class goes through the Gradescope harness too, dealt out over the labs (``platform_picks``).
ATTACK_CLASSES = (
    (
        "the graders' checks replaced",
        lambda s: s.kind == "attack" and s.label.startswith("replaces the graders' checks"),
    ),
    ("a syntax family of delegation", lambda s: s.kind == "attack" and s.label.startswith(SYNTAX_FAMILIES)),
    ("a route to the reference", lambda s: s.kind == "attack" and s.label.startswith(REFERENCE_ROUTES)),
    ("a leak", lambda s: s.kind == "leak"),
    ("live markup in its feedback", lambda s: s.kind == "xss"),
    ("a harm attack", lambda s: s.kind == "harm"),
    ("a hostile submission", lambda s: s.kind == "hostile"),
    ("a broken submission", lambda s: s.kind == "broken"),
)


def labs_of(half: int) -> List[str]:
    return [lab for index, lab in enumerate(LABS) if index % HALVES == half]


# The kernel lab (Triton's interpreter on a CPU) is the slowest to grade: it meets its own students and the
# attacks every lab meets, and the hostile and broken submissions, disguises and links go to the other labs.
DEALT_TO = [lab for lab in LABS if "triton" not in lab]


def _class(lab: str, root: Path) -> list:
    info = classroom.load_lab(lab, root / "solutions", root / "course")
    share = (DEALT_TO.index(lab), len(DEALT_TO)) if lab in DEALT_TO else None
    return report.shared_class(info, root, LABS.index(lab), len(LABS), share=share, dealt=share is not None)


def _gradable(students) -> list:
    return [s for s in students if not s.link and not s.loops]


@functools.lru_cache(maxsize=None)
def _attack_class_of() -> dict:
    """``{lab: attack class}`` such that every class is graded in some lab: each lab tries the classes its own
    class of students has from its place in ``ATTACK_CLASSES`` on (one not yet taken first), and takes the first
    that still lets the later labs take the classes left (a search: 8 labs, 8 classes). Fewer labs than classes,
    or no such deal: an AssertionError. The kernel lab takes
    no harm attack: in Triton's interpreter a harm runs to its limits, the slowest upload of all to grade."""
    options = []
    for index, lab in enumerate(LABS):
        students = _gradable(_class(lab, report.REPO))
        order = [ATTACK_CLASSES[(index + step) % len(ATTACK_CLASSES)] for step in range(len(ATTACK_CLASSES))]
        options.append(
            [
                name
                for name, matches in order
                if any(matches(s) for s in students) and (lab in DEALT_TO or name != "a harm attack")
            ]
        )

    def deal(at: int, taken: frozenset):
        if at == len(LABS):
            return [] if len(taken) == len(ATTACK_CLASSES) else None
        spare = (len(LABS) - at) - (len(ATTACK_CLASSES) - len(taken))  # labs left that may repeat a class
        for name in sorted(options[at], key=lambda n: n in taken):  # a class not yet taken first
            rest = deal(at + 1, taken | {name}) if name not in taken or spare > 0 else None
            if rest is not None:
                return [name] + rest
        return None

    plan = deal(0, frozenset())
    if plan is None:
        raise AssertionError(f"no lab-by-lab deal grades every attack class on the platforms: {options}")
    return dict(zip(LABS, plan))


def platform_picks(lab: str, students) -> list:
    """The students of ``lab`` the platform harness grades again: its first catalogued bug and one attack of the
    class ``_attack_class_of`` deals to it, each with what it is."""
    gradable = _gradable(students)
    name = _attack_class_of()[lab]
    matches = dict(ATTACK_CLASSES)[name]
    return [
        ("a catalogued bug", next(s for s in gradable if s.kind == "bug")),
        (name, next(s for s in gradable if matches(s))),
    ]


def _expected_log(students) -> set:
    """The (stage, kind) rows of ``LOGGED`` that these students' expectations promise."""
    promised = set()
    for student in students:
        promised |= {("repair", k) for k in student.expect.repairs} | {("run", k) for k in student.expect.events}
    return promised & LOGGED


def _work(result) -> Path:
    return Path(result.summary["work"])


def define_tests(namespace: dict, half: int) -> None:
    """The fixture and the tests of one half of the labs, put into the test file's ``namespace``."""
    labs = labs_of(half)
    params = [
        pytest.param(lab, student.label, id=f"{lab}-{student.kind}-{student.label}")
        for lab in labs
        for student in _class(lab, report.REPO)
    ]

    @pytest.fixture(scope="module")
    def graded(tmp_path_factory):
        results = {}
        for lab in labs:
            root = report.prepare_root(tmp_path_factory.mktemp(lab))
            results[lab] = report.run_lab(
                lab, root, dict(os.environ), students=_class(lab, root), loop_budget=LOOP_BUDGET
            )
        print("\n" + report.print_report(list(results.values())))
        return results

    @pytest.mark.parametrize("lab, label", params)
    def test_student_is_graded_as_described(graded, lab, label):
        result = graded[lab]
        student = next(s for s in result.students if s.label == label)
        assert result.problems[student.sid] == [], f"{label}: {result.problems[student.sid]}"

    @pytest.mark.parametrize("lab", labs)
    def test_feedback_never_shows_hidden_tests(graded, lab):
        assert graded[lab].feedback_leaks == []

    @pytest.mark.parametrize("lab", labs)
    def test_every_student_is_in_the_grades_csv_and_graded_without_errors(graded, lab):
        result = graded[lab]
        assert all(row["ok"] for row in result.summary["students"]), result.output
        csv_path = _work(result) / "reports" / "grades.csv"
        with open(csv_path, newline="") as handle:
            rows = {r["student_id"] for r in csv.DictReader(handle) if r["assignment"] == lab}
        assert set(result.ids.values()) <= rows

    def test_the_instructor_log_lists_repairs_and_limits(graded):
        kinds = set()
        for lab in labs:
            with open(_work(graded[lab]) / "reports" / lab / "log.csv", newline="") as handle:
                kinds |= {(r["stage"], r["kind"]) for r in csv.DictReader(handle)}
        promised = _expected_log(s for lab in labs for s in graded[lab].students)
        assert promised <= kinds, sorted(promised - kinds)

    @pytest.mark.parametrize("lab", labs)
    def test_the_red_team_covers_every_attack_class(graded, lab):
        """Every lab meets the replaced checks, one attack that takes its turn (``report.TAKING_TURNS``: over the
        labs every member is met) and one on a catalogued bug, and the student who puts live markup in its feedback
        (every student's feedback is scanned: ``report.run_lab``); a lab that meets a harm attack grades one honest
        bystander beside the first of them; at most one leak (each is dealt to one lab)."""
        kinds = {}
        for student in graded[lab].students:
            kinds.setdefault(student.kind, []).append(student.label)
        assert len(kinds.get("leak", [])) <= 1 and len(kinds.get("bystander", [])) == (1 if kinds.get("harm") else 0)
        assert len(kinds.get("xss", [])) == 1, f"{lab}: no student puts live markup in its feedback"
        beside = [s.kind for s in graded[lab].students if s.beside]
        assert beside[:2] == (["harm", "bystander"] if kinds.get("harm") else []), beside
        attacks = " | ".join(kinds.get("attack", []))
        assert "graders' checks" in attacks, f"{lab}: no attack replaces the graders' checks"
        assert "(a catalogued bug)" in attacks or "triton" in lab, f"{lab}: no attack on a catalogued bug"
        members = tuple(member for group in report.TAKING_TURNS for member in group)
        assert any(label.startswith(members) for label in kinds["attack"]), f"{lab}: no attack takes its turn"
        if "triton" in lab:  # the kernel lab: its launchers in the student's kernel are replaced too (#25), and
            # kernels the GPU compiler and the interpreter read differently are submitted (#35)
            for must in (LAUNCHERS_REPLACED, INTERPRETER_ONLY, CONSTEXPR_VARIES, DOCSTRING_DEF):
                assert must in attacks, f"{lab}: no attack '{must}'"

    @pytest.mark.parametrize("lab", labs)
    def test_an_attack_shows_in_the_instructors_log(graded, lab):
        """Every attacker is in the log: by what its text does (provenance, with the line), by the stub its code
        reached in the box (a route to the reference the text rules need not know), or, in the kernel lab, by a
        kernel that is not all Triton or a launch whose own specialisation does not build (#35)."""
        with open(_work(graded[lab]) / "reports" / lab / "log.csv", newline="") as handle:
            rows = [
                r
                for r in csv.DictReader(handle)
                if r["kind"] in ("integrity", "reached-stub", "not-triton", "launch-not-built")
            ]
        attackers = {graded[lab].ids[s.sid] for s in graded[lab].students if s.kind == "attack"}
        assert attackers <= {r["student_id"] for r in rows}
        assert all("line" in r["detail"] for r in rows if r["kind"] == "integrity")

    @pytest.mark.parametrize("lab", labs)
    def test_the_insight_report_shows_what_the_class_got_wrong(graded, lab):
        """``make grade`` ends by writing reports/LAB/insight.{html,json}: totals equal grades.csv, each cell's pass
        rate equals the gradebook's, every catalogued bug shows under a hint (not a bare failure) of each hidden
        cell it loses, each hint's count is its students', every attacker is listed, and the page is inert."""
        result = graded[lab]
        folder = _work(result) / "reports" / lab
        data = json.loads((folder / "insight.json").read_text())
        with open(_work(result) / "reports" / "grades.csv", newline="") as handle:
            totals = {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle) if r["assignment"] == lab}
        assert {s: data["scores"]["totals"][s] for s in totals} == pytest.approx(totals)
        by_id = {result.ids[s.sid]: result.scores.get(s.sid, {}) for s in result.students}
        for cell in data["cells"]:
            got = [scores.get(cell["grade_id"], 0.0) for scores in by_id.values() if scores]
            full = sum(1 for v in got if v >= cell["points"] - 1e-9)
            assert (cell["full"], cell["students"]) == (full, len(got)), cell["grade_id"]
        rows = data["misconceptions"]
        assert all(row["count"] == len(row["students"]) for row in rows)
        for student in (s for s in result.students if s.kind == "bug"):
            sid = result.ids[student.sid]
            for grade_id in (g for g in student.expect.zero if "hidden" in g):
                shown = [r for r in rows if grade_id in r["cells"] and sid in r["students"]]
                assert shown and "no message" not in shown[0]["hint"], (student.label, grade_id, shown)
        assert data["health"]["phases"].get("notebook cells", 0) > 0, "each student's time by phase is recorded"
        flagged = {who for kinds in data["flagged"]["findings"].values() for who in kinds}
        assert {result.ids[s.sid] for s in result.students if s.kind == "attack"} <= flagged
        text = (folder / "insight.html").read_text()
        assert not re.search(r"<script|\son[a-z]+\s*=|javascript:", text, re.IGNORECASE)
        assert text.count('src="data:image/png;base64,') == 2 and (folder / "insight_pass_rates.png").exists()

    def test_the_insight_report_opens_in_chromium_with_its_plots(graded, tmp_path):
        """The first lab's report in a real browser: both plots decode, nothing runs, a screenshot for people."""
        from chromium import LAUNCH_ARGS, chromium_or_reason

        path, reason = chromium_or_reason(tmp_path / "apt.log")
        if path is None:
            pytest.skip(reason)
        from playwright import sync_api

        lab = labs[0]
        page_path = _work(graded[lab]) / "reports" / lab / "insight.html"
        artifacts = report.REPO / "test-artifacts" / "insight"
        artifacts.mkdir(parents=True, exist_ok=True)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=path, args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                errors: List[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(page_path.as_uri())
                sizes = page.evaluate("[...document.images].map(i => [i.complete, i.naturalWidth])")
                page.screenshot(path=str(artifacts / f"{lab}.png"), full_page=True)
                title = page.title()
            finally:
                browser.close()
        assert len(sizes) == 2 and all(done and width > 100 for done, width in sizes), sizes
        assert errors == [] and lab in title

    @pytest.mark.skipif(bool(platform_harness.mount_problem()), reason=platform_harness.mount_problem() or "ok")
    @pytest.mark.parametrize("lab", labs)
    def test_gradescope_and_prairielearn_grade_as_make_grade(graded, lab, tmp_path):
        """Issue 28's harness on this lab: the zip of ``make gradescope`` (setup.sh run once, run_autograder per
        upload at /autograder) grades one attack (``platform_picks``: every attack class in some lab), and in the
        half's first lab a catalogued bug, on Gradescope and on PrairieLearn's entrypoint (at /grade) (both
        platforms share ``one_upload``; more
        PrairieLearn runs would cost make test minutes, not find more), each uploaded as the student's notebook:
        every cell's score equals what ``make grade`` gave the same notebook in this class; results valid against
        the platforms' schemas; no hidden test or grader code in results or stdout. The seconds each upload took
        are printed beside make grade's (a report, not a goal: ``make bench-platforms`` measures it)."""
        import jsonschema

        result = graded[lab]
        info = classroom.load_lab(lab, report.REPO / "solutions", report.REPO / "course")
        secret = report.secret_lines(info) + [BEGIN.removeprefix("### ")]
        image = platform_harness.gradescope_image(lab, tmp_path / "gradescope")
        question = platform_harness.build_question(lab, tmp_path / "prairielearn") if lab == labs[0] else None
        seconds = {row["student"]: row["seconds"] for row in result.summary["students"]}
        lines = []
        for what, student in platform_picks(lab, result.students):
            if student.kind == "bug" and question is None:
                continue  # the catalogued bug: in the half's first lab only, on both platforms (make test's time)
            upload = platform_harness.write_upload(
                tmp_path / "uploads" / student.sid, {student.file_name: student.content}
            )
            expected = result.scores[student.sid]
            runs = {"Gradescope": platform_harness.run_gradescope(image, upload, tmp_path / "gs")}
            if student.kind == "bug" and question is not None:
                runs["PrairieLearn"] = platform_harness.run_prairielearn(
                    question, upload, tmp_path / "pl", hidden_visibility="visible"
                )
            cells = list(runs["Gradescope"].scores())  # PrairieLearn's tests come in the same order, untagged
            # (with hidden tests visible, as here; by default they are one line: test_platforms checks it)
            for platform, run in runs.items():
                jsonschema.validate(run.results, platform_harness.SCHEMAS[platform.lower()])
                got = (
                    run.scores()
                    if platform == "Gradescope"
                    else dict(zip(cells, (float(t["points"]) for t in run.results["tests"]), strict=True))
                )
                assert got == pytest.approx(expected), f"{platform}, {what} ({student.label}): {got} != {expected}"
                assert platform_harness.leaked(run, secret) == [], f"{platform}, {what}: hidden text in its results"
                lines.append(
                    f"{lab} {platform:12} {what:28} {run.seconds:6.1f} s "
                    f"(make grade: {seconds.get(result.ids[student.sid], 0):.1f} s)"
                )
        print("\n" + "\n".join(lines))

    tests = [
        graded,
        test_student_is_graded_as_described,
        test_feedback_never_shows_hidden_tests,
        test_every_student_is_in_the_grades_csv_and_graded_without_errors,
        test_the_instructor_log_lists_repairs_and_limits,
        test_the_red_team_covers_every_attack_class,
        test_an_attack_shows_in_the_instructors_log,
        test_the_insight_report_shows_what_the_class_got_wrong,
        test_gradescope_and_prairielearn_grade_as_make_grade,
    ]
    if half == 0:
        tests += [
            test_the_insight_report_opens_in_chromium_with_its_plots,
            test_every_student_of_the_full_class_is_graded_in_some_lab,
            test_every_lab_grades_its_translated_solution_and_every_other_lab_a_translated_bug,
            test_the_platform_picks_deal_every_attack_class_to_some_lab,
            test_the_whole_class_promises_every_kind_of_log_row,
        ]
    namespace.update({getattr(t, "__name__", "graded"): t for t in tests})
    namespace["graded"] = graded


def test_every_student_of_the_full_class_is_graded_in_some_lab():
    """The students dealt out: each hostile or broken one in exactly one lab; each disguise, leak and harm
    attack, and each attack that takes turns (``report.TAKING_TURNS``), in some lab. A lab's class holds the first
    ``report.CLASS_BUGS`` bugs and ``report.CLASS_VARIANTS`` variants of its catalogue: test_graders.py grades every
    one with the lab's checks, make grader-report through the whole pipeline."""
    dealt, full, info_of = {}, {}, {}
    for lab in LABS:
        info = info_of[lab] = classroom.load_lab(lab, report.REPO / "solutions", report.REPO / "course")
        for student in classroom.build_class(info, report.REPO):
            full.setdefault((student.kind, student.label), set()).add(lab)
        for student in _class(lab, report.REPO):
            assert lab in full[(student.kind, student.label)]
            dealt.setdefault((student.kind, student.label), []).append(lab)
    for (kind, label), labs in full.items():
        if kind == "bystander":  # one honest bystander per lab is enough (the red-team test checks it)
            continue
        if kind in ("bug", "variant"):  # each lab's first ones (report.CLASS_BUGS, CLASS_VARIANTS)
            mine = [s for s in classroom.build_class(info_of[next(iter(labs))], report.REPO) if s.kind == kind]
            first = mine[: report.CLASS_BUGS if kind == "bug" else report.CLASS_VARIANTS]
            assert (label in {s.label for s in first}) is bool(dealt.get((kind, label))), (kind, label, labs)
            continue
        if kind == "translated" and "bug" in label:  # a translated release's bug: every other lab (shared_class)
            continue
        if kind in ("hostile", "broken"):
            assert len(dealt.get((kind, label), [])) == 1, f"{label}: graded in {dealt.get((kind, label))}"
        else:
            assert dealt.get((kind, label)), f"{kind} '{label}' is graded in no lab"


def test_every_lab_grades_its_translated_solution_and_every_other_lab_a_translated_bug():
    """Issue 49: the class of every lab has a student of each translated release with the solution's answers; every
    other lab one with a catalogued bug (both graded as their English twins, in their language)."""
    from autograder.course.languages import TRANSLATIONS

    with_bug = 0
    for lab in LABS:
        translated = [s for s in _class(lab, report.REPO) if s.kind == "translated"]
        assert {s.expect.language for s in translated} == set(TRANSLATIONS), lab
        assert [s for s in translated if s.label.startswith("the solution")], lab
        with_bug += any("bug" in s.label for s in translated)
    assert with_bug == (len(LABS) + 1) // 2


def test_the_platform_picks_deal_every_attack_class_to_some_lab():
    """The plan of ``platform_picks``: over the labs, every class of ``ATTACK_CLASSES`` is picked for the
    Gradescope harness (``test_gradescope_and_prairielearn_grade_as_make_grade`` grades the picks)."""
    dealt = {what for lab in LABS for what, _ in platform_picks(lab, _class(lab, report.REPO))}
    assert {name for name, _ in ATTACK_CLASSES} <= dealt, sorted({n for n, _ in ATTACK_CLASSES} - dealt)


def test_the_whole_class_promises_every_kind_of_log_row():
    """Over both halves the students' expectations cover every kind of row the instructor's log must show
    (each half then checks its share against its own log)."""
    assert _expected_log(s for lab in LABS for s in _class(lab, report.REPO)) == LOGGED
