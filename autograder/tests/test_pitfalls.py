"""Every pitfall a lab lists, typed into its TODO, fails that lab's visible test with one short block.

Each pitfall is written as the edit a student would make to the solution (text replaced in the
graded answer cell). The lab's notebook code runs up to that cell, then its visible test cell runs:
it must raise ``CheckFailed`` (never a bare traceback), rendered in a few lines.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from autograder.labs import LABS, SOURCE_DIR
from notebook_code import graded_answer_index
from paged_kv.feedback import CheckFailed

# lab: {pitfall title as the notebook's pitfall list writes it: [(text in the solution, replacement)]}
PITFALLS: Dict[str, Dict[str, List[Tuple[str, str]]]] = {
    "01-capacity-ledger": {
        "Forgetting V": [("2 * num_layers * num_kv_heads", "num_layers * num_kv_heads")],
        "Forgetting a factor": [("2 * num_layers * num_kv_heads * head_dim * dtype_bytes",
                                 "2 * num_kv_heads * head_dim * dtype_bytes")],
        "Bits instead of bytes": [("head_dim * dtype_bytes\n", "head_dim * dtype_bytes * 8\n")],
        "A float result from `/`": [("head_dim * dtype_bytes\n", "head_dim * (dtype_bytes * 8) / 8\n")],
    },
    "02-atomic-prefill": {
        "Floor instead of ceiling": [("needed = -(-req.seq_len // self.block_size)",
                                      "needed = max(1, req.seq_len // self.block_size)")],
        "Taking blocks one by one and raising half-way": [(
            """        if needed > len(self.free_blocks):
            raise RuntimeError(
                f"OOM: request {req.request_id} needs {needed} blocks, only {len(self.free_blocks)} are free")
        allocated = self.free_blocks[:needed]
        del self.free_blocks[:needed]
        req.block_table.extend(allocated)""",
            """        for _ in range(needed):
            if not self.free_blocks:
                raise RuntimeError("OOM: no free block left")
            req.block_table.append(self.free_blocks.pop(0))""")],
        "`>=` instead of `>`": [("if needed > len(self.free_blocks):", "if needed >= len(self.free_blocks):")],
        "Copying the free list but not shrinking it": [("        del self.free_blocks[:needed]\n", "")],
    },
    "03-decode-growth": {
        "`new_len % block_size == 1`": [("if self.blocks_needed(new_seq_len) > len(req.block_table):",
                                         "if new_seq_len % self.block_size == 1:")],
        "Updating `seq_len` before securing the block": [
            ("        new_seq_len = req.seq_len + 1\n", "        new_seq_len = req.seq_len + 1\n        req.seq_len = new_seq_len\n")],
        "Requiring a free block on every step": [
            ("        new_seq_len = req.seq_len + 1\n",
             "        if not self.free_blocks:\n            raise RuntimeError('OOM: no free block')\n"
             "        new_seq_len = req.seq_len + 1\n")],
    },
    "04-logical-reconstruction": {
        "Sorting the table, or reading `pool[:n]`": [("index = torch.tensor(table, dtype=torch.long)",
                                                       "index = torch.tensor(sorted(table), dtype=torch.long)")],
        "Forgetting the tail": [("return blocks.reshape(-1, self.head_dim)[: req.seq_len]",
                                 "return blocks.reshape(-1, self.head_dim)")],
        "Cutting one position too many": [("[: req.seq_len]", "[: req.seq_len - 1]")],
        "Returning a view": [("        index = torch.tensor(table, dtype=torch.long)\n",
                              "        if len(table) == 1:\n"
                              "            return self.physical_kv_cache[table[0]][: req.seq_len]\n"
                              "        index = torch.tensor(table, dtype=torch.long)\n")],
    },
}
READS_PHYSICAL_PREFIX = ("index = torch.tensor(table, dtype=torch.long)\n"
                         "        blocks = self.physical_kv_cache.index_select(0, index)",
                         "blocks = self.physical_kv_cache[: len(table)]")


def _cells(lab: str):
    nb = nbformat.read(SOURCE_DIR / lab / LABS[lab], as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"], nb


def run_visible_test(lab: str, edits: List[Tuple[str, str]]) -> None:
    """Run the lab with ``edits`` applied to its graded answer cell, then its visible test cell."""
    cells, _ = _cells(lab)
    answer = graded_answer_index(cells)
    visible = next(c for c in cells[answer:] if c.metadata.get("nbgrader", {}).get("grade"))
    source = cells[answer].source
    for old, new in edits:
        assert old in source, f"{lab}: {old!r} is not in the solution"
        source = source.replace(old, new)
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__notebook__"}
    for cell in cells[:answer]:
        if not cell.metadata.get("nbgrader", {}).get("grade"):
            exec(compile(transform(cell.source), "<setup>", "exec"), namespace)
    exec(compile(transform(source), "<answer>", "exec"), namespace)
    exec(compile(transform(visible.source), "<visible tests>", "exec"), namespace)


def pitfall_params():
    return [pytest.param(lab, title, edits, id=f"{lab[:2]}-{title}") for lab, pitfalls in PITFALLS.items()
            for title, edits in pitfalls.items()]


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


@pytest.mark.parametrize("lab", sorted(PITFALLS))
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
    assert len(listed) == len(PITFALLS[lab]), listed
    for title in PITFALLS[lab]:
        assert sum(title in shown for shown in listed) == 1, f"{lab} does not list {title!r} once: {listed}"
