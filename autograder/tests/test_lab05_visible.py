"""Lab 05's visible test cells, tried as a student: each pitfall the lab lists (and a few slips of our own),
typed into the part's TODO, fails that part's visible cell with one short block (never a traceback)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from autograder.pipeline.labs import LABS, SOURCE_DIR
from paged_kv.lab.feedback import CheckFailed

LAB = "05-prefix-cache"
VISIBLE = {"lab05-todo1": "lab05-visible-hash", "lab05-todo2": "lab05-visible-allocate",
           "lab05-todo3": "lab05-visible-release", "lab05-todo4": "lab05-visible-hash-blocks"}
FREED_AT_ZERO = ("            if block.ref_count == 0:\n                self._deallocate_block(block_id)",
                 "            self._deallocate_block(block_id)")
# (TODO, what the student got wrong): the edits to the solution, and text the failure must show
MISTAKES: Dict[Tuple[str, str], Tuple[List[Tuple[str, str]], str]] = {
    ("lab05-todo1", "a per-block hash"): ([('        if prefix != -1:\n            h.update(prefix.to_bytes(8, "little"))\n',
                                           "")], "the previous block's hash goes in first"),
    ("lab05-todo1", "`if prefix:`"): ([("if prefix != -1:", "if prefix:")], "test `prefix != -1`"),
    ("lab05-todo1", "32-bit ids"): ([("dtype=np.int64", "dtype=np.int32")], "dtype=np.int64"),
    ("lab05-todo2", "serving the last block"): ([("for i in range(seq.num_blocks - 1):", "for i in range(seq.num_blocks):")],
                                                "never serve the last block"),
    ("lab05-todo2", "no token check"): ([("if block_id == -1 or self.blocks[block_id].token_ids != token_ids:",
                                         "if block_id == -1:")], "compare the block's token_ids"),
    ("lab05-todo2", "walking past a miss"): ([("                break\n            num_cached_blocks += 1",
                                              "                continue\n            num_cached_blocks += 1")], "hits"),
    ("lab05-todo3", "freeing at every decrement"): ([FREED_AT_ZERO], "still has ref_count 1"),
    ("lab05-todo3", "first block first"): ([("for block_id in reversed(seq.block_table):",
                                            "for block_id in seq.block_table:")], "reversed(seq.block_table)"),
    ("lab05-todo3", "(slip) a deque's pop()"): ([("self.free_block_ids.popleft()", "self.free_block_ids.pop()")],
                                               "popleft() the free queue"),
    ("lab05-todo4", "registering partial blocks"): ([("end = (seq.num_cached_tokens", "end = -(-(seq.num_cached_tokens"),
                                                     ("self.block_size\n        h =", "self.block_size)\n        h =")],
                                                    "register only blocks whose tokens were all computed"),
    ("lab05-todo4", "restarting the chain at -1"): ([("h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1",
                                                      "h = -1")], "continue the chain"),
}


def run_part(todo: str, edits: List[Tuple[str, str]]) -> None:
    """The notebook's code cells in order (solutions as written, hidden tests skipped), with ``edits`` in
    the TODO ``todo``, up to and including that TODO's visible test cell."""
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    for cell in nbformat.read(SOURCE_DIR / LAB / LABS[LAB], as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and meta.get("grade_id") != VISIBLE[todo]):
            continue
        source = cell.source
        if meta.get("grade_id") == todo:
            for old, new in edits:
                assert source.count(old) == 1, f"{todo}: {old!r} is not once in the solution"
                source = source.replace(old, new)
        exec(compile(transform(source), f"<{meta.get('grade_id', 'cell')}>", "exec"), namespace)
        if meta.get("grade_id") == VISIBLE[todo]:
            return


@pytest.mark.parametrize("todo", sorted(VISIBLE))
def test_each_visible_cell_passes_the_solution(todo, capsys):
    run_part(todo, [])
    assert "Visible tests passed." in capsys.readouterr().out


@pytest.mark.parametrize("todo, mistake", sorted(MISTAKES), ids=[f"{t[-5:]}-{m}" for t, m in sorted(MISTAKES)])
def test_each_mistake_fails_its_visible_cell_with_one_short_block_that_points_at_the_fix(todo, mistake, capsys):
    edits, shown = MISTAKES[todo, mistake]
    with pytest.raises(CheckFailed) as caught:
        run_part(todo, edits)
    assert "Visible tests passed." not in capsys.readouterr().out
    lines = caught.value._render_traceback_()
    assert 1 <= len(lines) <= 5, lines
    assert shown in str(caught.value), str(caught.value)
