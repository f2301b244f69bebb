"""Lab 06 grader: the paged-attention kernels, step by step (Triton's interpreter on CPU, native on a GPU).

The student's ``@triton.jit`` kernels are built and launched from their submitted text in the compile box
(``autograder.verdict.kernels``), a fresh process the notebook's code never ran in: the lab's trusted
launchers (``paged_kv.lab.kernel_lab``) run there, on each case rebuilt from its recipe, with the grid the
student's grid function returns from plain ints (checked here), and the output comes back as data. So all
the work must happen inside a kernel that compiles for an sm_90 GPU (offline), and nothing the notebook
replaces (its launchers, its ``triton``) is on the path. The expected values are computed here, from this
process's copy of the same case. Cases: MHA and GQA, ragged lengths, one-token sequences, exact multiples of
the block size, large logits, scattered non-monotonic tables, garbage padding ids, poisoned memory (NaN in
unused tail slots and unlisted blocks), and a pool past 2**32 elements. Tolerances accept float32
accumulation in any order.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch

from paged_kv import gather_kv, paged_decode_attention_ref
from paged_kv.lab import kernel_lab as lab
from paged_kv.lab import kernel_cases
from paged_kv.kernels import triton_kernels
from paged_kv.lab.kernel_cases import PagedCase
from paged_kv.kernels.triton_attention import paged_decode_attention

from autograder.labs.checking import N_, CheckFailed, _, grades, is_remote, student_side
from autograder.labs.lab06_triton_paged_attention import fast_dots
from autograder.labs.lab06_triton_paged_attention.launchers import (  # (the graded cells' names: TRUSTED_NAMES)
    TRUSTED_NAMES,
    far_pool_case,
    no_room,
    paged_case,
    require_gpu_build,
    run_attend,
    run_decode,
    run_fast_decode,
    run_gather,
    run_scores,
)


def _launcher(kernel, name: str):
    """``paged_kv.lab.kernel_lab.<name>`` on the side where the kernel lives (only ``check_kernel``: its early,
    readable 'still the stub' message; the compile box checks the kernel it runs again)."""
    return student_side(kernel, f"paged_kv.lab.kernel_lab.{name}")


PACKAGE_KERNELS = (triton_kernels.paged_decode_kernel, triton_kernels.merge_splits_kernel, paged_decode_attention)
FP32 = dict(atol=2e-5, rtol=2e-5)
FP16 = dict(atol=2e-3, rtol=2e-3)
INT64_HINT = N_(
    "block ids are int32, and block_id * stride overflows past 2**31 elements: convert the block id "
    "with .to(tl.int64) before multiplying (vLLM #47671, #50427), and use the strides given"
)
_built: Dict[Tuple[int, str], str] = {}

# Where the lab teaches what a hint is about, where it is not the step's own section (the insight report's
# "taught in"): a fragment of the hint, as the visible tests and these checks give it, and its section. The
# first match wins. Int64 block ids, and the tail and padding a kernel must never use, are step 1's ideas (§ 2);
# float32 products step 2's (§ 3); the running max started at -inf step 3's (§ 4), and later steps meet them all
# again. Every other hint is taught where its step is.
TEACHES = {
    "needs int64": "§ 2",
    "block_id * stride overflows past 2**31": "§ 2",
    "never follow a table entry past the sequence's last block": "§ 2",
    "q . k summed in fp16 loses digits": "§ 3",
    "fp16 at head dim 128": "§ 3",
    "start the running max at -inf": "§ 4",
}


def _hint(case: PagedCase, hint: str) -> str:
    """The hint a failure on ``case`` shows: the int64 one for the pool past 2**32 elements, else ``hint`` (a text
    of these checks, marked where it is written), in the language spoken."""
    return _(INT64_HINT) if case.label.startswith("pool past") else _(hint)


def _tolerance(case: PagedCase) -> dict:
    return FP16 if case.q.dtype == torch.float16 else FP32


def _gpu_build(kernel, args, name: str) -> None:
    """Compile once per kernel version and step; a failure fails every check of the step."""
    _launcher(kernel, "check_kernel")(kernel, name)
    if is_remote(kernel):
        require_gpu_build(kernel, args, name)  # the compile box keeps its results per kernel text
        return
    key = (id(kernel.fn.__code__), name)
    if key not in _built:
        try:
            lab.require_gpu_build(kernel, args, name)
            _built[key] = ""
        except CheckFailed as error:
            _built[key] = error
    if _built[key]:
        raise _built[key]


def _case(kernel, *args, **kwargs) -> PagedCase:
    """A test case: on this process's CPU when the kernel lives in the grading kernel, else where it runs."""
    return (paged_case if is_remote(kernel) else kernel_cases.paged_case)(*args, **kwargs)


