"""A simulated class for any lab: the students an instructor meets, built from the lab's own notebooks.

``build_class(lab)`` returns submissions made from ``solutions/<lab>`` and its release, with what each
must get: the solution (full marks), the untouched release (zero), the solution and a catalogued bug in each
translated release (``course/<language>/``: as their English twins, graded in their language), the bug
catalogue's bugs and correct variants (each lab's ``autograder/labs/<lab>/tests/bugs.py``, where an entry's source can be put in the answer cell),
delegation to the reference, and every broken or hostile submission the grading pipeline must survive.
Nothing here knows a lab by name: a new lab gets the whole class from its notebooks.

``write_export`` lays the class out as an LMS export (Canvas files, Moodle folders, zips, plain
folders) for ``autograder.collect.collect``. ``check_outcome`` compares a graded student with the expectation.
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set

import nbformat

from autograder.course.languages import TRANSLATIONS
from autograder.course.notebook import cell_text, nbgrader

# A lab read and its answer edited (``lab_notebooks``), named here too: the class and its tests read them as classroom's.
from autograder.proof.lab_notebooks import (  # noqa: F401
    Lab,
    load_lab,
    in_language,
    inject,
    inject_into_function,
    todo_functions,
    delegations,
    _with_answer,
    _class_answer,
    _call_args,
    _starter_reference,
)

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")  # nbgrader's: a student's answer has neither


@dataclass
class Expect:
    """What a graded student must show. ``total``: exact score; ``zero``/``full``: grade ids at 0 / max;
    ``repairs``/``events``: kinds that must appear in the instructor's log; ``output``: text that must
    appear in the graded notebook (``None`` entries are skipped when the box is weaker than bwrap)."""

    total: Optional[float] = None
    below: Optional[float] = None  # the total must be less than this (a lab of several TODOs)
    zero: Set[str] = field(default_factory=set)
    full: Set[str] = field(default_factory=set)
    repairs: Set[str] = field(default_factory=set)
    events: Set[str] = field(default_factory=set)
    output: List[str] = field(default_factory=list)
    boxed_output: List[str] = field(default_factory=list)
    language: Optional[str] = None  # the language grading must have read the notebook in (its record's)


@dataclass
class Student:
    sid: str
    kind: str  # solution, untouched, bug, variant, translated, delegation, hostile, broken, attack, leak, xss, harm,
    # bystander, link
    label: str
    file_name: str
    content: bytes
    expect: Expect
    loops: bool = False  # spends its whole time budget: worth grading with short budgets in tests
    beside: bool = False  # graded in one run with the harm attacks (the hogs and their bystanders)
    # Graded with provenance findings costing no points: what it earns is decided by construction (the box
    # holds no implementation of the lab's TODOs), whatever the text rules say.
    findings_free: bool = False
    link: Optional[str] = None  # exported as a symbolic link: to this path, or "student:<kind>" (see write_export)


# ---- the class ---------------------------------------------------------------------------------------
def build_class(lab: Lab, course_root: Path, memory_mb: int = 4096) -> List[Student]:
    """Every kind of student for ``lab`` (see the module doc), each with its expectation."""
    cells = lab.grade_cells
    total = sum(cells.values())
    all_ids = set(cells)
    students: List[Student] = []
    answers = sum(1 for c in lab.source["cells"] if nbgrader(c).get("solution"))
    single = answers == 1 and len(todo_functions(lab)) == 1
    first = next(iter(todo_functions(lab).values()))
    # Code put in a @triton.jit kernel is not run as Python (the kernel is compiled or interpreted), so
    # exit calls there fail the kernel instead of exiting: only the lost points are expected.
    kernel = any("jit" in ast.unparse(d) for d in first.decorator_list)

    def python_only(events):
        return set() if kernel else events

    def ruined(**kwargs) -> Expect:
        """A submission that breaks the first TODO: zero everywhere when it is the lab's only TODO,
        fewer points than full marks when the lab has others (their tests still earn)."""
        return Expect(total=0.0, zero=all_ids, **kwargs) if single else Expect(below=total, **kwargs)

    def add(
        kind: str,
        label: str,
        nb,
        expect: Expect,
        file_name: Optional[str] = None,
        raw: Optional[bytes] = None,
        beside: bool = False,
        link: Optional[str] = None,
    ) -> None:
        sid = f"{kind}-{len(students):02d}"
        content = raw if raw is not None else json.dumps(nb, indent=1).encode()
        students.append(
            Student(
                sid,
                kind,
                label,
                file_name or lab.notebook,
                content,
                expect,
                loops="endless loop" in label,
                beside=beside,
                link=link,
                findings_free=kind == "delegation" or (kind == "attack" and "(untouched code)" in label),
            )
        )

    add("solution", "the solution", lab.source, Expect(total=total, full=all_ids))
    add("untouched", "the untouched release", lab.release, Expect(total=0.0, zero=all_ids))
    catalogue = catalogue_students(lab)
    for label, nb, failing in catalogue:
        if failing is None:
            add("variant", label, nb, Expect(total=total, full=all_ids))
        else:
            hidden = all_ids - lab.visible
            add("bug", label, nb, Expect(zero=failing, full=hidden - failing))
    # Students of a translated release: graded as their English twins, in their language, their prose kept.
    for language in (t for t in TRANSLATIONS if t in lab.translated):
        kept = [f"course/{language}/{lab.name}/"]  # the Colab badge of the translated notebook's title cell
        add(
            "translated",
            f"the solution, in {language}",
            in_language(lab, lab.source, language),
            Expect(total=total, full=all_ids, language=language, output=kept),
        )
        bug = next(((label, nb, failing) for label, nb, failing in catalogue if failing), None)
        if bug is not None:
            add(
                "translated",
                f"a catalogued bug, in {language}: {bug[0]}",
                in_language(lab, bug[1], language),
                Expect(zero=bug[2], full=all_ids - lab.visible - bug[2], language=language, output=kept),
            )
    for label, code in delegations(lab).items():
        add("delegation", label, _with_answer(lab, inject(code)), ruined())
    # Broken and hostile submissions.
    add(
        "hostile",
        "returns an object equal to everything",
        _with_answer(
            lab,
            inject(
                "class _Agree:\n    __eq__ = lambda self, other: True\n    __ne__ = lambda self, other: False\n"
                "    __hash__ = object.__hash__\n    __len__ = lambda self: 0\n    __getitem__ = lambda self, key: self\n"
                "return _Agree()"
            ),
        ),
        ruined(),
    )
    add(
        "hostile",
        "raises SystemExit in the TODO",
        _with_answer(lab, inject("raise SystemExit(1)")),
        ruined(events=python_only({"exit-called"})),
    )
    # A segmentation fault needs no import the provenance checks refuse (numpy's as_strided reads far away).
    crash = "import numpy as np\nnp.lib.stride_tricks.as_strided(np.zeros(1), shape=(2,), strides=(2**44,)).sum()"
    add(
        "hostile",
        "crashes the kernel whenever the TODO runs",
        _with_answer(lab, inject(crash)),
        ruined(events=python_only({"kernel-died"})),
    )
    add(
        "hostile",
        "crashes its kernel before the answer",
        _insert(lab.source, lab.answer_index, nbformat.v4.new_code_cell(crash)),
        Expect(total=total, full=all_ids, events={"kernel-died"}),
    )
    add(
        "hostile",
        "endless loop in the TODO",
        _with_answer(lab, inject("while True:\n    pass")),
        ruined(events={"timeout"}, output=["Time limit"]),
    )
    # Inside a @triton.jit kernel a try statement does not compile (the GPU-build check fails first, and
    # nothing loops): there the loop goes into the answer cell's Python helper, which the tests call.
    stubborn = (
        "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
    )
    helper = next((n for n, f in todo_functions(lab).items() if not f.decorator_list), None) if kernel else None
    add(
        "hostile",
        "endless loop that ignores interrupts",
        _with_answer(lab, inject_into_function(helper, stubborn) if helper else inject(stubborn)),
        ruined(events={"timeout"}),
    )
    add(
        "hostile",
        "asks for more memory than the limit",
        _with_answer(lab, inject(f"_hog = bytearray({2 * memory_mb} * 1024 * 1024)")),
        ruined(events={"memory"}),
    )
    probe = nbformat.v4.new_code_cell(
        textwrap.dedent(f"""\
        import os, socket, glob
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=3).close(); print("network: open")
        except OSError:
            print("network: blocked")
        repo = os.path.dirname(os.path.dirname(__import__("paged_kv").__file__))
        seen = [p for root in (repo, {str(course_root)!r}) for p in glob.glob(root + "/solutions/*/*.ipynb")]
        print("solutions seen:", len(seen))
        try:
            open(os.path.join(repo, "paged_kv", "x.txt"), "w"); print("repo: writable")
        except OSError:
            print("repo: read-only")""")
    )
    # Its imports are refused (so every test below scores 0); what it can reach is still the box's.
    add(
        "hostile",
        "reaches for the network, the solutions and the repository",
        _insert(lab.source, lab.answer_index + 1, probe),
        Expect(
            total=0.0,
            zero=all_ids,
            events={"integrity"},
            boxed_output=["network: blocked", "solutions seen: 0", "repo: read-only"],
        ),
    )
    for kind, label, nb, expect, beside, *link in attack_students(lab):
        add(kind, label, nb, expect, beside=beside, link=link[0] if link else None)
    nb = copy.deepcopy(lab.source)
    nb["cells"] = [c for c in nb["cells"] if not nbgrader(c).get("grade")]
    add("broken", "deleted every test cell", nb, Expect(total=total, full=all_ids, repairs={"restored-test"}))
    nb = copy.deepcopy(lab.source)
    for cell in nb["cells"]:
        if nbgrader(cell).get("grade"):
            cell["source"] = "print('all tests passed')"
    add("broken", "edited every test cell", nb, Expect(total=total, full=all_ids, repairs={"edited-test"}))
    nb = copy.deepcopy(lab.source)
    nb["cells"].reverse()
    add("broken", "cells in reverse order", nb, Expect(total=total, full=all_ids, repairs={"reordered"}))
    required = todo_names(lab)
    renamed = _with_answer(lab, lambda s: s.replace(f" {required}(", f" my_{required}(", 1))
    add("broken", "renamed the TODO", renamed, ruined(repairs={"renamed-todo"}))
    add(
        "broken",
        "saved by Colab as 'Copy of …' (no ids, no nbgrader metadata)",
        _colab(lab.source),
        Expect(total=total, full=all_ids, repairs={"saved-by", "metadata", "file-name"}),
        file_name=f"Copy of {lab.notebook}",
    )
    newer = copy.deepcopy(lab.source)
    newer["nbformat_minor"] = 99
    newer["metadata"]["jupyterlab_future"] = {"theme": "dark"}
    for cell in newer["cells"]:
        cell["metadata"]["collapsed_future"] = True
    add(
        "broken",
        "saved by a newer JupyterLab (format 4.99, new metadata)",
        newer,
        Expect(total=total, full=all_ids, repairs={"format-minor"}),
    )
    add(
        "broken",
        "renamed file",
        lab.source,
        Expect(total=total, full=all_ids, repairs={"file-name"}),
        file_name="my lab final v2.ipynb",
    )
    text = json.dumps(lab.source)
    add(
        "broken",
        "not valid JSON (cut short)",
        None,
        Expect(total=0.0, zero=all_ids, repairs={"invalid-json"}),
        raw=text[: len(text) // 2].encode(),
    )
    return students


def todo_names(lab: Lab) -> str:
    """The name the tests call: the answer cell's class, else its first function."""
    klass = _class_answer(lab)
    if klass is not None:
        return klass.name
    return next(iter(todo_functions(lab)))


