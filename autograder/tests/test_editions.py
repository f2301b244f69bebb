"""Editions of the package: the box that grades lab NN, and a class's handout for lab NN, hold no
implementation of lab NN's TODOs (or of any later lab's), whatever route reaches for one."""

from __future__ import annotations

import ast
import difflib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.editions import manifest
from autograder.editions.build import (
    LEFT_OUT,
    PACKAGE,
    REPO,
    EditionError,
    build_edition,
    edition_sources,
    editions_dir,
    stub_module,
)
from autograder.handout import handout
from autograder.course import handed_out, languages
from autograder.course.layout import discover_labs
from autograder.course.layout import graded_labs
from autograder.verdict.provenance import normalized_tokens

LABS = graded_labs(REPO / "solutions")
EDITIONS = [(lab, None) for lab in LABS] + [
    (entry.lab, part.name) for entry in manifest.LABS for part in entry.boxed_parts
]


def _cells(lab: str):
    nb = json.loads((REPO / "solutions" / lab / discover_labs(REPO / "solutions")[lab]).read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_every_graded_lab_is_in_the_manifest_with_each_graded_cell_in_exactly_one_part():
    assert [entry.lab for entry in manifest.LABS] == LABS
    for lab in LABS:
        graded = [
            c["metadata"]["nbgrader"]["grade_id"] for c in _cells(lab) if c["metadata"].get("nbgrader", {}).get("grade")
        ]
        listed = [cell for part in manifest.BY_LAB[lab].parts for cell in part.cells]
        assert sorted(listed) == sorted(graded), lab


def test_every_todo_an_answer_cell_writes_is_left_out_by_its_labs_edition():
    """The methods and functions of each graded answer cell (not the stretch goals) are the manifest's TODOs
    (lab 06's kernels are graded from their text: its edition leaves out the package's kernels instead)."""
    for lab in LABS:
        if lab.startswith("06-"):
            continue
        written = set()
        for cell in _cells(lab):
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("solution") and "stretch" not in meta.get("grade_id", ""):
                for node in ast.walk(ast.parse("".join(cell["source"]))):
                    if isinstance(node, ast.FunctionDef):
                        written.add(node.name)
        todos = {stub.name for stub in manifest.BY_LAB[lab].stubs}
        assert written <= todos, f"{lab}: {sorted(written - todos)} written in answer cells but not left out"


def _by_qualname(tree: ast.Module, qualname: str) -> ast.AST:
    scope, node = tree.body, None
    for name in qualname.split("."):
        node = next(n for n in scope if getattr(n, "name", None) == name)
        scope = node.body
    return node


@pytest.mark.parametrize("lab, part", EDITIONS, ids=lambda v: str(v))
def test_every_function_an_edition_leaves_out_is_a_stub_with_its_signature(lab, part):
    sources = edition_sources(lab, part)
    for stub in manifest.stubs_for(lab, part):
        node = _by_qualname(ast.parse(sources[stub.module].decode()), stub.qualname)
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.Raise), stub.dotted
        assert LEFT_OUT in ast.unparse(body[0])
        reference = _by_qualname(ast.parse((PACKAGE / stub.module).read_text()), stub.qualname)
        assert ast.dump(node.args) == ast.dump(reference.args), f"{stub.dotted}: the signature changed"


def _function_bodies(text: str):
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [
                s
                for s in node.body
                if not (
                    isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
                )
            ]
            if body:
                yield node.name, body


@pytest.mark.parametrize("lab", LABS)
def test_no_source_file_of_an_edition_holds_the_body_of_a_function_it_leaves_out(lab):
    """Not as it is (the same syntax tree), and not nearly (92% or more alike once names and constants are
    erased, the rule provenance reports pasted code by)."""
    left_out = {}
    for stub in manifest.stubs_for(lab):
        node = _by_qualname(ast.parse((PACKAGE / stub.module).read_text()), stub.qualname)
        module = ast.Module(body=next(body for _, body in _function_bodies(ast.unparse(node))), type_ignores=[])
        left_out[stub.dotted] = (ast.dump(module), normalized_tokens(module))
    found = []
    for path, data in edition_sources(lab).items():
        if not path.endswith(".py"):
            continue
        for name, body in _function_bodies(data.decode()):
            module = ast.Module(body=body, type_ignores=[])
            dump, tokens = ast.dump(module), normalized_tokens(module)
            for dotted, (ref_dump, ref_tokens) in left_out.items():
                if dump == ref_dump:
                    found.append(f"{path}:{name} is {dotted}'s body")
                elif len(tokens) >= 20:
                    matcher = difflib.SequenceMatcher(None, tokens, ref_tokens, autojunk=False)
                    if matcher.real_quick_ratio() >= 0.92 and matcher.quick_ratio() >= 0.92 and matcher.ratio() >= 0.92:
                        found.append(f"{path}:{name} is {matcher.ratio():.0%} like {dotted}")
    assert found == []