NEGATIVE_HINT = N_(
    "here a query head has every score far below 0 (all under -240): start the running max at -inf, "
    "not 0, so that exp(s - m) is 1 at the largest score instead of underflowing to 0 for all of them"
)


def _negative_logits(kernel, dtype=torch.float32) -> PagedCase:
    """Logits in the hundreds where sequence 0's query heads 0 and 3 have every score far below 0 (at most -241 and
    -343): a running max started at 0 makes exp(s - m) underflow to 0 there (0 / 0 = NaN)."""
    return _case(
        kernel,
        [2, 9],
        block_size=4,
        num_q_heads=4,
        num_kv_heads=2,
        dtype=dtype,
        logit_scale=300.0,
        seed=74,
        label=_("large negative logits"),
    )


def _far_pool(kernel, **kwargs) -> PagedCase:
    """The pool past 2**32 elements. Where it cannot be made (a GPU without ~13 GB free) the check fails
    with that reason: a check that cannot run never passes."""
    try:
        return (far_pool_case if is_remote(kernel) else kernel_cases.far_pool_case)((21, 9), **kwargs)
    except MemoryError as error:
        raise no_room(error) from None


# ----------------------------------------------------------------------------- step 1: gather


def _gather_case(kernel, grid, case: PagedCase, seq: int, kv_head: int) -> None:
    label = _(f"{case.describe()}; seq {seq}, table {case.table(seq)}, kv_head {kv_head}")
    got = run_gather(kernel, grid, case, seq, kv_head)
    lab.expect_close(
        label,
        got,
        case.expected_keys(seq, kv_head),
        atol=0,
        rtol=0,
        hint=_hint(
            case,
            _(
                "row t comes from block_table[t // BLOCK_SIZE], slot t % BLOCK_SIZE, of this "
                "KV head; mask rows t >= seq_len"
            ),
        ),
    )


@grades(gather_kv, *PACKAGE_KERNELS)
def check_step1_gather(kernel, grid: Callable) -> None:
    """Keys of one sequence through its table: block sizes 1-16, one token, exact multiples, garbage padding,
    poisoned memory, and a pool past 2**32 elements (int64 offsets)."""
    first = _case(kernel, [9, 3], block_size=4, num_kv_heads=2)
    _gpu_build(kernel, lab.gather_args(first, torch.empty(9, 16), 0, 1), "gather_keys_kernel")
    _gather_case(kernel, grid, first, 0, 1)
    for seed, (lens, block_size, head_dim) in enumerate(
        [([1, 6], 2, 8), ([16, 5], 8, 16), ([7], 1, 16), ([33, 40], 16, 32)]
    ):
        case = _case(kernel, lens, block_size=block_size, head_dim=head_dim, num_kv_heads=2, seed=seed + 1)
        _gather_case(kernel, grid, case, len(lens) - 1, seed % 2)
    poisoned = _case(kernel, [6, 12, 1], block_size=4, num_kv_heads=2, poison=True, seed=7)
    for seq in range(3):
        _gather_case(kernel, grid, poisoned, seq, 1)
    _gather_case(kernel, grid, _far_pool(kernel, block_size=8, num_kv_heads=2), 0, 1)


# ----------------------------------------------------------------------------- step 2: scores


def _scores_case(kernel, grid, case: PagedCase, seq: int, q_head: int) -> None:
    label = _(f"{case.describe()}; seq {seq}, table {case.table(seq)}, q_head {q_head}")
    got = run_scores(kernel, grid, case, seq, q_head)
    lab.expect_close(
        label,
        got,
        case.expected_scores(seq, q_head),
        **FP32,
        hint=_hint(
            case,
            _(
                "scores[t] = scale * dot(q, k_t) for t < seq_len, and -inf for the tail slots "
                "of the last block (they hold stale data)"
            ),
        ),
    )


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step2_scores(kernel, grid: Callable) -> None:
    """Scores of one query head: tails masked to -inf, GQA head mapping, poisoned tails and padding, and a
    pool past 2**32 elements (int64 offsets)."""
    first = _case(kernel, [10, 4], block_size=4, num_q_heads=4, num_kv_heads=2)
    _gpu_build(kernel, lab.scores_args(first, torch.empty(12), 0, 3), "scores_kernel")
    _scores_case(kernel, grid, first, 0, 3)
    for seed, (lens, block_size) in enumerate([([1], 4), ([16, 8], 8), ([5, 19], 2), ([3, 17], 16)]):
        case = _case(kernel, lens, block_size=block_size, num_q_heads=4, num_kv_heads=2, seed=seed + 1)
        _scores_case(kernel, grid, case, len(lens) - 1, (seed * 3) % 4)
    poisoned = _case(kernel, [7, 12, 1], block_size=4, num_q_heads=2, num_kv_heads=1, poison=True, seed=9)
    for seq in range(3):
        _scores_case(kernel, grid, poisoned, seq, seq % 2)
    _scores_case(kernel, grid, _far_pool(kernel, block_size=8), 0, 1)