def _insert(nb: dict, index: int, cell) -> dict:
    nb = copy.deepcopy(nb)
    made = dict(cell)
    made["id"] = f"added-{index}"
    nb["cells"].insert(index, made)
    return nb


def _colab(nb: dict) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        cell.pop("id", None)
        cell["metadata"] = {"id": f"colab{abs(hash(cell_text(cell))) % 10**8}"}
    nb["metadata"] = {"colab": {"provenance": []}, "kernelspec": {"name": "python3", "display_name": "Python 3"}}
    nb["nbformat_minor"] = 0
    return nb


# ---- the red team ------------------------------------------------------------------------------------
def attack_students(lab: Lab):
    """The red team's students for ``lab`` (``autograder/tests/attacks.py``), one catalogued bug among them."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    try:
        import attacks
    except ImportError:
        return []
    bug = next((nb for _, nb, failing in catalogue_students(lab) if failing), None)
    return attacks.attack_students(lab, bug)


# ---- the bug catalogue as notebooks ---------------------------------------------------------------
def catalogue_students(lab: Lab):
    """``(label, notebook, failing hidden grade ids or None for a variant)`` for each catalogue entry
    whose source can replace the answer cell's TODO, and for each of the lab's notebook edits
    (``autograder/tests/notebook_edits.py``)."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    try:
        import notebook_edits
        import test_graders
    except ImportError:
        return []

    def failing_cells(failed_checks):
        return {g for g in lab.grade_cells if lab.hidden_check(g) in failed_checks}

    out = []
    entry = next((v for v in test_graders.LABS.values() if v[1] == lab.name), None)
    if entry is not None:
        module, _, _, bugs, variants = entry[:5]
        for implementation, is_bug in [(b, True) for b in bugs] + [(v, False) for v in variants]:
            nb = _catalogue_notebook(lab, implementation)
            if nb is None:
                continue
            failing = failing_cells(set(test_graders.failures(module, implementation))) if is_bug else None
            out.append((getattr(implementation, "__name__", "entry"), nb, failing))
    for label, (old, new, failed_checks) in notebook_edits.NOTEBOOK_EDITS.get(lab.name, {}).items():
        failing = None if failed_checks is None else failing_cells(failed_checks)
        out.append((f"edit: {label}", _with_text_edit(lab, old, new), failing))
    return out


