"""Lab 06's graders grade: the solution's kernels get full marks, the untouched release zero on every
check, each catalogued kernel bug fails the check of its step (with a readable first line), correct
kernels written differently pass, and kernels that borrow the package's get nothing."""

import inspect

import pytest

from paged_kv.kernels.triton_mode import triton_available

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

from autograder.labs.lab06_triton_paged_attention import checks as grader  # noqa: E402
from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR  # noqa: E402
from autograder.labs.lab06_triton_paged_attention.tests import bugs as catalogue  # noqa: E402
from notebook_code import namespace_after_answer  # noqa: E402

LAB = "06-triton-paged-attention"
# step: (checks, the notebook's kernel name, its grid function name or None)
STEPS = {
    "step1": (["check_step1_gather"], "gather_keys_kernel", "gather_keys_grid"),
    "step2": (["check_step2_scores"], "scores_kernel", "scores_grid"),
    "step3": (["check_step3_online_softmax"], "attend_kernel", None),
    "step4": (
        ["check_step4_batch", "check_step4_poisoned_memory", "check_step4_int64_offsets"],
        "paged_decode_kernel",
        "decode_grid",
    ),
    "step5": (["check_step5_correct", "check_step5_fast_build"], "fast_decode_kernel", None),
}
_namespaces = {}


def notebook(folder):
    if folder not in _namespaces:
        _namespaces[folder] = namespace_after_answer(folder / LAB / LABS[LAB])
    return _namespaces[folder]


def run_check(name, kernel, grid):
    check = getattr(grader, name)
    return check(kernel) if grid is None else check(kernel, grid)


def failures(step, kernel, grid):
    failed = {}
    for name in STEPS[step][0]:
        try:
            run_check(name, kernel, grid)
        except NotImplementedError as error:
            failed[name] = f"NotImplementedError: {error}"
        except AssertionError as error:
            failed[name] = str(error)
    return failed


def params(kind):
    out = []
    for step, (checks, kernel, grid) in STEPS.items():
        for name in checks:
            out.append(pytest.param(name, kernel, grid, id=f"{step}-{name}"))
    return out


def test_every_check_is_graded_by_a_step_and_declares_what_it_grades():
    checks = {
        n
        for n, f in inspect.getmembers(grader, inspect.isfunction)
        if n.startswith("check_") and f.__module__ == grader.__name__
    }
    assert checks == {name for names, _, _ in STEPS.values() for name in names}
    assert all(getattr(getattr(grader, name), "__grades__", None) for name in checks)


@pytest.mark.parametrize("check, kernel, grid", params("solution"))
def test_solution_gets_full_marks(check, kernel, grid):
    ns = notebook(SOURCE_DIR)
    run_check(check, ns[kernel], ns[grid] if grid else None)


@pytest.mark.parametrize("check, kernel, grid", params("untouched"))
def test_untouched_release_gets_zero(check, kernel, grid):
    ns = notebook(RELEASE_DIR)
    with pytest.raises(NotImplementedError):
        run_check(check, ns[kernel], ns[grid] if grid else None)


def bug_params():
    return [
        pytest.param(
            step,
            kernel,
            grid,
            must_fail,
            id=f"{step}-{kernel.__name__}"
            + ("-" + grid.__name__ if grid and grid.__name__ not in ("blocks_grid", "decode_grid") else ""),
        )
        for step, bugs in catalogue.STEP_BUGS.items()
        for kernel, grid, must_fail in bugs
    ]


@pytest.mark.parametrize("step, kernel, grid, must_fail", bug_params())
def test_every_catalogued_kernel_bug_loses_points_on_its_step(step, kernel, grid, must_fail):
    failed = {}
    for name in must_fail:
        try:
            run_check(name, kernel, grid)
        except AssertionError as error:
            failed[name] = str(error)
    assert set(failed) == set(must_fail), f"{kernel.__name__} passed {set(must_fail) - set(failed)}"
    for message in failed.values():
        first = message.splitlines()[0]
        assert first.startswith("[") and len(message.splitlines()) <= 6, message


def variant_params():
    return [
        pytest.param(step, kernel, grid, id=f"{step}-{kernel.__name__}")
        for step, variants in catalogue.STEP_VARIANTS.items()
        for kernel, grid in variants
    ]


@pytest.mark.parametrize("step, kernel, grid", variant_params())
def test_correct_kernels_written_differently_get_full_marks(step, kernel, grid):
    assert failures(step, kernel, grid) == {}


def test_the_negative_logits_case_has_heads_whose_scores_all_underflow_from_zero():
    """The case that catches a running max started at 0: each listed head's every score is below -240, where
    exp(s - 0) is 0 in fp32 (below about -104) and in fp16."""
    for dtype in (grader.torch.float32, grader.torch.float16):
        case = grader._negative_logits(None, dtype)
        for q_head in (0, 3):
            assert float(case.expected_scores(0, q_head).max()) < -240
            assert grader.torch.isfinite(case.expected_head(0, q_head)).all()


def test_borrowing_the_package_kernel_is_refused_where_it_runs():
    """The launcher refuses the package's kernels (a failure the kernel reports can only cost points);
    the submitted text that uses them is refused by the provenance checks (test_provenance.py)."""
    for kernel in (catalogue.decode_calls_the_package_kernel, grader.triton_kernels.paged_decode_kernel):
        failed = failures("step4", kernel, catalogue.decode_grid)
        assert set(failed) == set(STEPS["step4"][0])
        assert all(message.startswith("[integrity]") for message in failed.values()), failed


def test_python_inside_a_kernel_runs_in_the_interpreter_but_gets_nothing():
    from paged_kv.lab.kernel_cases import paged_case
    from paged_kv.lab.kernel_lab import expect_close, run_gather

    case = paged_case([9], block_size=4)
    expect_close(
        "interpreter",
        run_gather(catalogue.gather_python_in_kernel, catalogue.blocks_grid, case),
        case.expected_keys(0, 0),
        atol=0,
        rtol=0,
    )
    message = failures("step1", catalogue.gather_python_in_kernel, catalogue.blocks_grid)["check_step1_gather"]
    assert "does not compile for an NVIDIA GPU" in message


def visible_cell(step):
    """The source of a step's visible-test cell in the solution notebook."""
    import nbformat

    nb = nbformat.read(SOURCE_DIR / LAB / LABS[LAB], as_version=4)
    grade_id = f"lab06-{step}-visible"
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.parametrize(
    "step, kernel, grid, must_fail",
    [
        p
        for p in bug_params()
        if p.values[2] is not catalogue.per_query_head_grid and p.values[1] not in catalogue.HIDDEN_ONLY
    ],
)
def test_the_visible_tests_catch_every_pitfall(step, kernel, grid, must_fail):
    """Typing a listed pitfall into the TODO fails the step's visible cell with one short block (except the
    catalogue's HIDDEN_ONLY ones, which need a case the visible cell does not run)."""
    from paged_kv.lab.feedback import CheckFailed

    namespace = dict(notebook(SOURCE_DIR))
    _, kernel_name, grid_name = STEPS[step]
    namespace[kernel_name] = kernel
    if grid_name:
        namespace[grid_name] = grid
    with pytest.raises(CheckFailed) as caught:
        exec(visible_cell(step), namespace)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("[") and len(lines) <= 5, str(caught.value)