# ----------------------------------------------------------------------------- step 3: online softmax


def _attend_case(kernel, case: PagedCase, seq: int, q_head: int, case_hint: str = "") -> None:
    label = _(f"{case.describe()}; seq {seq}, q_head {q_head}")
    got = run_attend(kernel, case, seq, q_head)
    hint = _(
        "keep a running max m and sum l; when m grows, rescale l and the accumulator by exp(m_old - m_new); "
        "divide by l once at the end"
    )
    if case.q.dtype == torch.float16 and case.q.shape[-1] >= 64:
        hint = _(
            f"fp16 at head dim 128: convert q and k to fp32 (.to(tl.float32)) before the dot product and "
            f"accumulate in fp32; {hint}"
        )
    lab.expect_close(
        label, got, case.expected_head(seq, q_head), **_tolerance(case), hint=_hint(case, case_hint or hint)
    )


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step3_online_softmax(kernel) -> None:
    """One query head over many blocks: long sequences, one token, large logits (fp32 and fp16), a head whose
    scores are all far below 0, fp16 at head dim 128, poison, and a pool past 2**32 elements (int64 offsets)."""
    first = _case(kernel, [13], block_size=4)
    _gpu_build(kernel, lab.attend_args(first, torch.empty(16), 0, 0), "attend_kernel")
    _attend_case(kernel, first, 0, 1)
    for seed, (lens, block_size, dtype, logits) in enumerate(
        [
            ([1, 40], 4, torch.float32, 1.0),
            ([64], 16, torch.float32, 1.0),
            ([23], 2, torch.float32, 300.0),
            ([30], 4, torch.float16, 40.0),
            ([8, 9], 8, torch.float16, 1.0),
        ]
    ):
        case = _case(
            kernel,
            lens,
            block_size=block_size,
            dtype=dtype,
            logit_scale=logits,
            seed=seed + 1,
            label=_("large logits") if logits > 1 else None,
        )
        for seq in range(len(lens)):
            _attend_case(kernel, case, seq, seq % 2)
    poisoned = _case(kernel, [6, 11], block_size=4, poison=True, seed=11)
    _attend_case(kernel, poisoned, 0, 0)
    _attend_case(kernel, poisoned, 1, 1)
    negative = _negative_logits(kernel)
    _attend_case(kernel, negative, 0, 3, NEGATIVE_HINT)
    _attend_case(kernel, negative, 1, 1)
    # Llama-sized heads in fp16. With logits of a few units q . k summed in fp16 stays within the tolerance on most
    # heads (0.4x on this one); with larger logits it is off by 3 to 4 times the tolerance on heads 0 and 2.
    realistic = _case(
        kernel,
        [48],
        block_size=16,
        head_dim=128,
        dtype=torch.float16,
        logit_scale=4.0,
        seed=12,
        label=_("fp16, head dim 128"),
    )
    _attend_case(kernel, realistic, 0, 1)
    larger = _case(
        kernel,
        [48],
        block_size=16,
        num_q_heads=8,
        head_dim=128,
        dtype=torch.float16,
        logit_scale=8.0,
        seed=25,
        label=_("fp16, head dim 128, large logits"),
    )
    _attend_case(kernel, larger, 0, 0)
    _attend_case(kernel, larger, 0, 2)
    _attend_case(kernel, _far_pool(kernel, block_size=8), 0, 1)


# ----------------------------------------------------------------------------- step 4: the decode kernel


def _decode_case(kernel, grid, case: PagedCase, hint: str) -> None:
    got = run_decode(kernel, grid, case)
    lab.expect_close(case.describe(), got, case.expected(), **_tolerance(case), hint=_hint(case, hint))