def _with_text_edit(lab: Lab, old: str, new: str) -> dict:
    """The solution notebook with ``old`` replaced by ``new`` in the one answer cell that holds it once."""
    nb = copy.deepcopy(lab.source)
    cells = [c for c in nb["cells"] if nbgrader(c).get("solution") and cell_text(c).count(old) == 1]
    if len(cells) != 1:
        raise ValueError(f"{lab.name}: the edited text must be in exactly one answer cell, once: {old!r}")
    cells[0]["source"] = cell_text(cells[0]).replace(old, new)
    return nb


def _catalogue_notebook(lab: Lab, implementation) -> Optional[dict]:
    """The solution notebook with its TODO replaced by the catalogue entry's own source, or None."""
    functions = todo_functions(lab)
    if isinstance(implementation, type):
        written = {n: vars(implementation)[n] for n in functions if n in vars(implementation)}
    else:
        written = {next(iter(functions)): implementation}
    if not written or any(getattr(f, "__code__", None) is None or f.__code__.co_freevars for f in written.values()):
        return None  # nothing to write, or a closure: its source alone does not run
    # A class entry's own helper methods (``_admit`` beside ``schedule``) go into the class with them.
    extra = (
        {}
        if not isinstance(implementation, type)
        else {n: f for n, f in vars(implementation).items() if inspect.isfunction(f) and n not in functions}
    )
    try:
        sources = {name: inspect.getsource(f) for name, f in written.items()}
        extra_sources = [textwrap.dedent(inspect.getsource(f)) for f in extra.values()]
    except (OSError, TypeError):
        return None  # made at run time (e.g. an edit of the solution's text): no source file to copy
    helpers = _helpers(list(written.values()) + list(extra.values()))

    def edit(answer: str) -> str:
        tree = ast.parse(answer)
        lines = answer.splitlines()
        last = True  # nodes are visited from the bottom up: the first one met is the class's last TODO
        for node in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
            if isinstance(node, ast.FunctionDef) and node.name in sources:
                start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
                indent = lines[node.lineno - 1][: node.col_offset]
                body = textwrap.dedent(sources[node.name]).splitlines()
                body[0] = body[0].replace(f"def {body[0].split('def ')[1].split('(')[0]}(", f"def {node.name}(")
                if last:
                    for source in extra_sources:
                        body += [""] + source.splitlines()
                    last = False
                lines[start : node.end_lineno] = [indent + line if line else line for line in body]
        return "\n\n".join(helpers + ["\n".join(lines)])

    return _with_answer(lab, edit)


