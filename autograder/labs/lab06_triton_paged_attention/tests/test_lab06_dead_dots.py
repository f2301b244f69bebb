"""Issue 47: step 5's tensor-core rule counts the tl.dot whose products the graded launches take, not every tl.dot
of the sm_90 build. A dot behind a branch no launch takes, in a loop that runs no time, discarded, multiplied by 0,
cancelled, never stored or live in some rows only earns nothing (``dead_dots.DEAD_DOTS``); correct kernels whose dots
sit elsewhere keep full marks (``dead_dots.LIVE_VARIANTS``, and ``bugs.STEP_VARIANTS``' in test_lab06_graders). The
launches run in this process's interpreter, except those that start a compile box (a plain child process)."""

import ast
import inspect

import pytest

from paged_kv.kernels.triton_mode import triton_available

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

import torch  # noqa: E402

from autograder.labs.lab06_triton_paged_attention import checks as grader  # noqa: E402
from autograder.labs.lab06_triton_paged_attention import fast_dots  # noqa: E402
from autograder.labs.lab06_triton_paged_attention.tests import dead_dots  # noqa: E402
from autograder.labs.lab06_triton_paged_attention.tests.test_lab06_graders import failures  # noqa: E402
from autograder.labs.lab06_triton_paged_attention.tests.test_lab06_kernel_text import (  # noqa: E402
    _compile_box_for,
    cells_of_text,
)
from autograder.verdict import dot_probe  # noqa: E402
from paged_kv.kernels.triton_compile import CAST_REFUSED, compile_for_gpu, kernel_parameters, specialisation  # noqa: E402
from paged_kv.lab import kernel_lab as lab  # noqa: E402
from paged_kv.lab.feedback import CheckFailed  # noqa: E402

NONE = "no tl.dot carries q . K or p . V to the output"
SOME_ROWS = "does not take both products from tl.dot"
# What each kernel of the class is told (the reversed NaN cast is taken in the interpreter: the compile box refuses
# it, test_in_the_compile_box_...).
CAUGHT = {
    "dots_behind_a_branch_never_taken": NONE,
    "dots_in_a_loop_that_runs_no_time": NONE,
    "dots_discarded_by_where": NONE,
    "dots_on_zeros_multiplied_by_zero": NONE,
    "dots_never_stored": NONE,
    "dots_that_cancel_each_other": NONE,
    "dots_weighted_to_nothing": NONE,
    "q_k_by_dot_p_v_behind_a_branch_never_taken": "q . K comes from tl.dot but p . V does not",
    "dots_on_long_sequences_only": SOME_ROWS,
    "dots_on_the_first_kv_head_only": SOME_ROWS,
    "dots_where_a_nan_cast_to_int_is_not_negative": NONE,
}


def test_the_catalogue_names_every_kernel_of_the_class():
    assert set(CAUGHT) == set(dead_dots.HOWS) - {"broadcast_only", "dots_where_a_nan_cast_to_int_is_negative"}


def test_the_dead_branch_kernel_scores_no_more_than_its_executed_path_alone():
    """The issue's kernel: two fp16 tl.dot behind ``if seq_len < 0`` (a loaded value: both branches are built), the
    answer from per-row broadcasts and tl.sum. Its build passes every rule a build can judge (it earned the point
    before); now it fails the build check, so it scores at most the correct check's points, which the same kernel
    without the dead branch scores (its executed path alone: correct, no dot)."""
    dead = dead_dots.DEAD_DOTS["dots_behind_a_branch_never_taken"]
    alone = dead_dots.DEAD_DOTS["broadcast_only"]
    builds = lab.expect_fast_builds(dead, (16, 32, 256))
    assert all(len(build.dots) == 2 for build in builds.values())
    with pytest.raises(CheckFailed, match=NONE):
        grader.check_step5_fast_build(dead)
    assert set(failures("step5", alone, None)) == {"check_step5_fast_build"}


@pytest.mark.parametrize("how", list(CAUGHT))
def test_every_dot_whose_product_the_launches_do_not_take_earns_nothing(how):
    with pytest.raises(CheckFailed, match=CAUGHT[how].replace(".", r"\.")) as caught:
        fast_dots.expect_dots_carry_products(dead_dots.DEAD_DOTS[how], (16,))
    assert str(caught.value).startswith("[what the launches run") and len(str(caught.value).splitlines()) <= 6


@pytest.mark.parametrize("kernel", dead_dots.LIVE_VARIANTS, ids=lambda k: k.fn.__name__)
def test_correct_kernels_whose_dots_sit_elsewhere_keep_full_marks(kernel):
    """Products transposed, p . V through tl.dot's acc, the last tile's dots behind a runtime ``if``."""
    assert failures("step5", kernel, None) == {}


