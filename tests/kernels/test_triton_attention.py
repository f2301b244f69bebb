"""The package's Triton paged decode kernel equals the torch reference (in the interpreter on CPU),
survives poisoned memory and a pool past 2**32 elements, rejects what it cannot do, and compiles to
real sm_80 / sm_90 code without spilling."""

import subprocess
import sys

import pytest
import torch

from paged_kv.kernels.triton_mode import triton_available  # noqa: E402

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

from paged_kv.lab.kernel_cases import far_pool_case, paged_case  # noqa: E402
from paged_kv.kernels.triton_attention import LaunchPlan, paged_decode_attention, plan_launch  # noqa: E402
from paged_kv.kernels.triton_mode import decide  # noqa: E402

FP16 = dict(atol=2e-3, rtol=2e-3)
FP32 = dict(atol=2e-5, rtol=2e-5)


def run(case, **kwargs):
    return paged_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, case.scale, **kwargs
    )


@pytest.mark.parametrize("block_size", [1, 4, 16, 17])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (6, 2), (4, 1)], ids=["mha", "gqa4", "gqa3", "mqa"])
def test_matches_reference_on_ragged_batches(block_size, heads):
    case = paged_case(
        [1, 16, 17, 40], block_size=block_size, num_q_heads=heads[0], num_kv_heads=heads[1], seed=block_size
    )
    torch.testing.assert_close(run(case), case.expected(), **FP32)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, FP32), (torch.float16, FP16)])
@pytest.mark.parametrize("num_splits", [1, 2, 5])
def test_split_kv_matches_reference(dtype, tol, num_splits):
    case = paged_case([70, 3, 33], block_size=8, num_q_heads=4, num_kv_heads=2, dtype=dtype, seed=num_splits)
    out = run(case, num_splits=num_splits, tile=16)
    assert out.dtype == dtype and out.shape == case.q.shape
    torch.testing.assert_close(out, case.expected(), **tol)


@pytest.mark.parametrize("head_dim", [8, 24, 128])
def test_head_dims_that_are_padded_or_large(head_dim):
    case = paged_case([9, 20], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=head_dim)
    torch.testing.assert_close(run(case), case.expected(), **FP32)


def test_large_logits_do_not_overflow():
    case = paged_case([30, 7], block_size=4, num_q_heads=4, num_kv_heads=2, logit_scale=400.0)
    out = run(case, num_splits=2, tile=16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, case.expected(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_poisoned_tails_unlisted_blocks_and_garbage_padding_are_never_used(num_splits):
    case = paged_case([5, 12, 1, 8, 16], block_size=4, num_q_heads=4, num_kv_heads=2, poison=True, seed=3)
    assert torch.isnan(case.k_cache).any() and (case.block_tables < 0).any()
    torch.testing.assert_close(run(case, num_splits=num_splits, tile=16), case.expected(), **FP32)


def test_offsets_past_2_to_the_32_elements_use_int64():
    case = far_pool_case((21, 9), block_size=8)
    assert case.k_cache.stride(0) * int(case.block_tables.max()) > 2**32
    torch.testing.assert_close(run(case), case.expected(), **FP32)


def test_bfloat16_in_the_interpreter_is_refused_with_the_fix():
    case = paged_case([5], dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="float16 or float32"):
        run(case)


def test_too_large_head_dim_is_refused():
    case = paged_case([3], head_dim=512)
    with pytest.raises(ValueError, match="head_dim 512"):
        run(case)


def test_bad_inputs_are_refused_before_launch():
    case = paged_case([5, 3], num_q_heads=4, num_kv_heads=2)
    with pytest.raises(ValueError, match="seq_len"):
        paged_decode_attention(
            case.q, case.k_cache, case.v_cache, case.block_tables, torch.tensor([0, 3], dtype=torch.int32)
        )
    with pytest.raises(ValueError, match="scale"):
        paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, scale=-1.0)
    with pytest.raises(ValueError, match="num_splits"):
        run(case, num_splits=0)


def test_launch_plan_splits_long_sequences_only_on_a_gpu():
    assert plan_launch(2, 8, 32768, native=False).num_splits == 1
    plan = plan_launch(2, 8, 32768, native=True, sm_count=132)
    assert plan.num_splits > 1 and plan.tokens_per_split % plan.tile == 0
    assert plan.num_splits * plan.tokens_per_split >= 32768
    assert plan_launch(256, 8, 4096, native=True, sm_count=132).num_splits == 1
    assert plan_launch(1, 1, 10, native=True) == LaunchPlan(1, 64, 64, 4, 3)


@pytest.mark.parametrize(
    "capability, native, words",
    [
        (None, False, "no CUDA GPU"),
        ((7, 5), False, "8.0+"),
        ((8, 0), True, "compiled for the GPU"),
        ((9, 0), True, "sm_90"),
    ],
)
def test_mode_decision(capability, native, words):
    mode = decide(None, None, capability, "GPU")
    assert mode.native is native and words in mode.reason
    assert mode.device == ("cuda" if native else "cpu")


def test_mode_overrides():
    assert not decide("interpret", None, (9, 0)).native
    assert not decide(None, "1", (9, 0)).native
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        decide("native", None, None)
    with pytest.raises(ValueError, match="PAGED_KV_TRITON"):
        decide("fast", None, None)


@pytest.mark.parametrize(
    "triton_version, numpy_version, broken",
    [
        ("3.6.0", "2.4.1", True),
        ("3.6.0", "2.3.5", False),
        ("3.7.1", "2.4.6", False),
        ("3.10.0", "2.4.0", False),
        ("3.5.1+git", "2.4.0rc1", True),
        (None, "2.4.0", False),
    ],
)
def test_triton_36_interpreter_with_numpy_24_is_flagged_with_the_fix(triton_version, numpy_version, broken):
    from paged_kv.kernels.triton_mode import interpreter_problem

    problem = interpreter_problem(triton_version, numpy_version)
    assert (problem is not None) is broken
    if broken:
        assert "numpy<2.4" in problem and "triton>=3.7" in problem and "#9171" in problem


def test_package_imports_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import paged_kv, paged_kv.kernels.triton_attention as t, paged_kv.lab.kernel_lab\n"
        "from paged_kv.kernels.triton_mode import triton_available\n"
        "assert not triton_available()\n"
        "try:\n    t.kernels()\nexcept ImportError as e:\n    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "pip install triton" in result.stdout
