"""Lab 05 on its own edition of the package (a class's handout: no reference for any of its parts).

- The given pictures before the parts draw written-out data, and that data is what the reference computes
  (the chained names of the first picture, the manager state of the shared-prefix picture).
- The parts come in the manifest's order, each part's class built on the previous one's, each with its own
  graded cells between its answer cell and the next part's, and the grader's parts are the manifest's.
- The finished lab runs on its edition with no error, every "see what you built" cell draws, and each bug
  hunt shows its own bug in the student's manager (not a TODO missing from the package); in the untouched
  release the bug hunts say which parts to finish first.
(Each visible cell on the edition: ``test_lab05_visible``.)
"""

from __future__ import annotations

import ast
import contextlib
import io
from typing import Dict, List

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

import paged_kv.lab.viz as viz
from autograder.course.notebook import BEGIN
from autograder.editions.manifest import BY_LAB
from autograder.labs.lab05_prefix_cache import checks as grader
from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from paged_kv import BlockManager as Reference, Sequence, prefill
from paged_kv.cache.prefix_cache import NO_HASH

LAB = "05-prefix-cache"
SETUP = "lab05-given-01"
FIRST_CLASS_BASE = "BlockManagerWithoutPrefixCache"
FINISHED_CLASS = "BlockManager"  # the "see what you built" cells and the bug hunts use it
BUG_HUNT_NOTE = "Finish BlockManager (parts 1 to 4), run its cell again"


def _cells(folder=SOURCE_DIR) -> List[nbformat.NotebookNode]:
    return nbformat.read(folder / LAB / LABS[LAB], as_version=4).cells


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _by_grade_id(cells) -> Dict[str, nbformat.NotebookNode]:
    return {_grade_id(c): c for c in cells if _grade_id(c)}


def _run_given(grade_id: str, monkeypatch, drawer: str):
    """The setup cell then the given cell ``grade_id``, with ``paged_kv.lab.viz.<drawer>`` recording what it
    is asked to draw; returns the one call's positional arguments."""
    drawn = []
    monkeypatch.setattr(viz, drawer, lambda *args, **kwargs: drawn.append(args))
    cells = _by_grade_id(_cells())
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    for name in (SETUP, grade_id):
        exec(compile(transform(cells[name].source), f"<{name}>", "exec"), namespace)
    assert len(drawn) == 1, f"{grade_id} should draw one picture with {drawer}"
    return drawn[0]


# -- written-out data ----------------------------------------------------------------------------------
def test_the_chained_names_written_out_in_the_first_picture_are_the_references(monkeypatch):
    (rows,) = _run_given("lab05-given-02", monkeypatch, "draw_hash_chains")
    vocab: Dict[str, int] = {}
    expected = []
    for label, texts, _, _ in rows:
        ids = [vocab.setdefault(word, len(vocab)) for word in " ".join(texts).split()]
        blocks = [ids[i : i + 4] for i in range(0, len(ids), 4)]
        assert [" ".join(text.split()) for text in texts] == texts and all(len(t.split()) == 4 for t in texts)
        chain, h = [], NO_HASH
        for block in blocks:
            h = Reference.compute_hash(block, h)
            chain.append(h)
        expected.append((label, texts, [Reference.compute_hash(block) for block in blocks], chain))
    assert [tuple(row) for row in rows] == expected
    listed = ", ".join(f"{word} {i}" for word, i in vocab.items())
    source = " ".join(line.lstrip("# ") for line in _by_grade_id(_cells())["lab05-given-02"].source.splitlines())
    assert f"Token ids: {listed}." in source, "the cell's comment lists the token ids the names are computed from"


def _as_drawn(manager, seqs) -> dict:
    """What ``draw_block_manager`` shows of a manager: tables, lengths, ref counts, used and free blocks, and
    the free blocks still cached, with their names and tokens."""
    free = list(manager.free_block_ids)
    return {
        "pool": (manager.num_blocks, manager.block_size),
        "tables": [list(s.block_table) for s in seqs],
        "lengths": [len(s) for s in seqs],
        "ref counts": manager.ref_counts(),
        "used": sorted(manager.used_block_ids),
        "free": sorted(free),
        "cached free": {
            b: (manager.blocks[b].hash, manager.blocks[b].token_ids) for b in free if manager.blocks[b].hash != NO_HASH
        },
    }