def _probe(folder: Path, names) -> list:
    done = subprocess.run(
        [sys.executable, "-m", "autograder.editions.probe", *names],
        cwd=folder.parent,
        env=dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]), MPLBACKEND="Agg", TRITON_INTERPRET="1"
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("lab, part", EDITIONS, ids=lambda v: str(v))
def test_every_route_to_what_an_edition_leaves_out_ends_at_its_stub(lab, part):
    """A getattr chain, functools.reduce(getattr), operator.attrgetter, pattern matching, a function's
    __globals__ to sys.modules, gc: each finds the stub, which raises TodoNotWritten saying so."""
    names = [stub.dotted for stub in manifest.stubs_for(lab, part)]
    assert _probe(build_edition(lab, part), names) == []


def test_the_same_routes_reach_real_implementations_in_the_whole_package():
    """The probe's routes are real: in the repository's package every one of them runs the implementation."""
    names = [stub.dotted for stub in manifest.stubs_for(LABS[0])]
    problems = _probe(build_edition(None), names)
    assert len(problems) == 6 * len(names)
    assert all("ran and" in p for p in problems)


def test_a_part_box_keeps_the_other_parts_and_leaves_out_its_own():
    for entry in manifest.LABS:
        for part in entry.boxed_parts:
            left_out = {s.dotted for s in manifest.stubs_for(entry.lab, part.name)}
            assert {s.dotted for s in part.stubs} <= left_out
            others = {s.dotted for p in entry.parts if p is not part for s in p.stubs}
            assert not others & left_out, f"{entry.lab}/{part.name} must keep the other parts' references"


def test_an_earlier_lab_leaves_out_everything_a_later_lab_does():
    """So a lab that runs top to bottom on its own edition runs on every later lab's edition (a class handout
    of lab NN holds the labs up to NN), and every part box leaves out a subset of its lab's main box."""
    for earlier, later in zip(LABS, LABS[1:]):
        assert set(manifest.stubs_for(later)) <= set(manifest.stubs_for(earlier))
    for lab, part in EDITIONS:
        assert set(manifest.stubs_for(lab, part)) <= set(manifest.stubs_for(lab))


_SERVE_WITH_OWN_CODE = """
import json, sys
from paged_kv.cache.todo import TodoNotWritten
from paged_kv.lab.baselines import serve_paged
from paged_kv.lab.feedback import show_when_ready
from paged_kv.lab.starters import KVCacheManagerWithoutDecode


class KVCacheManager(KVCacheManagerWithoutDecode):  # the student's lab 03 answer
    def allocate_for_decode(self, req):
        self._check_decode(req)
        if req.seq_len % self.block_size == 0:
            if not self.free_blocks:
                raise self._oom(req, 1, "a new block")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len += 1


namespace = {}
exec(sys.argv[1], namespace)  # the stretch's answer, as the notebook has it
workload = [(8, 40)] * 6  # the prompts fit at once; their outputs do not
try:
    usage = serve_paged(workload, KVCacheManager, 128, block_size=8)
    alone = f"served: {usage.preemptions} preemptions"
except TodoNotWritten as error:
    alone = f"TodoNotWritten: {error}"
note = show_when_ready(lambda: serve_paged(workload, KVCacheManager, 128, block_size=8), "allocate_for_decode")
own = serve_paged(workload, KVCacheManager, 128, block_size=8, decode_step=namespace["decode_step_with_preemption"])
print(json.dumps([alone, note is None, own.preemptions, own.finished]))
"""


