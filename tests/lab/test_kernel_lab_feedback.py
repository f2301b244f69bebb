"""What lab 06 shows a student whose kernel is still the stub: one short block that names THEIR kernel
first and says what to do, never a course helper's name (check_kernel, launch) or a traceback."""

import re

import pytest

from paged_kv.kernels.triton_mode import triton_available

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from paged_kv.lab.feedback import TodoNotWritten, _todo_block  # noqa: E402
from paged_kv.lab.kernel_cases import paged_case  # noqa: E402
from paged_kv.lab.kernel_lab import run_gather  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@triton.jit
def gather_keys_kernel(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    # YOUR CODE HERE
    raise NotImplementedError()


def _not_written_yet():
    raise NotImplementedError()


@triton.jit
def kernel_calling_an_unwritten_helper(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    kv_head,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    _not_written_yet()


def grid(seq_len, block_size):
    return (triton.cdiv(seq_len, block_size),)


def shown(error: BaseException) -> list:
    """The lines the notebook hook prints for this error, colours removed."""
    return [ANSI.sub("", line) for line in "\n".join(_todo_block(error, error.__traceback__)).splitlines()]


@pytest.mark.parametrize(
    "kernel, name", [(gather_keys_kernel, "gather_keys_kernel"), (kernel_calling_an_unwritten_helper, "my_kernel")]
)
def test_an_unwritten_kernel_is_one_block_that_names_the_students_kernel_first(kernel, name):
    case = paged_case([5], block_size=4, head_dim=16)
    with pytest.raises(TodoNotWritten) as caught:  # the second kernel fails inside the launch's child process
        run_gather(kernel, grid, case, name=name)
    lines = shown(caught.value)
    assert lines[0].startswith(f"TODO not written yet {name} is still the stub"), lines
    assert len(lines) <= 3 and "TODO cell" in " ".join(lines) and "run this cell again" in " ".join(lines), lines
    assert not any(helper in " ".join(lines) for helper in ("check_kernel", "launch", "run_isolated")), lines


def test_a_helper_raising_for_the_student_leads_with_its_message():
    """A plain NotImplementedError raised inside the course package says what its message says, first."""
    from paged_kv.engine import scheduler

    base = scheduler.SchedulerBase.__new__(scheduler.SchedulerBase)
    with pytest.raises(NotImplementedError) as caught:
        base.schedule()
    lines = shown(caught.value)
    assert lines[0] == "TODO not written yet schedule() is the part you write", lines
    assert len(lines) == 3


@triton.jit
def scores_summed_over_the_wrong_axis(
    q_ptr,
    k_cache_ptr,
    block_table_ptr,
    scores_ptr,
    seq_len,
    kv_head,
    scale,
    stride_kb,
    stride_ks,
    stride_kh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    slots = tl.arange(0, BLOCK_SIZE)
    k = tl.load(k_cache_ptr + slots[:, None] * stride_ks + tl.arange(0, HEAD_DIM)[None, :])
    scores = tl.sum(k, axis=0)  # [HEAD_DIM], not one score per slot
    tl.store(scores_ptr + slots, scores)


def test_an_error_inside_a_kernel_names_the_line_of_the_students_kernel_that_raised_it():
    from paged_kv.lab.feedback import CheckFailed
    from paged_kv.lab.kernel_lab import run_scores

    case = paged_case([10], block_size=4, head_dim=16)
    with pytest.raises(CheckFailed) as caught:
        run_scores(scores_summed_over_the_wrong_axis, grid, case)
    failure = caught.value
    assert failure.problem.startswith("the kernel raised ValueError") and "incompatible dimensions" in failure.problem
    assert failure.hint.startswith("raised in scores_summed_over_the_wrong_axis, line "), failure.hint
    assert "tl.store(scores_ptr + slots, scores)" in failure.hint and "axis=" in failure.hint
    assert "visible test cell" not in failure.hint  # the advice reads right in the visible cell itself
    assert len(failure._render_traceback_()) == 2


@pytest.mark.parametrize("tile", [8, 48, 0, True, 64.0])
def test_fast_decode_args_refuse_a_tile_tl_dot_cannot_take(tile):
    from paged_kv.lab.kernel_cases import paged_case
    from paged_kv.lab.kernel_lab import fast_decode_args

    case = paged_case([5], block_size=4)
    with pytest.raises(ValueError, match="power of two >= 16"):
        fast_decode_args(case, case.q.clone(), tile)


def test_fast_decode_args_pad_the_group_to_sixteen_rows_and_pass_the_tile_last():
    from paged_kv.lab.kernel_cases import paged_case
    from paged_kv.lab.kernel_lab import decode_args, fast_decode_args

    case = paged_case([5], block_size=4, num_q_heads=6, num_kv_heads=2)
    step4, step5 = decode_args(case, case.q.clone()), fast_decode_args(case, case.q.clone(), 32)
    assert step4[-3] == 4 and step5[-5:] == [3, 16, 4, 16, 32]


@pytest.mark.parametrize(
    "dots, says",
    [
        (("16x128xf16 * 128x64xf16 -> 16x64xf32", "16x64xf16 * 64x128xf16 -> 16x128xf32"), None),
        (("16x128xbf16 * 128x64xbf16 -> 16x64xf32", "16x64xbf16 * 64x128xbf16 -> 16x128xf32"), None),
        (
            ("16x128xf16 * 128x64xf16 -> 16x64xf32", "16x64xf32 * 64x128xf32 -> 16x128xf32"),
            "the p . V tl.dot takes f32",
        ),
        (
            ("16x128xf32 * 128x64xf32 -> 16x64xf32", "16x64xf32 * 64x128xf32 -> 16x128xf32"),
            "the q . K tl.dot takes f32",
        ),
        (("16x128xf16 * 128x64xf16 -> 16x64xf16", "16x64xf16 * 64x128xf16 -> 16x128xf32"), "accumulates in 16 bits"),
        (("16x128xf16 * 128x64xf16 -> 16x64xf32",), "1 tl.dot in the compiled kernel"),
    ],
)
def test_the_fast_build_is_judged_on_its_dots_inputs_and_accumulators(dots, says):
    """Step 5's build judgement: two tl.dot, each on 16-bit tiles and accumulating in fp32 (a fake build)."""
    from types import SimpleNamespace

    from paged_kv.lab.feedback import CheckFailed
    from paged_kv.lab.kernel_lab import judge_fast_build

    build = SimpleNamespace(arch=90, dots=dots, spill_bytes=0, registers=128)
    if says is None:
        judge_fast_build(build, 16)
        return
    with pytest.raises(CheckFailed) as caught:
        judge_fast_build(build, 16)
    lines = ANSI.sub("", str(caught.value)).splitlines()
    assert says in lines[0] and len(lines) <= 4, lines
    if "takes f32" in says:
        assert "p.to(v.dtype)" in str(caught.value) and "fp16/bf16" in str(caught.value)
