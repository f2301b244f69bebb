"""Every pitfall a lab lists, typed into its TODO, fails that lab's visible test with one short block.

Each pitfall is written as the edit a student would make to the solution (text replaced in the answer
cell that holds it; a pitfall may list several alternatives, each tested). The lab's notebook code runs
up to that cell, then the first visible test cell below it runs: it must raise ``CheckFailed`` (never a
bare traceback), rendered in a few lines. Lab 06's pitfalls are kernels of its catalogue
(``lab06_catalogue``), each run against its step's visible test in ``test_lab06_graders``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, List, Tuple, Union

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from autograder.labs.lab07_serve_it.tests import bugs as bugs_lab07
from autograder.labs.lab06_triton_paged_attention.tests import bugs as lab06_catalogue
from autograder.course.layout import LABS, SOURCE_DIR
from paged_kv.lab.feedback import CheckFailed

Edits = List[Tuple[str, str]]

# lab: {pitfall title as the notebook's pitfall list writes it: [(text in the solution, replacement)], or a
# list of such edit lists when the pitfall names several mistakes (each must fail)}
PITFALLS: Dict[str, Dict[str, Union[Edits, List[Edits]]]] = {
    "01-capacity-ledger": {
        "Forgetting V": [("2 * num_layers * num_kv_heads", "num_layers * num_kv_heads")],
        "Forgetting a factor": [
            ("2 * num_layers * num_kv_heads * head_dim * dtype_bytes", "2 * num_kv_heads * head_dim * dtype_bytes")
        ],
        "Bits instead of bytes": [("head_dim * dtype_bytes\n", "head_dim * dtype_bytes * 8\n")],
        "A float result from `/`": [("head_dim * dtype_bytes\n", "head_dim * (dtype_bytes * 8) / 8\n")],
    },
    "02-atomic-prefill": {
        "Floor instead of ceiling": [
            ("needed = -(-req.seq_len // self.block_size)", "needed = max(1, req.seq_len // self.block_size)")
        ],
        "Taking blocks one by one and raising half-way": [
            (
                """        if needed > len(self.free_blocks):
            raise RuntimeError(
                f"OOM: request {req.request_id} needs {needed} blocks, only {len(self.free_blocks)} are free")
        allocated = self.free_blocks[:needed]
        del self.free_blocks[:needed]
        req.block_table.extend(allocated)""",
                """        for _ in range(needed):
            if not self.free_blocks:
                raise RuntimeError("OOM: no free block left")
            req.block_table.append(self.free_blocks.pop(0))""",
            )
        ],
        "`>=` instead of `>`": [("if needed > len(self.free_blocks):", "if needed >= len(self.free_blocks):")],
        "Copying the free list but not shrinking it": [("        del self.free_blocks[:needed]\n", "")],
    },
    "03-decode-growth": {
        "`new_len % block_size == 1`": [
            ("if self.blocks_needed(new_seq_len) > len(req.block_table):", "if new_seq_len % self.block_size == 1:")
        ],
        "Updating `seq_len` before securing the block": [
            (
                "        new_seq_len = req.seq_len + 1\n",
                "        new_seq_len = req.seq_len + 1\n        req.seq_len = new_seq_len\n",
            )
        ],
        "Requiring a free block on every step": [
            (
                "        new_seq_len = req.seq_len + 1\n",
                "        if not self.free_blocks:\n            raise RuntimeError('OOM: no free block')\n"
                "        new_seq_len = req.seq_len + 1\n",
            )
        ],
    },
    "04-logical-reconstruction": {
        "Sorting the table, or reading `pool[:n]`": [
            ("index = torch.tensor(table, dtype=torch.long)", "index = torch.tensor(sorted(table), dtype=torch.long)")
        ],
        "Forgetting the tail": [
            ("return blocks.reshape(-1, self.head_dim)[: req.seq_len]", "return blocks.reshape(-1, self.head_dim)")
        ],
        "Cutting one position too many": [("[: req.seq_len]", "[: req.seq_len - 1]")],
        "Returning a view": [
            (
                "        index = torch.tensor(table, dtype=torch.long)\n",
                "        if len(table) == 1:\n"
                "            return self.physical_kv_cache[table[0]][: req.seq_len]\n"
                "        index = torch.tensor(table, dtype=torch.long)\n",
            )
        ],
    },
    "05-prefix-cache": {
        "A per-block hash": [("        if prefix != -1:\n            h.update(prefix.to_bytes(8, \"little\"))\n", "")],
        "`if prefix:`": [("if prefix != -1:", "if prefix:")],
        "Unpinned or 32-bit ids": [("dtype=np.int64", "dtype=np.int32")],
        "Serving the last block": [("for i in range(seq.num_blocks - 1):", "for i in range(seq.num_blocks):")],
        "No token check": [
            ("if block_id == -1 or self.blocks[block_id].token_ids != token_ids:", "if block_id == -1:")
        ],
        "Counting every hit as free": [
            [
                (
                    "            if block_id in self.used_block_ids:\n                num_new_blocks -= 1\n",
                    "            num_new_blocks -= 1\n",
                )
            ],
            [("            if block_id in self.used_block_ids:\n                num_new_blocks -= 1\n", "")],
        ],
        "Walking past a miss": [
            (
                "                break\n            num_cached_blocks += 1",
                "                continue\n            num_cached_blocks += 1",
            )
        ],
        "Reviving through `_allocate_block`": [
            (
                "                block.ref_count = 1\n                self.free_block_ids.remove(block_id)\n"
                "                self.used_block_ids.add(block_id)\n",
                "                block_id = self._allocate_block()\n",
            )
        ],
        "Freeing at every decrement, or first block first": [
            [
                (
                    "            if block.ref_count == 0:\n                self._deallocate_block(block_id)",
                    "            if block_id in self.used_block_ids:\n                self._deallocate_block(block_id)",
                )
            ],
            [("for block_id in reversed(seq.block_table):", "for block_id in seq.block_table:")],
        ],
        "Clearing the hash on free": [
            [
                (
                    "                self._deallocate_block(block_id)\n",
                    "                self._deallocate_block(block_id)\n                self.hash_to_block_id.pop(block.hash, None)\n",
                )
            ],
            [
                (
                    "        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:\n"
                    "            del self.hash_to_block_id[block.hash]\n",
                    "",
                )
            ],
            [
                (
                    "if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:",
                    "if block.hash in self.hash_to_block_id:",
                )
            ],
        ],
        "Registering partial blocks": [
            [
                (
                    "end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size",
                    "end = -(-(seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size)",
                )
            ],
            [
                (
                    "end = (seq.num_cached_tokens + seq.num_scheduled_tokens) // self.block_size",
                    "end = len(seq) // self.block_size",
                )
            ],
            [("h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1", "h = -1")],
        ],
    },
    "08-fork-and-share": {
        "Copying the parent's block list object": [
            ("child.block_table = list(parent.block_table)", "child.block_table = parent.block_table")
        ],
        "Sharing the parent's token list": [
            ("        return child\n", "        child.token_ids = parent.token_ids\n        return child\n")
        ],
        "Forgetting `ref_count += 1` on fork": [
            ("        for block_id in parent.block_table:\n            self.blocks[block_id].ref_count += 1\n", "")
        ],
        "Copying on every append": [
            [("if self.blocks[last].ref_count > 1:  # shared", "if self.blocks[last].ref_count >= 1:  # shared")],
            [("if self.blocks[last].ref_count > 1:  # shared", "if False:  # shared")],
        ],
        "Recording the copy but keeping the old reference": [("            self.blocks[last].ref_count -= 1\n", "")],
        "Half-made changes on OOM": [
            (
                "            if not self.free_block_ids:\n                raise RuntimeError(f\"OOM: sequence {seq.seq_id} needs a "
                "copy of block {last} and no block is free\")\n            fresh = self._allocate_block()\n"
                "            self.blocks[last].ref_count -= 1\n",
                "            self.blocks[last].ref_count -= 1\n            if not self.free_block_ids:\n"
                "                raise RuntimeError(\"OOM: no block for the copy\")\n            fresh = self._allocate_block()\n",
            )
        ],
        "Appending before forking": [
            (
                "    for b, _ in choices:\n        new_beams.append(beams[b] if b not in continued else manager.fork(beams[b]))\n"
                "        continued.add(b)\n",
                "    for b, token in choices:\n        seq = beams[b] if b not in continued else manager.fork(beams[b])\n"
                "        continued.add(b)\n        seq.append_token(token)\n        manager.may_append(seq)\n"
                "        new_beams.append(seq)\n",
            ),
            (
                "    for seq, (_, token) in zip(new_beams, choices):\n        seq.append_token(token)\n"
                "        manager.may_append(seq)\n",
                "",
            ),
        ],
        "Returning the beams in another order": [
            ("    return new_beams\n", "    return sorted(new_beams, key=lambda seq: seq.seq_id)\n")
        ],
        "Freeing pruned beams after appending": [
            (
                "    for b, seq in enumerate(beams):\n        if b not in continued:\n            manager.deallocate(seq)\n"
                "    for seq, (_, token) in zip(new_beams, choices):\n        seq.append_token(token)\n"
                "        manager.may_append(seq)\n",
                "    for seq, (_, token) in zip(new_beams, choices):\n        seq.append_token(token)\n"
                "        manager.may_append(seq)\n    for b, seq in enumerate(beams):\n        if b not in continued:\n"
                "            manager.deallocate(seq)\n",
            )
        ],
        "Freeing a beam's blocks directly": [
            (
                "            manager.deallocate(seq)\n",
                "            for block_id in seq.block_table:\n                manager.blocks[block_id].ref_count = 0\n"
                "                if block_id in manager.used_block_ids:\n"
                "                    manager._deallocate_block(block_id)\n",
            )
        ],
        "Copying only K, or only layer 0": [
            [("    for cache in list(k_caches) + list(v_caches):", "    for cache in k_caches:")],
            [("    for cache in list(k_caches) + list(v_caches):", "    for cache in (k_caches[0], v_caches[0]):")],
        ],
        "Putting new tensors in the list": [
            (
                "    for cache in list(k_caches) + list(v_caches):\n        cache[dst] = cache[src]\n",
                "    for caches in (k_caches, v_caches):\n        for i in range(len(caches)):\n"
                "            caches[i] = caches[i].index_copy(0, dst, caches[i][src])\n",
            )
        ],
    },
    "07-serve-it": {
        "Skipping ahead of the head": [
            (
                "            if hits == -1:\n                break\n            new_tokens = len(head) - hits * self.block_size\n"
                "            if new_tokens > budget:\n                break\n",
                "            if hits == -1 or len(head) - hits * self.block_size > budget:\n"
                "                fits = [s for s in list(self.waiting)[1:]\n"
                "                        if self.block_manager.can_allocate(s) != -1 and len(s) <= budget]\n"
                "                if not fits:\n                    break\n"
                "                head = fits[0]\n                self.waiting.remove(head)\n"
                "                self.waiting.appendleft(head)\n                hits = self.block_manager.can_allocate(head)\n",
            )
        ],
        **{
            title: [bugs_lab07.EDITS[bug][:2]]
            for title, bug in [
                ("Preempting the oldest", "preempts the oldest"),
                ("Forgetting `deallocate`", "forgets to deallocate on preemption"),
                ("Preempted to the tail of `waiting`", "preempted sequence to the tail of waiting"),
                ("Mixing the phases", "prefill and decode in the same step"),
                ("Counting cached tokens against the budget", "budget counts cached tokens"),
                ("Decode checks on your own", "decode growth by hand, wrong for block size 1"),
            ]
        },
    },
}
# Lab 06: each listed pitfall is one or more kernels of the catalogue (every catalogued bug is run against
# its step's visible test in test_lab06_graders.test_the_visible_tests_catch_every_pitfall).
KERNEL_PITFALLS: Dict[str, List[str]] = {
    "An int32 block id times a stride": [
        "gather_int32_offsets",
        "scores_int32_offsets",
        "attend_int32_offsets",
        "decode_int32_offsets",
    ],
    "Unmasked tail": [
        "gather_unmasked_tail",
        "scores_unmasked_tail",
        "attend_unmasked_tail",
        "decode_unmasked_loads",
        "decode_unmasked_tail_scores",
    ],
    "Following padding": ["decode_reads_padding_entries"],
    "q . k in fp16": ["attend_fp16_dot", "decode_fp16_dot"],
    "No max subtraction": ["attend_no_max_subtraction", "decode_no_max_subtraction"],
    "Query head used as KV head": ["decode_query_head_as_kv_head"],
    "Python inside a kernel": ["gather_python_in_kernel"],
    "Tiles that follow `BLOCK_SIZE`": ["fast_tiles_follow_block_size"],
    "One block per tile": ["fast_one_block_per_tile"],
    "Slot from the tile, not the block": ["fast_slot_from_tile"],
    "Broadcast sums instead of `tl.dot`": ["fast_broadcast_sums"],
    "`tl.dot` accumulating in fp16": ["fast_fp16_accumulation"],
    "Padding rows stored": ["fast_padding_rows_stored"],
}
LISTED = {**{lab: list(p) for lab, p in PITFALLS.items()}, "06-triton-paged-attention": list(KERNEL_PITFALLS)}
READS_PHYSICAL_PREFIX = (
    "index = torch.tensor(table, dtype=torch.long)\n        blocks = self.physical_kv_cache.index_select(0, index)",
    "blocks = self.physical_kv_cache[: len(table)]",
)


def _cells(lab: str):
    nb = nbformat.read(SOURCE_DIR / lab / LABS[lab], as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"], nb


def _is(cell, key: str) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get(key))


@lru_cache(maxsize=None)
def _setup(lab: str, answer: int) -> dict:
    """The notebook's globals after every code cell above ``answer`` (test cells skipped), computed once."""
    cells, _ = _cells(lab)
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    for cell in cells[:answer]:
        if not _is(cell, "grade"):
            exec(compile(transform(cell.source), "<setup>", "exec"), namespace)
    return namespace


