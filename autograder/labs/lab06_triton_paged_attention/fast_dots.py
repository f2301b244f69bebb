"""Step 5's tensor-core rule, judged on what the graded launches compute (issue 47).

The sm_90 build holds every ``tl.dot`` of the kernel's text, those behind a branch no launch takes included, so
its dots alone cannot say that the products run on the tensor cores: a kernel could hold two fp16 dots behind
``if seq_len < 0`` and compute its answer with a broadcast and ``tl.sum``. Here step 5's kernel is launched at
the build's own specialisation (a Llama-3.1-8B layer's GROUP 4, head dim 128, fp16, TILE 64, at each block size
the build is judged at) with every ``tl.dot`` of its text counted (``autograder.verdict.dot_probe``): a counted
dot's product is halved when it is a tensor-core dot of the lab's tiles (16-bit inputs, fp32 accumulation,
``[GROUP_PAD, HEAD_DIM] x [HEAD_DIM, TILE]``, ``[GROUP_PAD, TILE] x [TILE, HEAD_DIM]`` or their transposes).
A kernel whose q . K and p . V both come from such dots then stores, in every row, half the attention at half the
scale; a kernel whose products come from anywhere else does not, whatever dots its text holds. "What the graded
launches execute" is that launch: every row of every sequence (lengths 3, 37, 64 and 130: a tile cut short, one
exact tile, one spanning several blocks) and every KV head must take both products from counted dots. Correct
kernels this refuses, by design: one that takes the softmax's running sum from a ``tl.dot`` too (``tl.dot(p,
ones)``: it is halved with the rest; the lab sums ``p`` with ``tl.sum``), one that splits a product over smaller
dots (the head dim in two halves: not the lab's tiles).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from autograder.labs.checking import N_, _, is_remote
from autograder.verdict import dot_probe
from paged_kv import paged_decode_attention_ref
from paged_kv.lab import kernel_cases
from paged_kv.lab import kernel_lab as lab
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.kernel_cases import PagedCase

TILE = 64
GROUP_PAD = 16  # the Llama layer's GROUP 4, padded to tl.dot's smallest M
HEAD_DIM = lab.LLAMA_LAYER["head_dim"]
# (M, K, N) of the products a counted dot may be: q . K^T, K . q^T, p . V and V^T . p^T.
COUNTED_SHAPES = (
    (GROUP_PAD, HEAD_DIM, TILE),
    (TILE, HEAD_DIM, GROUP_PAD),
    (GROUP_PAD, TILE, HEAD_DIM),
    (HEAD_DIM, TILE, GROUP_PAD),
)
PROBE_LENS = (3, 37, 64, 130)
# GROUP 4 and head dim 128 as the build's Llama layer; two padding columns keep the table's row stride neither 1
# nor a multiple of 16 at every block size, so the launch has the build's own specialisation.
PROBE = dict(num_q_heads=8, num_kv_heads=2, head_dim=HEAD_DIM, dtype=torch.float16, logit_scale=2.0, extra_columns=2)
FP16 = dict(atol=2e-3, rtol=2e-3)
HINT = N_(
    "compute scores = tl.dot(q, tl.trans(k)) and acc += tl.dot(p.to(v.dtype), v) in the loop every launch runs; a "
    "tl.dot behind a branch no launch takes, in a loop that runs no time, discarded by tl.where, multiplied by 0 "
    "or never stored earns nothing"
)


def probe_case(block_size: int, device: str = "") -> PagedCase:
    """The launch that judges the tensor-core rule at ``block_size`` (the build's specialisation, TILE 64)."""
    return kernel_cases.paged_case(
        PROBE_LENS, block_size=block_size, seed=71, **PROBE, **({"device": device} if device else {})
    )


def attention(case: PagedCase, scale: float) -> torch.Tensor:
    """The attention of ``case`` at ``scale`` in float32 (``[num_seqs, num_q_heads, head_dim]``)."""
    k, v, tables = case.clean
    return paged_decode_attention_ref(case.q.float().cpu(), k.float(), v.float(), tables, case.seq_lens.cpu(), scale)


def counted_expected(case: PagedCase) -> torch.Tensor:
    """What a kernel whose q . K and p . V both come from counted dots stores: each product halved, so half the
    attention at half the scale."""
    half = dot_probe.PRODUCT_SCALE
    return (half * attention(case, case.scale * half)).to(case.q.dtype)


def _close(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Per row (sequence, query head): whether every element is within fp16's tolerance of ``expected``."""
    g, e = got.double(), expected.double()
    return ((g - e).abs() <= FP16["atol"] + FP16["rtol"] * e.abs()).all(dim=-1)


def judge_counted(case: PagedCase, got, block_size: int) -> None:
    """A ``CheckFailed`` unless ``got`` (the counted launch's output) is ``counted_expected`` in every row."""
    got = torch.as_tensor(got).detach().cpu()
    expected = counted_expected(case)
    if got.shape != expected.shape:
        raise CheckFailed(_label(block_size), _("the launch returned a tensor of the wrong shape"), hint=_(HINT))
    rows = _close(got, expected)
    if bool(rows.all()):
        return
    half = dot_probe.PRODUCT_SCALE
    plain = attention(case, case.scale)
    unchanged = {
        N_(
            "no tl.dot carries q . K or p . V to the output: with every tl.dot's product halved, it did not change"
        ): plain,
        N_(
            "p . V comes from tl.dot but q . K does not (with every tl.dot's product halved, the softmax did not change)"
        ): (half * plain),
        N_("q . K comes from tl.dot but p . V does not (with every tl.dot's product halved, p . V did not change)"): (
            attention(case, case.scale * half)
        ),
    }
    for problem, alternative in unchanged.items():
        if bool(_close(got, alternative.to(got.dtype)).all()):
            raise CheckFailed(_label(block_size), _(problem), hint=_(HINT))
    seq, head = (int(i) for i in (~rows).nonzero()[0])
    raise CheckFailed(
        _label(block_size),
        _(
            f"sequence {seq} (length {PROBE_LENS[seq]}), query head {head} does not take both products from tl.dot on "
            f"16-bit [{GROUP_PAD}, {HEAD_DIM}] x [{HEAD_DIM}, {TILE}] and [{GROUP_PAD}, {TILE}] x [{TILE}, {HEAD_DIM}] "
            "tiles accumulating in fp32 (if check_step5_correct fails, a wrong answer cannot show where its products "
            "come from: fix it first)"
        ),
        hint=_(HINT),
    )


def _label(block_size: int) -> str:
    group = PROBE["num_q_heads"] // PROBE["num_kv_heads"]
    return _(f"what the launches run: GROUP {group}, head dim {HEAD_DIM}, fp16, block size {block_size}, TILE {TILE}")


def expect_dots_carry_products(
    kernel, block_sizes: Sequence[int] = (16, 32, 256), name: str = "fast_decode_kernel"
) -> None:
    """At each block size, step 5's kernel launched with its dots counted must take both products from them."""
    run = _counted_launch(kernel, name)
    for block_size in block_sizes:
        case = probe_case(block_size, "cpu" if is_remote(kernel) else "")
        judge_counted(case, run(case), block_size)


def _counted_launch(kernel, name: str) -> Callable[[PagedCase], torch.Tensor]:
    """The launch with counted dots: in the compile box, from the submitted text, for a kernel of the grading
    kernel; here, from the kernel's own source, for one of this process (a test's, a catalogue's)."""
    if is_remote(kernel):
        from autograder.verdict.cells import CONTEXT

        def in_box(case: PagedCase) -> torch.Tensor:
            return CONTEXT.kernels().launch(name, "run_fast_decode", case, tile=TILE, counted_dots=COUNTED_SHAPES)

        return in_box
    twin = dot_probe.counted_twin(kernel, COUNTED_SHAPES)
    return lambda case: lab.run_fast_decode(twin, case, TILE, name)