def test_the_shared_prefix_picture_before_part_2_is_the_state_the_reference_reaches(monkeypatch):
    manager, seqs, *_ = _run_given("lab05-given-03", monkeypatch, "draw_block_manager")
    # What the cell says happened, on the reference: a finished request released, then two with its prefix.
    reference = Reference(num_blocks=12, block_size=4)
    system = list(range(100, 108))
    done = Sequence(system + [1, 2, 3, 4, 5], block_size=4)
    prefill(reference, done)
    reference.deallocate(done)
    live = [Sequence(system + [7, 8, 9], block_size=4), Sequence(system + [6, 6, 6, 6, 6], block_size=4)]
    assert [prefill(reference, seq) for seq in live] == [2, 2]
    assert [s.token_ids for s in seqs] == [s.token_ids for s in live]
    assert _as_drawn(manager, seqs) == _as_drawn(reference, live)


# -- the parts' order ----------------------------------------------------------------------------------
def _answer_class(cell) -> ast.ClassDef:
    (klass,) = [node for node in ast.parse(cell.source).body if isinstance(node, ast.ClassDef)]
    return klass


def test_the_parts_come_in_the_manifests_order_each_class_built_on_the_one_before():
    entry = BY_LAB[LAB]
    assert list(grader.PARTS) == [part.name for part in entry.parts]
    cells = _cells()
    ids = [_grade_id(c) for c in cells]
    answers = [ids.index(f"lab05-todo-{part.name}") for part in entry.parts]
    assert answers == sorted(answers), "the answer cells come in the manifest's order of parts"
    assert sorted(g for c, g in zip(cells, ids) if c.metadata.get("nbgrader", {}).get("grade")) == sorted(
        g for part in entry.parts for g in part.cells
    ), "every graded cell belongs to one part"
    base = FIRST_CLASS_BASE
    for k, part in enumerate(entry.parts):
        methods = {t.name for t in part.todos}
        assert set(grader.PARTS[part.name]) == methods
        klass = _answer_class(cells[answers[k]])
        assert [b.id for b in klass.bases] == [base], f"part {part.name}'s class builds on the previous part's"
        assert {n.name for n in klass.body if isinstance(n, ast.FunctionDef)} == methods
        end = answers[k + 1] if k + 1 < len(answers) else len(cells)
        for grade_id in part.cells:
            at = ids.index(grade_id)
            assert answers[k] < at < end, f"{grade_id} sits between part {part.name}'s answer and the next part's"
            if BEGIN in cells[at].source:
                assert f"({klass.name})" in cells[at].source, f"{grade_id} grades {klass.name}"
        base = klass.name
    assert base == FINISHED_CLASS


# -- the whole lab -------------------------------------------------------------------------------------
def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _bug_hunts(cells) -> List[nbformat.NotebookNode]:
    hunts = [c for c in cells if c.cell_type == "code" and "practice(" in c.source]
    assert len(hunts) == 6, "the extra-keys exercise and the five bug hunts"
    return hunts


def test_the_finished_lab_on_its_edition_draws_everything_and_each_bug_hunt_shows_its_own_bug():
    from autograder.editions.check import finished_notebook, run_on_edition

    nb = finished_notebook(LAB)
    assert run_on_edition(LAB, LAB, nb=nb) == []
    for cell in nb.cells:
        if cell.cell_type == "code" and "show_when_ready(" in cell.source:
            assert "Finish " not in _printed(cell) and cell.outputs, cell.source[:200]
    for cell in _bug_hunts(nb.cells):
        printed = _printed(cell)
        assert printed.startswith("Not yet: "), f"a bug hunt fails on its own bug:\n{printed}"
        assert not any(word in printed for word in ("TODO", "NotImplementedError", "Finish ")), printed


def test_in_the_untouched_release_each_bug_hunt_says_which_parts_to_finish_first():
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    printed = {}
    for cell in _cells(RELEASE_DIR):
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(transform(cell.source), "<cell>", "exec"), namespace)
        printed[cell.id] = out.getvalue()
    hunts = _bug_hunts(_cells(RELEASE_DIR))
    assert printed[hunts[0].id].startswith("Finish compute_hash (part 1), run its cell again")
    for cell in hunts[1:]:
        assert printed[cell.id].startswith(BUG_HUNT_NOTE), printed[cell.id]