def _decode_build(kernel) -> None:
    case = _case(kernel, [5, 9], num_q_heads=4, num_kv_heads=2)
    _gpu_build(kernel, lab.decode_args(case, case.q.clone()), "paged_decode_kernel")


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step4_batch(kernel, grid: Callable) -> None:
    """MHA, GQA (groups 2, 3, 4) and MQA; ragged lengths with 1-token sequences and exact multiples; fp16,
    also at head dim 128 with realistic logits, and with GROUP 8 and large logits (q . k summed in fp16 fails);
    query heads whose scores are all far below 0."""
    _decode_build(kernel)
    hint = _(
        "program (s, h) reads KV head h for query heads h*GROUP .. h*GROUP+GROUP-1; each sequence has its "
        "own length and table row (stride_bt)"
    )
    for seed, (lens, heads, block_size, dtype, logits) in enumerate(
        [
            ([5, 1, 12, 8], (4, 4), 4, torch.float32, 1.0),
            ([16, 3, 9], (8, 2), 8, torch.float32, 1.0),
            ([7, 20], (6, 2), 4, torch.float32, 1.0),
            ([1, 2, 30], (4, 1), 2, torch.float32, 1.0),
            ([33, 16], (4, 2), 16, torch.float16, 1.0),
            ([18, 6], (4, 2), 4, torch.float32, 200.0),
        ]
    ):
        case = _case(
            kernel,
            lens,
            block_size=block_size,
            num_q_heads=heads[0],
            num_kv_heads=heads[1],
            dtype=dtype,
            logit_scale=logits,
            seed=seed,
            label=_("large logits") if logits > 1 else None,
        )
        _decode_case(kernel, grid, case, hint)
    _decode_case(kernel, grid, _negative_logits(kernel), NEGATIVE_HINT)
    # Llama-sized heads in fp16. With 4 query heads and logits of a few units, q . k summed in fp16 stays within the
    # tolerance (about half of it); with GROUP 8 and larger logits it is off by 3 to 8 times the tolerance whatever
    # the seed, while a correct kernel's only error is fp16 rounding of its output (a quarter of it at most).
    hint = _(
        "fp16 at head dim 128: a sum of 128 products in fp16 keeps about three digits; convert q and k to fp32 "
        "before the dot product and accumulate in fp32"
    )
    for seed, (lens, heads, logits, label) in enumerate(
        [
            ([40, 17], (4, 2), 4.0, N_("fp16, head dim 128")),
            ([64, 9], (16, 2), 12.0, N_("fp16, head dim 128, GROUP 8, large logits")),
        ]
    ):
        case = _case(
            kernel,
            lens,
            block_size=16,
            num_q_heads=heads[0],
            num_kv_heads=heads[1],
            head_dim=128,
            dtype=torch.float16,
            logit_scale=logits,
            seed=(13, 16)[seed],
            label=_(label),
        )
        _decode_case(kernel, grid, case, hint)


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step4_poisoned_memory(kernel, grid: Callable) -> None:
    """NaN in unused tail slots and in blocks no table lists; padding entries hold garbage ids."""
    _decode_build(kernel)
    hint = _(
        "only tokens t < seq_len may touch the result: mask the K and V loads (other=0) and the scores "
        "(-inf), and never follow a table entry past the sequence's last block (it is padding)"
    )
    for seed, (lens, heads, block_size) in enumerate(
        [([5, 12, 1, 8], (4, 2), 4), ([9, 3], (2, 1), 8), ([15, 17, 2], (6, 3), 4)]
    ):
        case = _case(
            kernel,
            lens,
            block_size=block_size,
            num_q_heads=heads[0],
            num_kv_heads=heads[1],
            poison=True,
            extra_columns=2,
            seed=20 + seed,
        )
        _decode_case(kernel, grid, case, hint)


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step4_int64_offsets(kernel, grid: Callable) -> None:
    """A pool whose blocks sit past 2**32 elements: block id x stride must be computed in int64."""
    _decode_build(kernel)
    case = _far_pool(kernel, block_size=8, num_q_heads=4, num_kv_heads=2)
    _decode_case(kernel, grid, case, hint=INT64_HINT)


# ----------------------------------------------------------------------------- step 5: make it fast

FAST_HINT = N_(
    "walk TILE tokens per iteration (pos = start + tl.arange(0, TILE)); each token's block is "
    "table[pos // BLOCK_SIZE] and its slot pos % BLOCK_SIZE; mask the tokens past seq_len and, on "
    "store, the rows past GROUP"
)


def _fast_case(kernel, case: PagedCase, tile: int, hint: str) -> None:
    got = run_fast_decode(kernel, case, tile)
    lab.expect_close(_(f"{case.describe()}; TILE {tile}"), got, case.expected(), **FP16, hint=_hint(case, hint))