@pytest.mark.parametrize("block_size", [16, 32, 256])
def test_the_probe_tells_every_way_of_missing_a_product_apart_in_every_row(block_size):
    """Where both products come from counted dots each row is half the attention at half the scale; where neither,
    one or the other does, every row is at least 10 tolerances away from that (so no row can pass by chance)."""
    case = fast_dots.probe_case(block_size)
    half = dot_probe.PRODUCT_SCALE
    expected = fast_dots.counted_expected(case).double()
    plain = fast_dots.attention(case, case.scale)
    for other in (plain, half * plain, fast_dots.attention(case, case.scale * half)):
        excess = (other.double() - expected).abs() / (2e-3 + 2e-3 * expected.abs())
        assert float(excess.amax(dim=-1).min()) > 10


@pytest.mark.parametrize("block_size", [16, 32, 256])
def test_the_probe_launch_has_the_builds_own_specialisation(block_size):
    """The launch that judges the dots is built from the same specialisation as the build the other rules judge: the
    compile box builds it once, and the code that runs is the code that was judged."""
    kernel = dead_dots.LIVE_VARIANTS[0]
    params = kernel_parameters(kernel)
    case = fast_dots.probe_case(block_size)
    probe = lab.fast_decode_args(case, case.q.clone(), fast_dots.TILE)
    assert (
        specialisation(kernel, dict(zip(params, probe)))[0]
        == specialisation(kernel, dict(zip(params, lab.fast_build_args(block_size))))[0]
    )


def test_counted_text_rewrites_every_tl_dot_call_and_nothing_else():
    text = (
        "@triton.jit\ndef k(a, b, acc):\n    x = tl.dot(a, b)\n    y = triton.language.dot(a, b, acc, out_dtype=tl.float32)\n"
        "    z = tl.dot\n    w = tl.sum(a)\n"
    )
    calls = [n for n in ast.walk(ast.parse(dot_probe.counted_text(text))) if isinstance(n, ast.Call)]
    assert [ast.unparse(c.func) for c in calls] == [dot_probe.COUNTED_DOT, dot_probe.COUNTED_DOT, "tl.sum"]
    assert "z = tl.dot" in dot_probe.counted_text(text)  # an alias is not a call: its dots stay unscaled (no credit)
    assert dot_probe.counted_text("X = tl.constexpr(3)") == "X = tl.constexpr(3)"
    with pytest.raises(ValueError, match="three positive ints"):
        dot_probe.counted_dot_source([(16, 0, 64)])


def test_a_counted_kernel_still_compiles_for_sm_90():
    """The counted text is Triton too (on a GPU the compile box launches it natively)."""
    twin = dot_probe.counted_twin(dead_dots.LIVE_VARIANTS[1], fast_dots.COUNTED_SHAPES)
    build = compile_for_gpu(twin, dict(zip(kernel_parameters(twin), lab.fast_build_args(16))), resources=False)
    assert len(build.dots) == 2


def _box_text() -> str:
    """The dead-branch kernel, its NaN-cast twins and a correct kernel, as a student's cell would hold them."""
    wrapper = inspect.getsource(dead_dots.DEAD_DOTS["broadcast_only"].fn)
    text = inspect.getsource(dead_dots._step5.fn) + inspect.getsource(dead_dots._live_step5.fn)
    for how in ("dots_behind_a_branch_never_taken", *[h for h in dead_dots.HOWS if "nan_cast" in h]):
        text += "\n" + wrapper.replace("fast_broadcast_only", f"fast_{how}").replace(
            ", 0)\n", f", {dead_dots.HOWS[how]})\n"
        )
    live = inspect.getsource(dead_dots.LIVE_VARIANTS[0].fn)
    return text + "\n" + live.replace("fast_transposed_products", "fast_honest")


def test_in_the_compile_box_dead_dots_earn_nothing_and_a_nan_cast_to_int_is_refused():
    """Through the graded path: the submitted text, its dots counted in the compile box. The dead-branch kernel is
    told no dot carries its products; a correct kernel passes; a kernel that branches on an int made from NaN
    (-2**31 in the interpreter, undefined on a GPU) fails its launch whichever branch holds the dots."""
    builder = _compile_box_for(cells_of_text(_box_text()))
    case = fast_dots.probe_case(16, "cpu")

    def counted(name):
        return builder.launch(name, "run_fast_decode", case, tile=64, counted_dots=fast_dots.COUNTED_SHAPES)

    try:
        assert builder.refused == {}
        fast_dots.judge_counted(case, counted("fast_honest"), 16)
        with pytest.raises(CheckFailed, match=NONE):
            fast_dots.judge_counted(case, counted("fast_dots_behind_a_branch_never_taken"), 16)
        for how in [h for h in dead_dots.HOWS if "nan_cast" in h]:
            with pytest.raises(CheckFailed, match="NaN or outside that type's range"):
                counted(f"fast_{how}")
        plain = builder.launch("fast_honest", "run_fast_decode", case, tile=64)
        lab.expect_close("uncounted", plain, case.expected(), atol=2e-3, rtol=2e-3)
    finally:
        builder.close()
    assert "LLVM" in CAST_REFUSED and torch.isfinite(plain.float()).all()