def run_visible_test(lab: str, edits: Edits) -> None:
    """Apply ``edits`` to the answer cells that hold their text, run the lab up to the last edited answer
    cell, that cell, then the first visible test cell below it."""
    cells, _ = _cells(lab)
    answers = [i for i, c in enumerate(cells) if _is(c, "solution") and not _is(c, "grade")]
    sources = {i: cells[i].source for i in answers}
    edited = []
    for old, new in edits:
        holders = [i for i in answers if old in sources[i]]
        assert len(holders) == 1, f"{lab}: {old!r} is in {len(holders)} answer cells, not one"
        sources[holders[0]] = sources[holders[0]].replace(old, new)
        edited.append(holders[0])
    last_test = max(i for i, c in enumerate(cells) if _is(c, "grade"))
    answer = max(edited) if edited else max(i for i in answers if i < last_test)
    visible = next(c for c in cells[answer:] if _is(c, "grade"))
    transform = TransformerManager().transform_cell
    namespace = dict(_setup(lab, answer))
    exec(compile(transform(sources[answer]), "<answer>", "exec"), namespace)
    exec(compile(transform(visible.source), "<visible tests>", "exec"), namespace)


def _alternatives(edits) -> List[Edits]:
    return edits if edits and isinstance(edits[0], list) else [edits]