def _fast_buildable(kernel) -> None:
    case = _case(kernel, [5, 9], num_q_heads=4, num_kv_heads=2, dtype=torch.float16)
    _gpu_build(kernel, lab.fast_decode_args(case, case.q.clone(), 16), "fast_decode_kernel")


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step5_correct(kernel) -> None:
    """fp16 (tl.dot's inputs) throughout: block sizes 1 to 256 with TILE smaller than, equal to and larger than
    a block; MQA, MHA and GQA groups 2 to 8 (padded to 16 rows); ragged lengths and one-token sequences;
    poisoned memory with garbage padding ids; query heads whose scores are all far below 0; a Llama-sized head;
    a pool past 2**32 elements; a 128k-token context whose softmax sum and unnormalised output pass fp16's range."""
    _fast_buildable(kernel)
    for seed, (lens, heads, block_size, tile, poison) in enumerate(
        [
            ([5, 1, 40, 16], (8, 1), 1, 16, False),  # MQA, one token per block
            ([37, 3, 20], (6, 2), 3, 16, True),  # a block size that is not a power of two
            ([33, 16, 1], (4, 2), 16, 16, False),  # TILE == BLOCK_SIZE
            ([70, 9], (8, 2), 16, 64, True),  # TILE > BLOCK_SIZE: one tile spans four blocks
            ([300, 45], (4, 4), 256, 32, False),  # TILE < BLOCK_SIZE: eight tiles per block (MHA)
            ([129, 64, 2], (16, 2), 64, 32, True),
        ]
    ):  # GROUP 8
        case = _case(
            kernel,
            lens,
            block_size=block_size,
            num_q_heads=heads[0],
            num_kv_heads=heads[1],
            dtype=torch.float16,
            poison=poison,
            extra_columns=2 if poison else 0,
            seed=40 + seed,
        )
        _fast_case(kernel, case, tile, FAST_HINT)
    _fast_case(kernel, _negative_logits(kernel, torch.float16), 16, NEGATIVE_HINT)
    case = _case(
        kernel,
        [40, 17],
        block_size=16,
        num_q_heads=8,
        num_kv_heads=2,
        head_dim=128,
        dtype=torch.float16,
        logit_scale=4.0,
        seed=50,
        label=_("fp16, head dim 128"),
    )
    _fast_case(
        kernel,
        case,
        64,
        _(
            "accumulate in fp32: keep tl.dot's default out_dtype (float32) and keep m, l and "
            "acc in float32; cast p to V's dtype only for the second tl.dot"
        ),
    )
    case = _far_pool(kernel, block_size=8, num_q_heads=4, num_kv_heads=2, dtype=torch.float16)
    _fast_case(kernel, case, 16, INT64_HINT)
    # Llama 3.1's whole window with scores close together and values around 1: the softmax's running sum l and the
    # unnormalised output acc both reach about 105000, past fp16's largest value (65504), so a 16-bit l or a 16-bit
    # accumulator (each tile's tl.dot cast back to fp16) overflows; heads of 16 and TILE 512 keep it to 256
    # iterations (about 2 s in the interpreter).
    case = _case(
        kernel,
        [131072, 5],
        block_size=16,
        num_q_heads=16,
        num_kv_heads=1,
        head_dim=16,
        dtype=torch.float16,
        logit_scale=0.05,
        seed=60,
        value_offset=1.0,
        label=_("a 128k-token context, scores close together"),
    )
    _fast_case(
        kernel,
        case,
        512,
        _(
            "when the scores are close together the running sum l grows to about the number of "
            "tokens, and acc to that times the values: keep m, l and acc in fp32 (fp16 stops at "
            "65504); cast only p, to V's dtype, for the second tl.dot"
        ),
    )


def expect_fast_builds(kernel, block_sizes=(16, 32), name: str = "fast_decode_kernel") -> dict:
    """The lab's ``expect_fast_builds``, each build made from the submitted text when the kernel lives in the box."""
    return lab.expect_fast_builds(kernel, block_sizes, name, build_with=require_gpu_build)


@grades(paged_decode_attention_ref, *PACKAGE_KERNELS)
def check_step5_fast_build(kernel) -> None:
    """The sm_90 build of a Llama-3.1-8B layer's decode (fp16, TILE 64) at block sizes 16, 32 and 256: both
    dot products on ``tl.dot`` taking 16-bit tiles and accumulating in fp32, the same tiles at every block size,
    no register spilled; and, launched at each of those specialisations, both products come from those dots in
    every row (``fast_dots``: a dot no launch runs, or whose product never reaches the output, earns nothing).
    (A kernel whose tiles follow the block size fails at 32, before the slow build at 256.)"""
    _launcher(kernel, "check_kernel")(kernel, "fast_decode_kernel")
    expect_fast_builds(kernel, (16, 32, 256))
    fast_dots.expect_dots_carry_products(kernel, (16, 32, 256))


TRUSTED_NAMES["expect_fast_builds"] = expect_fast_builds