def test_lab_03s_edition_holds_no_preemption_loop_and_serves_paged_with_the_students_own():
    """Lab 03's stretch asks for preemption by recompute: an edition up to lab 03 holds no loop of the package
    that does it (``paged_kv.lab.baselines.serve_paged`` then needs the student's, and says so), and the lab's
    comparison runs with the student's stretch passed as ``decode_step``."""
    lab = "03-decode-growth"
    stretch = next(
        "".join(c["source"])
        for c in _cells(lab)
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "lab03-stretch"
    )
    for earlier in LABS[: LABS.index(lab) + 1]:
        assert "paged_kv.lab.baselines.decode_step_with_preemption" in {s.dotted for s in manifest.stubs_for(earlier)}
    folder = build_edition(lab)
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_WITH_OWN_CODE, stretch],
        cwd=folder.parent,
        env=dict(os.environ, PYTHONPATH=str(folder), MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.strip().splitlines()
    alone, noted, preemptions, finished = json.loads(printed[-1])
    assert alone.startswith("TodoNotWritten") and "stretch" in alone, alone
    assert noted and any("paper_comparison(decode_step_with_preemption)" in line for line in printed), printed
    assert preemptions > 0 and finished == 6
    # The loop is not merely renamed: no loop of the edition's sources is the stretch's answer.
    answer = next(n for n in ast.walk(ast.parse(stretch)) if isinstance(n, ast.While))
    reference = normalized_tokens(ast.Module(body=[answer], type_ignores=[]))
    for path, data in edition_sources(lab).items():
        if path.endswith(".py"):
            for node in ast.walk(ast.parse(data.decode())):
                if isinstance(node, ast.While):
                    tokens = normalized_tokens(ast.Module(body=[node], type_ignores=[]))
                    share = difflib.SequenceMatcher(None, tokens, reference, autojunk=False).ratio()
                    assert share < 0.8, f"{path}, line {node.lineno}: {share:.0%} like the stretch's loop"


def test_a_stub_target_that_does_not_exist_is_refused():
    with pytest.raises(EditionError, match="is not defined"):
        stub_module("def f():\n    return 1\n", [("g", "gone")])
    with pytest.raises(EditionError, match="is a class"):
        stub_module("class A:\n    pass\n", [("A", "a class")])


def test_the_editions_folder_must_be_this_users_alone(tmp_path, monkeypatch):
    folder = tmp_path / "editions"
    folder.mkdir()
    os.chmod(folder, 0o777)
    monkeypatch.setenv("PAGED_KV_EDITIONS", str(folder))
    with pytest.raises(EditionError, match="nobody else may write"):
        editions_dir()
    os.chmod(folder, 0o755)
    assert editions_dir() == folder


def test_a_class_handout_carries_the_labs_up_to_its_lab_and_its_edition(tmp_path):
    lab = "05-prefix-cache"
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab)) as archive:
        names = archive.namelist()
        package = {
            n[len("paged-kv-course/paged_kv/") :]: archive.read(n)
            for n in names
            if n.startswith("paged-kv-course/paged_kv/")
        }
        readme = archive.read("paged-kv-course/README.md").decode()
    labs = {Path(n).parts[2] for n in names if n.startswith("paged-kv-course/course/") and n.endswith(".ipynb")}
    assert labs == {p.name for p in (REPO / "course").iterdir() if p.name[:2] <= "05"}
    assert package == edition_sources(lab)
    assert "lab 05-prefix-cache" in readme
    assert f"LAB: Optional[str] = {lab!r}" in package["cache/edition.py"].decode()


NEAR = 0.4  # of the lines of a practice function and a left-out body (both unparsed) this share or more match


def _near_answers(notebook: dict, lab: str) -> list:
    """``(practice function, left-out function, share of matching lines)`` for each function defined by a code
    cell of ``notebook`` that is not a TODO or a test and is close to the body of one of ``lab``'s left-out
    functions (its TODOs and their equivalents): an answer minus an edit or two."""
    references = {}
    for stub in manifest.BY_LAB[lab].stubs:
        node = _by_qualname(ast.parse((PACKAGE / stub.module).read_text()), stub.qualname)
        body = next(body for _, body in _function_bodies(ast.unparse(node)))
        references[stub.dotted] = ast.unparse(ast.Module(body=body, type_ignores=[])).splitlines()
    found = []
    for cell in notebook["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or meta.get("solution") or meta.get("grade"):
            continue
        try:
            bodies = list(_function_bodies("".join(cell["source"])))
        except SyntaxError:  # a cell of IPython magics
            continue
        for name, body in bodies:
            lines = ast.unparse(ast.Module(body=body, type_ignores=[])).splitlines()
            for dotted, reference in references.items():
                share = difflib.SequenceMatcher(None, lines, reference, autojunk=False).ratio()
                if len(lines) >= 3 and share >= NEAR:
                    found.append((name, dotted, round(share, 2)))
    return found


@pytest.mark.parametrize("lab", LABS)
def test_no_practice_cell_of_a_class_handout_is_an_open_todos_answer_minus_an_edit(tmp_path, lab):
    """The open lab's notebook in its class handout (``make handout LAB=NN``; the hub's release does the same):
    no function of a practice cell is within a few edits of one of the lab's answers (lab 05's bug hunts are
    left out until the lab is past due: ``autograder/handout/practice.py``)."""
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab)) as archive:
        notebook = json.loads(archive.read(f"paged-kv-course/course/{lab}/{discover_labs(REPO / 'course')[lab]}"))
    assert _near_answers(notebook, lab) == []