def pitfall_params():
    return [
        pytest.param(lab, title, edits, id=f"{lab[:2]}-{title}" + (f"-{n}" if n else ""))
        for lab, pitfalls in PITFALLS.items()
        for title, alternatives in pitfalls.items()
        for n, edits in enumerate(_alternatives(alternatives))
    ]


@pytest.mark.parametrize("lab", sorted(PITFALLS))
def test_the_solution_passes_its_visible_test(lab, capsys):
    run_visible_test(lab, [])
    assert "Visible tests passed." in capsys.readouterr().out


@pytest.mark.parametrize("lab, title, edits", pitfall_params())
def test_each_listed_pitfall_fails_the_visible_test_with_one_block(lab, title, edits, capsys):
    with pytest.raises(CheckFailed) as caught:
        run_visible_test(lab, edits)
    assert "Visible tests passed." not in capsys.readouterr().out
    rendered = caught.value._render_traceback_()
    assert 2 <= len(rendered) <= 5 and caught.value.hint, rendered


def test_reading_the_pool_prefix_fails_the_visible_test_too():
    with pytest.raises(CheckFailed):
        run_visible_test("04-logical-reconstruction", [READS_PHYSICAL_PREFIX])


def test_every_kernel_pitfall_is_a_catalogued_bug_of_lab_06():
    catalogued = {kernel.__name__ for bugs in lab06_catalogue.STEP_BUGS.values() for kernel, _, _ in bugs}
    for title, kernels in KERNEL_PITFALLS.items():
        assert set(kernels) <= catalogued, f"{title}: {set(kernels) - catalogued} not in lab06_catalogue.STEP_BUGS"


