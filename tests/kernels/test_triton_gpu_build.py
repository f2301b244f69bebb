"""The package kernels compile offline to real GPU code for Ampere (sm_80) and Hopper (sm_90): PTX and
a cubin, with the GQA dot on tensor cores, K/V loads pipelined with cp.async, and no register spills."""

import re

import pytest
import torch

from paged_kv.kernels.triton_mode import triton_available  # noqa: E402

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

from paged_kv.kernels import triton_kernels as kernels  # noqa: E402
from paged_kv.kernels.triton_attention import MIN_DOT, _next_pow2, plan_launch  # noqa: E402
from paged_kv.kernels.triton_compile import compile_for_gpu, signature_of  # noqa: E402

STRIDES = [
    "stride_qs",
    "stride_qh",
    "stride_qd",
    "stride_kb",
    "stride_ks",
    "stride_kh",
    "stride_kd",
    "stride_vb",
    "stride_vs",
    "stride_vh",
    "stride_vd",
    "stride_ts",
    "stride_tb",
    "stride_os",
    "stride_oh",
    "stride_od",
]


def decode_args(num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16, dtype=torch.float16, split=False):
    """The launch arguments of a Llama-3.1-8B layer (shapes only: tensors are tiny stand-ins)."""
    q = torch.empty(4, num_q_heads, head_dim, dtype=dtype)
    cache = torch.empty(64, block_size, num_kv_heads, head_dim, dtype=dtype)
    tables = torch.empty(4, 2048, dtype=torch.int32)
    lens, part = torch.empty(4, dtype=torch.int32), torch.empty(16)
    plan = plan_launch(4, num_kv_heads, 32768, native=True)
    group = num_q_heads // num_kv_heads
    args = dict(
        q_ptr=q,
        k_ptr=cache,
        v_ptr=cache,
        tables_ptr=tables,
        lens_ptr=lens,
        out_ptr=q,
        part_out_ptr=part,
        part_lse_ptr=part,
        qk_scale=0.127,
        tokens_per_split=plan.tokens_per_split,
        num_splits=plan.num_splits,
    )
    args.update(zip(STRIDES, [*q.stride(), *cache.stride(), *cache.stride(), *tables.stride(), *q.stride()]))
    args.update(
        GROUP=group,
        GROUP_PAD=max(MIN_DOT, _next_pow2(group)),
        HEAD_DIM=head_dim,
        DIM_PAD=max(MIN_DOT, _next_pow2(head_dim)),
        BLOCK_SIZE=block_size,
        TILE=plan.tile,
        SPLIT=split,
        FP32_DOT=dtype == torch.float32,
    )
    return args, plan


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("split", [False, True], ids=["one-pass", "split-kv"])
def test_decode_kernel_builds_for_ampere_and_hopper_without_spills(arch, dtype, split):
    args, plan = decode_args(dtype=dtype, split=split)
    build = compile_for_gpu(
        kernels.paged_decode_kernel, args, arch=arch, num_warps=plan.num_warps, num_stages=plan.num_stages
    )
    print(build.summary())
    ptx = build.asm["ptx"]
    assert f".target sm_{arch}" in ptx and len(build.asm["cubin"]) > 1000
    assert re.search(r"mma\.sync|wgmma", ptx), "the GQA group should run on tensor cores"
    assert "cp.async" in ptx, "K/V tiles should be software-pipelined (cp.async)"
    assert build.spill_bytes in (0, None) and (build.registers or 0) <= 255
    assert build.shared_bytes <= 100 * 1024
    assert len(build.dots) == 2 and all(d.endswith("xf32") for d in build.dots), build.dots


def test_dot_shapes_reads_each_tl_dot_of_the_ir_in_order():
    from paged_kv.kernels.triton_compile import dot_shapes

    ttir = (
        "%s = tt.dot %q, %k, %c, inputPrecision = tf32 : tensor<16x128xf16> * tensor<128x64xf16> -> "
        "tensor<16x64xf32> loc(#loc1)\n%x = arith.addf %a, %b : tensor<16x64xf32>\n"
        "%acc = tt.dot %p, %v, %c2 : tensor<16x64xf16> * tensor<64x128xf16> -> tensor<16x128xf16> loc(#loc2)"
    )
    assert dot_shapes(ttir) == ("16x128xf16 * 128x64xf16 -> 16x64xf32", "16x64xf16 * 64x128xf16 -> 16x128xf16")
    assert dot_shapes("") == () and dot_shapes(None) == ()


