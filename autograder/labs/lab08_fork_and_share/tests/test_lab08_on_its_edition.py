"""Lab 08 on its own edition of the package (issue 25), where fork, may_append, advance_beams and
copy_blocks are stubs: the finished lab runs top to bottom there, and the fork picture that section 1
draws from written-out tables (before the student's manager exists) is what the reference computes."""

import os
import subprocess
import sys

import pytest

from autograder.editions import manifest
from autograder.editions.build import REPO, build_edition
from autograder.editions.check import run_on_edition
from autograder.course.layout import LABS as NOTEBOOKS, SOURCE_DIR
from notebook_code import namespace_after_answer
from paged_kv.cache.forking import ForkingBlockManager
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.cache.steps import prefill
from paged_kv.engine.tokenizer import encode

LAB = "08-fork-and-share"


def test_the_fork_picture_before_part_1_shows_the_tables_and_copy_the_reference_computes():
    given = namespace_after_answer(SOURCE_DIR / LAB / NOTEBOOKS[LAB])
    manager = ForkingBlockManager(8, 4)
    a = Sequence(encode("shared"), 4)
    prefill(manager, a)
    b = manager.fork(a)
    assert given["_after_fork"] == {"branch a": a.block_table, "branch b": b.block_table}
    for seq, token in ((a, "!"), (b, "?")):
        seq.append_token(encode(token)[0])
        manager.may_append(seq)
    assert given["_after_writes"] == {"branch a": a.block_table, "branch b": b.block_table}
    assert given["_copies"] == manager.pending_copies
    # draw_fork_tables draws each block's ref count as the tables that list it, and no cached free block
    assert manager.ref_counts() == [sum(t.count(i) for t in (a.block_table, b.block_table)) for i in range(8)]
    assert all(manager.blocks[i].hash == -1 for i in manager.free_block_ids)


def test_the_finished_lab_runs_top_to_bottom_on_its_own_edition(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_KV_EDITIONS", str(tmp_path))
    assert [str(error) for error in run_on_edition(LAB, LAB)] == []


# Every helper the lab's table of given code offers (section 2), called on the starter the way a student's
# fork or may_append would call it. Each must work in each edition the lab is graded on (the main box and each
# part's own box), whatever that edition leaves out: a correct answer built on a given helper keeps its points.
OFFERED_HELPERS = """
from paged_kv.lab.starters import ForkingManagerWithoutFork
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.cache.steps import prefill
m = ForkingManagerWithoutFork(3, 2)
seq = Sequence([1, 2, 3], 2)
prefill(m, seq)
last = seq.block_table[-1]
assert m.blocks[last].ref_count == 1 and m.pending_copies == [] and m.take_copies() == []
assert m.can_append(seq), "a private partial last block is written in place"
m.blocks[last].ref_count += 1  # as if another table listed it
assert m.can_append(seq), "one block is free for the copy"
m._allocate_block()
assert not m.can_append(seq), "no block is free for the copy"
m.blocks[last].ref_count -= 1
m.deallocate(seq)
assert m.blocks[last].ref_count == 0
print("offered helpers work")
"""


@pytest.mark.parametrize("part", [None] + [p.name for p in manifest.BY_LAB[LAB].boxed_parts], ids=str)
def test_every_offered_helper_works_in_every_edition_of_the_lab(part):
    folder = build_edition(LAB, part)
    done = subprocess.run(
        [sys.executable, "-c", OFFERED_HELPERS],
        cwd=folder.parent,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)])),
        timeout=120,
    )
    assert "offered helpers work" in done.stdout, done.stderr[-2000:]