@pytest.mark.parametrize("lab", sorted(LISTED))
def test_the_notebook_lists_exactly_the_pitfalls_tested_here(lab):
    """The first bullet list of the lab's pitfalls section (the ones to type into the TODO) is this file's list."""
    _, nb = _cells(lab)
    text = next(c.source for c in nb.cells if c.cell_type == "markdown" and "Pitfalls to remember" in c.source)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- **"))
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    listed = [line.split("**")[1] for line in block if line.startswith("- **")]
    assert len(listed) == len(LISTED[lab]), listed
    for title in LISTED[lab]:
        assert sum(title in shown for shown in listed) == 1, f"{lab} does not list {title!r} once: {listed}"


# Two part-4 mistakes of lab 05 that once showed only "raised KeyError: <a 20-digit hash>" (issue 37): each must
# fail part 4's visible test with one block that names the concept.
LAB05_PART4_MISTAKES = {
    "can_allocate answers True or False": (
        [
            (
                "        if len(self.free_block_ids) < num_new_blocks:\n"
                "            return -1\n        return num_cached_blocks\n",
                "        return len(self.free_block_ids) >= num_new_blocks\n",
            )
        ],
        "never True or False",
    ),
    "allocate does not chain the hash": (
        [
            (
                "            h = self.compute_hash(seq.block(i), h)\n            block_id = self.hash_to_block_id[h]\n",
                "            h = self.compute_hash(seq.block(i))\n            block_id = self.hash_to_block_id[h]\n",
            )
        ],
        "chained hash",
    ),
}


@pytest.mark.parametrize("mistake", sorted(LAB05_PART4_MISTAKES))
def test_lab05_part4_mistakes_fail_with_one_block_naming_the_concept(mistake, capsys):
    edits, concept = LAB05_PART4_MISTAKES[mistake]
    with pytest.raises(CheckFailed) as caught:
        run_visible_test("05-prefix-cache", edits)
    rendered = caught.value._render_traceback_()
    assert 2 <= len(rendered) <= 5 and concept in " ".join(rendered), rendered