def _helpers(functions) -> List[str]:
    """Sources of the module-level functions the entries call from their own module (recursively),
    after the standard-library imports they use (``deque``), as a student's cell would have them."""
    seen: Dict[str, str] = {}
    imports: Dict[str, str] = {}
    todo = list(functions)
    while todo:
        function = todo.pop()
        for name in function.__code__.co_names:
            helper = function.__globals__.get(name)
            if (
                inspect.isfunction(helper)
                and helper.__module__ == function.__module__
                and name not in seen
                and not helper.__code__.co_freevars
            ):
                seen[name] = textwrap.dedent(inspect.getsource(helper))
                todo.append(helper)
            elif name not in imports and _stdlib_import(name, helper):
                imports[name] = _stdlib_import(name, helper)
    return list(imports.values()) + list(seen.values())


def _stdlib_import(name: str, value) -> Optional[str]:
    """``import ...`` that binds ``name`` to ``value`` when it comes from the standard library, else None."""
    if inspect.ismodule(value):
        module = value.__name__
        alias = "" if module == name else f" as {name}"
        return f"import {module}{alias}" if module.split(".")[0] in sys.stdlib_module_names else None
    module = getattr(value, "__module__", None)
    if (
        isinstance(module, str)
        and module.split(".")[0] in sys.stdlib_module_names
        and (inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value))
        and getattr(sys.modules.get(module), getattr(value, "__qualname__", ""), None) is value
    ):
        alias = "" if value.__qualname__ == name else f" as {name}"
        return f"from {module} import {value.__qualname__}{alias}"
    return None