@pytest.mark.parametrize("heads", [(64, 8), (32, 32)], ids=["llama70b-layer", "mha"])
def test_other_head_layouts_build(heads):
    args, plan = decode_args(num_q_heads=heads[0], num_kv_heads=heads[1])
    build = compile_for_gpu(kernels.paged_decode_kernel, args, arch=90, num_stages=plan.num_stages)
    assert build.spill_bytes in (0, None)


def test_merge_kernel_builds():
    part, out = torch.empty(16), torch.empty(4, 32, 128, dtype=torch.float16)
    args = dict(
        part_out_ptr=part,
        part_lse_ptr=part,
        out_ptr=out,
        num_splits=8,
        stride_os=out.stride(0),
        stride_oh=out.stride(1),
        stride_od=out.stride(2),
        HEAD_DIM=128,
        DIM_PAD=128,
        SPLITS_PAD=8,
    )
    assert ".target sm_90" in compile_for_gpu(kernels.merge_splits_kernel, args, arch=90).asm["ptx"]


def test_signature_specialises_like_a_real_launch():
    args, _ = decode_args()
    signature, constexprs, attrs = signature_of(kernels.paged_decode_kernel, args)
    assert signature["q_ptr"] == "*fp16" and signature["tables_ptr"] == "*i32"
    assert signature["stride_qd"] == "constexpr" and constexprs["stride_qd"] == 1  # unit strides become constants
    assert constexprs["HEAD_DIM"] == 128 and attrs  # divisibility hints let loads vectorise


def test_interpreter_still_works_after_a_gpu_build():
    from paged_kv.lab.kernel_cases import paged_case
    from paged_kv.kernels.triton_attention import paged_decode_attention

    compile_for_gpu(kernels.paged_decode_kernel, decode_args()[0], arch=80)
    case = paged_case([6, 9], num_q_heads=4, num_kv_heads=2)
    out = paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens)
    torch.testing.assert_close(out, case.expected(), atol=2e-5, rtol=2e-5)


def test_gpu_build_after_interpreted_kernels_that_call_tl_max():
    """The interpreter patches triton.language while a jit helper runs; the course undoes it after."""
    from paged_kv.lab.kernel_cases import paged_case
    from paged_kv.kernels.triton_attention import paged_decode_attention

    case = paged_case([3])
    paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens)
    assert compile_for_gpu(kernels.paged_decode_kernel, decode_args()[0], arch=90).shared_bytes > 0


def test_a_program_build_stops_at_gpu_ir_and_leaves_full_builds_whole():
    """``compile_program_for_gpu`` (each graded launch's own specialisation in lab 06) returns the program's GPU IR
    and makes no PTX; the stages hook is put back, so a full build after it still reaches a cubin."""
    from triton import knobs

    from paged_kv.kernels.triton_compile import compile_program_for_gpu

    hook = knobs.runtime.add_stages_inspection_hook
    args, _ = decode_args()
    ttgir = compile_program_for_gpu(kernels.paged_decode_kernel, args, arch=90)
    assert "tt.func public @paged_decode_kernel" in ttgir and "tt.dot" in ttgir and "llvm." not in ttgir
    assert knobs.runtime.add_stages_inspection_hook is hook
    build = compile_for_gpu(kernels.paged_decode_kernel, args, arch=90)
    assert ".target sm_90" in build.asm["ptx"] and "cubin" in build.asm


def test_a_program_build_refuses_what_the_compiler_refuses():
    from triton.compiler.errors import CompilationError

    from paged_kv.kernels.triton_compile import compile_program_for_gpu

    args, _ = decode_args()
    args["HEAD_DIM"] = 3  # tl.arange needs a power of two
    args["DIM_PAD"] = 3
    with pytest.raises(CompilationError):
        compile_program_for_gpu(kernels.paged_decode_kernel, args, arch=90)
