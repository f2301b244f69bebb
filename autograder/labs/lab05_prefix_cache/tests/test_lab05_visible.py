"""Lab 05's visible test cells, tried as a student: each pitfall the lab lists (and a few slips of our own),
typed into the part's TODO, fails that part's visible cell with one short block (never a traceback); and on
the lab's own edition of the package (a class's handout: no reference for any part), each visible cell
still passes the solution and catches each mistake, so it needs only the parts before it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from autograder.course.layout import LABS, SOURCE_DIR
from paged_kv.lab.feedback import CheckFailed

HERE = Path(__file__).resolve().parent

LAB = "05-prefix-cache"
# the answer cell of each part (named as the manifest names the parts) -> its visible test cell
VISIBLE = {
    "lab05-todo-hash": "lab05-visible-hash",
    "lab05-todo-release": "lab05-visible-release",
    "lab05-todo-register": "lab05-visible-hash-blocks",
    "lab05-todo-admit": "lab05-visible-allocate",
}
FREED_AT_ZERO = (
    "            if block.ref_count == 0:\n                self._deallocate_block(block_id)",
    "            self._deallocate_block(block_id)",
)
# (answer cell, what the student got wrong): the edits to the solution, and text the failure must show
MISTAKES: Dict[Tuple[str, str], Tuple[List[Tuple[str, str]], str]] = {
    ("lab05-todo-hash", "a per-block hash"): (
        [('        if prefix != -1:\n            h.update(prefix.to_bytes(8, "little"))\n', "")],
        "the previous block's hash goes in first",
    ),
    ("lab05-todo-hash", "`if prefix:`"): ([("if prefix != -1:", "if prefix:")], "test `prefix != -1`"),
    ("lab05-todo-hash", "32-bit ids"): ([("dtype=np.int64", "dtype=np.int32")], "dtype=np.int64"),
    ("lab05-todo-release", "freeing at every decrement"): ([FREED_AT_ZERO], "still has ref_count 1"),
    ("lab05-todo-release", "first block first"): (
        [("for block_id in reversed(seq.block_table):", "for block_id in seq.block_table:")],
        "reversed(seq.block_table)",
    ),
    ("lab05-todo-release", "(slip) a deque's pop()"): (
        [("self.free_block_ids.popleft()", "self.free_block_ids.pop()")],
        "popleft() the free queue",
    ),
    ("lab05-todo-release", "clearing the hash on free"): (
        [
            (
                "                self._deallocate_block(block_id)\n",
                "                self._deallocate_block(block_id)\n"
                "                self.hash_to_block_id.pop(block.hash, None)\n",
            )
        ],
        "keep the index entries of freed blocks",
    ),
    ("lab05-todo-release", "never clearing it on reuse"): (
        [
            (
                "        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:\n"
                "            del self.hash_to_block_id[block.hash]\n",
                "",
            )
        ],
        "nano-vllm #163",
    ),
    ("lab05-todo-release", "clearing it without the guard"): (
        [
            (
                "if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:",
                "if block.hash in self.hash_to_block_id:",
            )
        ],
        "hash_to_block_id.get(block.hash) == block_id",
    ),
    ("lab05-todo-register", "registering partial blocks"): (
        [
            ("end = (seq.num_cached_tokens", "end = -(-(seq.num_cached_tokens"),
            ("self.block_size\n        h =", "self.block_size)\n        h ="),
        ],
        "register only blocks whose tokens were all computed",
    ),
    ("lab05-todo-register", "restarting the chain at -1"): (
        [("h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1", "h = -1")],
        "continue the chain",
    ),
    ("lab05-todo-admit", "serving the last block"): (
        [("for i in range(seq.num_blocks - 1):", "for i in range(seq.num_blocks):")],
        "never serve the last block",
    ),
    ("lab05-todo-admit", "no token check"): (
        [("if block_id == -1 or self.blocks[block_id].token_ids != token_ids:", "if block_id == -1:")],
        "compare the block's token_ids",
    ),
    ("lab05-todo-admit", "walking past a miss"): (
        [
            (
                "                break\n            num_cached_blocks += 1",
                "                continue\n            num_cached_blocks += 1",
            )
        ],
        "hits",
    ),
}


# On the edition, a later part's visible test runs the student's earlier parts: a crash in one of them must show
# there as one block naming that part (issue 37, item 4). (answer cell with the crash, edits, the later answer cell)
CRASHES_SHOWN_LATER: Dict[str, Tuple[str, List[Tuple[str, str]], str]] = {
    "part 3's hash_blocks crashes (KeyError) in part 4's test": (
        "lab05-todo-register",
        [
            (
                "            block.update(h, token_ids)\n",
                "            del self.hash_to_block_id[block.hash]\n            block.update(h, token_ids)\n",
            )
        ],
        "lab05-todo-admit",
    ),
    "part 2's deallocate crashes (IndexError) in part 4's test": (
        "lab05-todo-release",
        [("for block_id in reversed(seq.block_table):", "for block_id in reversed(seq.block_table + [99]):")],
        "lab05-todo-admit",
    ),
}


def run_part(todo: str, edits: List[Tuple[str, str]], until: str = "") -> None:
    """The notebook's code cells in order (solutions as written, hidden tests skipped), with ``edits`` in
    the TODO ``todo``, up to and including the visible test cell of ``until`` (default: that TODO's)."""
    shown = VISIBLE[until or todo]
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    for cell in nbformat.read(SOURCE_DIR / LAB / LABS[LAB], as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and meta.get("grade_id") != shown):
            continue
        source = cell.source
        if meta.get("grade_id") == todo:
            for old, new in edits:
                assert source.count(old) == 1, f"{todo}: {old!r} is not once in the solution"
                source = source.replace(old, new)
        exec(compile(transform(source), f"<{meta.get('grade_id', 'cell')}>", "exec"), namespace)
        if meta.get("grade_id") == shown:
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


# -- on the lab's own edition -----------------------------------------------------------------------------
def outcomes_here() -> Dict[str, object]:
    """Every case above, run with the ``paged_kv`` this process imports: ``{"edition": its lab, "solution":
    {answer cell: "passed" or what happened}, "mistakes": {"cell: mistake": "caught" or what happened},
    "pitfalls": {"title #n": "caught" or what happened}}`` (the lab's pitfalls from ``test_pitfalls``)."""
    import paged_kv.cache.edition as edition
    from test_pitfalls import PITFALLS, _alternatives, run_visible_test

    def outcome(run, shown: str = "") -> str:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                run()
        except CheckFailed as failed:
            return "caught" if shown in str(failed) else f"caught without {shown!r}: {failed}"
        except BaseException as error:  # noqa: BLE001 - reported, and the test fails on it
            return f"{type(error).__name__}: {error}"
        return "passed" if "Visible tests passed." in out.getvalue() else f"no verdict: {out.getvalue()[-300:]}"

    pitfalls = {
        f"{title} #{n}": outcome(lambda edits=edits: run_visible_test(LAB, edits))
        for title, alternatives in PITFALLS[LAB].items()
        for n, edits in enumerate(_alternatives(alternatives))
    }
    return {
        "edition": edition.LAB,
        "solution": {todo: outcome(lambda todo=todo: run_part(todo, [])) for todo in VISIBLE},
        "mistakes": {
            f"{todo}: {mistake}": outcome(lambda edits=edits, todo=todo: run_part(todo, edits), shown)
            for (todo, mistake), (edits, shown) in MISTAKES.items()
        },
        "pitfalls": pitfalls,
        "crashes": {
            name: outcome(lambda todo=todo, edits=edits, later=later: run_part(todo, edits, later), "your part")
            for name, (todo, edits, later) in CRASHES_SHOWN_LATER.items()
        },
    }


def test_on_the_labs_own_edition_each_visible_cell_needs_only_the_parts_before_it(tmp_path):
    from autograder.editions.build import REPO, build_edition
    from test_pitfalls import PITFALLS, _alternatives

    folder = build_edition(LAB)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(folder), str(REPO), str(HERE), str(REPO / "autograder" / "tests")]),
        MPLBACKEND="Agg",
    )
    script = "import json, test_lab05_visible as t; print(json.dumps(t.outcomes_here()))"
    # cwd: a folder without paged_kv/, so that the edition's is the one imported
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outcomes = json.loads(done.stdout.splitlines()[-1])
    assert outcomes["edition"] == LAB
    assert outcomes["solution"] == {todo: "passed" for todo in VISIBLE}
    assert outcomes["mistakes"] == {f"{todo}: {mistake}": "caught" for todo, mistake in MISTAKES}
    assert outcomes["crashes"] == {name: "caught" for name in CRASHES_SHOWN_LATER}, outcomes["crashes"]
    assert outcomes["pitfalls"] == {
        f"{title} #{n}": "caught"
        for title, alternatives in PITFALLS[LAB].items()
        for n, _ in enumerate(_alternatives(alternatives))
    }