def test_the_bug_hunts_close_to_lab_05s_answers_are_in_self_study_and_past_due_copies_only(tmp_path):
    """The check above has teeth: the release itself (self-study, and the copy of lab 05 once it is past due)
    holds the bug hunts, which the check finds; the class's copy says where they went."""
    lab = "05-prefix-cache"
    notebook = json.loads((REPO / "course" / lab / discover_labs(REPO / "course")[lab]).read_text())
    assert {dotted.rsplit(".", 1)[1] for _, dotted, _ in _near_answers(notebook, lab)} >= {
        "_allocate_block",
        "allocate",
    }
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab)) as archive:
        text = archive.read(f"paged-kv-course/course/{lab}/prefix_cache.ipynb").decode()
    assert "class EveryBlockFromCache" not in text and "Left out of your class's copy" in text
    with zipfile.ZipFile(handout.build(tmp_path / "later.zip", lab="06-triton-paged-attention")) as archive:
        assert "class EveryBlockFromCache" in archive.read(f"paged-kv-course/course/{lab}/prefix_cache.ipynb").decode()


def test_the_exchange_releases_the_open_lab_without_its_practice_close_to_the_answers(tmp_path):
    """``make hub-release LAB=05-...`` (the exchange's ``release --open-lab``) rewrites the released notebook of the
    open lab as the class handout has it, keeping its file mode; an open lab that is not released is refused."""
    from autograder.exchange import exchange

    released = tmp_path / "outbound" / "05-prefix-cache" / "prefix_cache.ipynb"
    released.parent.mkdir(parents=True)
    released.write_bytes((REPO / "course" / "05-prefix-cache" / "prefix_cache.ipynb").read_bytes())
    os.chmod(released, 0o644)
    exchange.leave_out_near_answers(released)
    assert _near_answers(json.loads(released.read_text()), "05-prefix-cache") == []
    assert "Left out of your class's copy" in released.read_text() and (released.stat().st_mode & 0o777) == 0o644
    with pytest.raises(ValueError, match="open lab"):
        exchange.release(["01-capacity-ledger"], tmp_path / "exchange", "course", open_lab="05-prefix-cache")


def test_no_route_of_a_class_handout_installs_the_public_package(tmp_path):
    """``make handout LAB=05-...``: no notebook's setup cell installs the public package (every lab's reference),
    neither from GitHub nor from the ModelScope mirror; on Colab and on ModelScope they install
    ``colab/paged-kv-class-edition.zip``, which pip installs as lab 05's edition (its TODOs are stubs); the
    self-study handout keeps the public one-click routes."""
    import subprocess

    from autograder.handout import colab_class
    from tools.sync_colab import COLAB_TEST, MODELSCOPE_MARK

    lab = "05-prefix-cache"
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip", lab=lab)) as archive:
        texts = {n: archive.read(n).decode() for n in archive.namelist() if n.endswith((".ipynb", ".md", "Makefile"))}
        (tmp_path / colab_class.EDITION_ZIP).write_bytes(
            archive.read(f"paged-kv-course/colab/{colab_class.EDITION_ZIP}")
        )
    notebooks = {n: t for n, t in texts.items() if n.endswith(".ipynb")}
    assert notebooks and not any("git+https" in t for t in texts.values())  # neither GitHub nor the mirror
    for name, text in notebooks.items():
        setup = next(c for c in json.loads(text)["cells"] if languages.is_setup_cell(c))
        branches = _route_branches("".join(setup["source"]), MODELSCOPE_MARK, COLAB_TEST)
        assert colab_class.MODELSCOPE_PATH in branches[0] and colab_class.COLAB_PATH not in branches[0], name
        assert '%pip install --quiet "paged-kv-course @ {class_edition[0]}"' in branches[0], name
        assert colab_class.COLAB_PATH in branches[1] and colab_class.MODELSCOPE_PATH not in branches[1], name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(tmp_path / "site"),
            f"paged-kv-course @ file://{tmp_path / colab_class.EDITION_ZIP}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = (tmp_path / "site" / "paged_kv" / "cache" / "prefix_cache.py").read_text()
    assert installed == edition_sources(lab)["cache/prefix_cache.py"].decode() and LEFT_OUT in installed
    assert (tmp_path / "site" / "paged_kv" / "engine" / "data").is_dir()
    with zipfile.ZipFile(handout.build(tmp_path / "self.zip")) as archive:
        assert "git+https" in archive.read(f"paged-kv-course/course/{lab}/prefix_cache.ipynb").decode()