# ---- as an LMS exports it ---------------------------------------------------------------------------
def write_export(students: List[Student], folder: Path) -> Dict[str, str]:
    """Lay the class out in every shape ``collect`` reads, mixed: Canvas file names, Moodle folders,
    a zip per student, a plain folder per student. Returns ``{student sid: id collect will give}``.

    A student with a ``link`` is a symbolic link, as ``unzip`` makes them: to an absolute path, their folder
    holds their notebook as a link to it; ``"student:<kind>"``, their entry is a link to the folder of the
    first student of that kind (laid out as a plain folder). A link whose target is missing is refused here:
    it would test nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = {}
    peers = {s.link.split(":", 1)[1] for s in students if s.link and s.link.startswith("student:")}
    targets = {kind: next((s for s in students if s.kind == kind and not s.link), None) for kind in peers}
    if None in targets.values():
        raise ValueError(f"the class has no student of the kinds links point at: {sorted(peers)}")
    for number, student in enumerate(students):
        shape = 3 if any(student is target for target in targets.values()) else number % 4
        if student.link:
            ids[student.sid] = student.sid
            _write_link(folder, student, targets)
            continue
        if shape == 0:
            ids[student.sid] = str(1000 + number)
            name = f"student{number}_{1000 + number}_{7000 + number}_{student.file_name}"
            (folder / name).write_bytes(student.content)
        elif shape == 1:
            ids[student.sid] = str(2000 + number)
            inside = folder / f"Student {number}_{2000 + number}_assignsubmission_file_"
            inside.mkdir()
            (inside / student.file_name).write_bytes(student.content)
        elif shape == 2:
            ids[student.sid] = student.sid
            with zipfile.ZipFile(folder / f"{student.sid}.zip", "w") as archive:
                archive.writestr(f"{student.sid}/{student.file_name}", student.content)
        else:
            ids[student.sid] = student.sid
            (folder / student.sid).mkdir()
            (folder / student.sid / student.file_name).write_bytes(student.content)
    return ids


def _write_link(folder: Path, student: Student, targets: Dict[str, Student]) -> None:
    if student.link.startswith("student:"):
        link, target = folder / student.sid, targets[student.link.split(":", 1)[1]].sid
    else:
        (folder / student.sid).mkdir()
        link, target = folder / student.sid / student.file_name, student.link
    link.symlink_to(target)
    if not link.exists():
        raise ValueError(f"{student.sid}'s link {link} -> {target} points at nothing")


# ---- checking --------------------------------------------------------------------------------------
def check_outcome(
    student: Student,
    scores: Dict[str, float],
    maxima: Dict[str, float],
    repairs: Set[str],
    events: Set[str],
    outputs: str,
    boxed: bool,
    language: Optional[str] = None,
) -> List[str]:
    """What differs from the expectation (an empty list when the student was graded as described); ``language``:
    the one grading read the notebook in (its record's)."""
    expect, problems = student.expect, []
    if expect.language is not None and language != expect.language:
        problems.append(f"graded in {language!r}, expected {expect.language!r}")
    total = sum(scores.values())
    if expect.total is not None and abs(total - expect.total) > 1e-9:
        problems.append(f"total {total}, expected {expect.total} ({scores})")
    if expect.below is not None and total >= expect.below:
        problems.append(f"total {total}, expected less than {expect.below} ({scores})")
    problems += [f"{g} scored {scores.get(g)}, expected 0" for g in sorted(expect.zero) if scores.get(g, 0) != 0]
    problems += [
        f"{g} scored {scores.get(g)}, expected {maxima[g]}" for g in sorted(expect.full) if scores.get(g) != maxima[g]
    ]
    problems += [f"repair '{k}' not logged (got {sorted(repairs)})" for k in sorted(expect.repairs - repairs)]
    problems += [f"event '{k}' not logged (got {sorted(events)})" for k in sorted(expect.events - events)]
    problems += [f"output lacks {text!r}" for text in expect.output if text not in outputs]
    if boxed:
        problems += [f"output lacks {text!r}" for text in expect.boxed_output if text not in outputs]
    return problems
