"""Lab 06's compile box, its pieces (``autograder.verdict.kernels``'s builder, ``autograder.agent.compile_box``): a
kernel built once is not built again for the next notebook with the same text, and the graded launch runs the
kernel defined from the submitted text, in the compile box, never in the student's kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_a_kernel_built_once_is_not_built_again_for_the_next_notebook_with_the_same_text(monkeypatch):
    """The trusted grader keeps a build's result per (kernels' text, arguments, arch): a later notebook with
    the same text starts no compile box; one with other text, or after a box that failed, does."""
    import ast

    from autograder.verdict import kernels
    from autograder.verdict.notebook import Cell

    monkeypatch.setattr(kernels, "_BUILT", {})
    text = "import triton\n@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n    pass\n"

    def builder(source, reply=None):
        cells = [Cell(0, "answer", source, tree=ast.parse(source))]
        started = []

        def start():
            started.append(1)
            raise RuntimeError("a compile box was started")

        made = kernels.KernelBuilder(cells, start)
        if reply is not None:
            made._request = lambda request, timeout=0: reply
        return made, started

    ok = {"ok": {"arch": 90, "num_warps": 4, "num_stages": 2, "shared_bytes": 0, "registers": 40, "spill_bytes": 0}}
    first, _ = builder(text, ok)
    assert first.build("k", [1]).registers == 40
    second, started = builder(text)
    assert second.build("k", [1]).registers == 40 and not started
    with pytest.raises(RuntimeError, match="compile box was started"):  # other text: its own box
        builder(text.replace("pass", "return"))[0].build("k", [1])
    failed, _ = builder(text.replace("N", "M"), {"error": "the compile box failed (timeout)"})
    with pytest.raises(AssertionError, match="compile box failed"):
        failed.build("k", [1])
    assert len(kernels._BUILT) == 1


GATHER_TEXT = '''
@triton.jit
def gather_keys_kernel(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head, stride_kb, stride_ks, stride_kh,
                       BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    i = tl.program_id(0)
    block = tl.load(block_table_ptr + i).to(tl.int64)
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    tokens = i * BLOCK_SIZE + slots
    live = tokens < seq_len
    keys = tl.load(k_cache_ptr + block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
                   mask=live[:, None], other=0.0)
    tl.store(out_ptr + tokens[:, None] * HEAD_DIM + dims[None, :], keys, mask=live[:, None])
'''


def compile_box_for_cells(cells):
    """A KernelBuilder over ``cells`` whose compile box is a plain child process (no sandbox: the pieces only)."""
    import subprocess
    import sys

    from autograder.verdict import kernels

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), TRITON_INTERPRET="1")

    def start():
        return subprocess.Popen(
            [sys.executable, "-m", "autograder.agent.compile_box"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    return kernels.KernelBuilder(cells, start)


def _compile_box_for(text: str):
    """``compile_box_for_cells`` over one answer cell holding ``text``."""
    import ast

    from autograder.verdict.notebook import Cell

    return compile_box_for_cells([Cell(0, "answer", text, tree=ast.parse(text))])


def test_lab06_launches_the_submitted_kernel_in_the_compile_box_not_in_the_students_kernel():
    """The graded launch runs the kernel defined from the submitted text, with the trusted launcher, on the case
    rebuilt from its recipe: the output comes back as data; a stub is unwritten; a kernel that writes past its
    output fails with the launcher's message; a case that no course maker made is refused."""
    import dataclasses

    import torch

    from autograder.labs.lab06_triton_paged_attention import checks as lab06_kernels
    from paged_kv.lab.feedback import TodoNotWritten

    case = lab06_kernels.paged_case([9, 3], block_size=4, num_kv_heads=2, seed=3)
    boxes = {
        "right": GATHER_TEXT,
        "stub": GATHER_TEXT.replace("    i = tl.program_id(0)", "    raise NotImplementedError()"),
        "unmasked store": GATHER_TEXT.replace(", keys, mask=live[:, None])", ", keys)"),
    }
    boxes = {label: _compile_box_for(text) for label, text in boxes.items()}
    try:
        got = boxes["right"].launch("gather_keys_kernel", "run_gather", case, (3,), seq=0, kv_head=1)
        assert torch.equal(got, case.expected_keys(0, 1))
        with pytest.raises(TodoNotWritten, match="still the stub"):
            boxes["stub"].launch("gather_keys_kernel", "run_gather", case, (3,), seq=0, kv_head=1)
        with pytest.raises(AssertionError, match="wrote outside its output"):
            boxes["unmasked store"].launch("gather_keys_kernel", "run_gather", case, (3,), seq=0, kv_head=1)
        forged = dataclasses.replace(case, _pkv_recipe=("paged_kv.lab.kernel_lab.launch", (), {}))
        with pytest.raises(AssertionError, match="a case must be made by one of"):
            boxes["right"].launch("gather_keys_kernel", "run_gather", forged, (3,), seq=0, kv_head=1)
    finally:
        for box in boxes.values():
            box.close()