def _route_branches(setup: str, *tests: str) -> list:
    """The body of each platform statement of a setup cell (its ``if`` line holds the test), in ``tests``' order."""
    lines = setup.split("\n")
    bodies = []
    for test in tests:
        start = next(i for i, line in enumerate(lines) if line.startswith("if ") and test in line)
        end = start + 1
        while end < len(lines) and lines[end].startswith(" "):
            end += 1
        bodies.append("\n".join(lines[start + 1 : end]))
    return bodies


@pytest.mark.parametrize("language", languages.LANGUAGES)
def test_a_class_setup_cell_keeps_each_routes_extra_and_says_what_to_upload_in_the_notebooks_language(language):
    """Lab 06's setup cell installs the ``gpu`` extra on both routes: the class's copy installs the edition with the
    same extra on each, and stops with its route's message in the notebook's language when nothing is uploaded."""
    from tools.sync_colab import COLAB_TEST, MODELSCOPE_MARK, TRITON_EXTRA

    folder = languages.release_folder(REPO / "course", language)
    notebook = json.loads((folder / "06-triton-paged-attention" / "triton_paged_attention.ipynb").read_text())
    release = "".join(next(c for c in notebook["cells"] if languages.is_setup_cell(c))["source"])
    assert release.count(f'"paged-kv-course[{TRITON_EXTRA}] @ git+https://') == 2
    modelscope, colab = _route_branches(handed_out.class_setup_source(release), MODELSCOPE_MARK, COLAB_TEST)
    assert f'"paged-kv-course[{TRITON_EXTRA}] @ {{class_edition[0]}}"' in modelscope
    assert f'"paged-kv-course[{TRITON_EXTRA}] @ file://{handed_out.COLAB_PATH}"' in colab
    for branch, route in ((modelscope, "modelscope"), (colab, "colab")):
        said = handed_out.UPLOAD_MESSAGES[route]
        assert said[language] in branch and not [t for lang, t in said.items() if lang != language and t in branch]
    assert handed_out.class_setup_source(handed_out.class_setup_source(release)) == handed_out.class_setup_source(
        release
    ), "a class's setup cell installs nothing public: a second rewrite finds nothing to change"


def test_a_notebook_from_a_class_handout_is_graded_without_an_edited_cell_note():
    """Its setup cell is the class's rewrite (``colab_class.class_setup_source``), not an edit: collection repairs
    nothing in it, with or without cell ids (a notebook saved by Colab has none)."""
    import nbformat

    from autograder.handout import colab_class

    from autograder.collect import repair

    release = nbformat.read(REPO / "course" / "02-atomic-prefill" / "atomic_prefill.ipynb", as_version=4)
    handed = nbformat.read(REPO / "course" / "02-atomic-prefill" / "atomic_prefill.ipynb", as_version=4)
    for cell in handed.cells:
        cell.source = colab_class.class_setup_source(cell.source) if cell.cell_type == "code" else cell.source
    assert nbformat.writes(handed) != nbformat.writes(release), "the setup cell was rewritten"
    for keep_ids in (True, False):
        nb = nbformat.reads(nbformat.writes(handed), as_version=4)
        if not keep_ids:
            for cell in nb.cells:
                cell.pop("id", None)
                cell.metadata = {}
        result = repair.repair(
            nbformat.writes(nb).encode(),
            release,
            file_name="atomic_prefill.ipynb",
            expected_name="atomic_prefill.ipynb",
        )
        kinds = {kind for kind, _ in result.log}
        assert not kinds & {"edited-cell", "restored-cell", "added-cells"}, (keep_ids, result.log)


def test_a_handout_installs_the_students_pins_only(tmp_path):
    """The handout's requirements-lock.txt is requirements-student.txt: the developer lock's pins of the package's
    dependencies and its course extra, with what they need, and none of the hub's, the browser tests' or
    pytest's; the committed file is what tools/student_lock.py makes from this environment."""
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "student_lock.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(handout.build(tmp_path / "h.zip")) as archive:
        lock = archive.read("paged-kv-course/requirements-lock.txt").decode()
    assert lock == (REPO / "requirements-student.txt").read_text()
    pins = {line.split("==")[0].lower() for line in lock.splitlines() if "==" in line and not line.startswith("#")}
    developer = {
        line.split("==")[0].lower()
        for line in (REPO / "requirements-lock.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert {"torch", "triton", "nbgrader", "jupyterlab", "xxhash"} <= pins <= developer
    assert not pins & {"jupyterhub", "playwright", "pytest", "hypothesis", "nbval", "pytest-xdist"}
