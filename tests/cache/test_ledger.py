"""Capacity ledger: exact bytes, presets from published configs, GPU fit helpers."""

import pytest

from paged_kv import (
    GPU_MEMORY_BYTES,
    MODEL_PRESETS,
    blocks_per_request,
    blocks_that_fit,
    capacity_plan,
    estimate_kv_cache_bytes,
    get_preset,
    kv_budget_bytes,
    max_concurrent_requests,
)


def test_ledger_counts_k_and_v_across_layers_heads_and_dtype():
    ledger = estimate_kv_cache_bytes(num_blocks=3, block_size=16, num_layers=32, num_kv_heads=8, head_dim=128)
    assert ledger["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131072
    assert ledger["kv_bytes_per_block"] == 16 * 131072
    assert ledger["total_cache_bytes"] == 3 * 16 * 131072
    assert ledger["layout_shape"] == [32, 2, 8, 16, 128]
    assert set(ledger) == {"kv_bytes_per_token", "kv_bytes_per_block", "total_cache_bytes", "layout_shape"}


def test_ledger_scales_with_dtype_bytes():
    fp32 = estimate_kv_cache_bytes(1, 1, 1, 1, 1, dtype_bytes=4)
    fp8 = estimate_kv_cache_bytes(1, 1, 1, 1, 1, dtype_bytes=1)
    assert fp32["kv_bytes_per_token"] == 8 and fp8["kv_bytes_per_token"] == 2


@pytest.mark.parametrize("field", ["num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim", "dtype_bytes"])
@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError), ("4", TypeError)]
)
def test_ledger_rejects_bad_sizes_naming_the_argument(field, bad, error):
    args = dict(num_blocks=4, block_size=4, num_layers=2, num_kv_heads=8, head_dim=16, dtype_bytes=2)
    args[field] = bad
    with pytest.raises(error, match=field):
        estimate_kv_cache_bytes(**args)


def test_presets_match_published_configs():
    llama8 = get_preset("Llama-3.1-8B")
    assert (llama8.num_layers, llama8.num_q_heads, llama8.num_kv_heads, llama8.head_dim) == (32, 32, 8, 128)
    llama70 = get_preset("Llama-3.1-70B")
    assert (llama70.num_layers, llama70.num_q_heads, llama70.num_kv_heads, llama70.head_dim) == (80, 64, 8, 128)
    qwen = get_preset("Qwen2.5-7B")
    assert (qwen.num_layers, qwen.num_q_heads, qwen.num_kv_heads, qwen.head_dim) == (28, 28, 4, 128)
    mistral = get_preset("Mistral-7B-v0.3")
    assert (mistral.num_layers, mistral.num_kv_heads, mistral.head_dim) == (32, 8, 128)
    for preset in MODEL_PRESETS.values():
        assert preset.num_q_heads % preset.num_kv_heads == 0


def test_llama3_8b_needs_128_kib_per_token_in_bf16():
    assert get_preset("Llama-3.1-8B").kv_bytes_per_token(2) == 128 * 1024
    assert get_preset("Llama-2-7B").kv_bytes_per_token(2) == 512 * 1024  # no GQA: 4x more


def test_unknown_preset_lists_known_names():
    with pytest.raises(ValueError, match="Llama-3.1-8B"):
        get_preset("GPT-5")


def test_blocks_that_fit_floors_and_handles_zero():
    per_block = estimate_kv_cache_bytes(1, 16, 32, 8, 128)["kv_bytes_per_block"]
    assert blocks_that_fit(per_block * 10 + per_block - 1, 16, 32, 8, 128) == 10
    assert blocks_that_fit(0, 16, 32, 8, 128) == 0
    with pytest.raises(ValueError, match="free_bytes"):
        blocks_that_fit(-1, 16, 32, 8, 128)


def test_request_fit_uses_ceil_blocks():
    assert blocks_per_request(4096, 16) == 256 and blocks_per_request(4097, 16) == 257
    assert max_concurrent_requests(513, 16, 4096) == 2
    assert max_concurrent_requests(0, 16, 4096) == 0


def test_kv_budget_subtracts_weights_and_never_goes_negative():
    assert kv_budget_bytes(100, 30, memory_utilization=0.5) == 20
    assert kv_budget_bytes(100, 300) == 0
    with pytest.raises(ValueError, match="memory_utilization"):
        kv_budget_bytes(100, 0, memory_utilization=1.5)


def test_capacity_plan_for_llama8b_on_80gb():
    plan = capacity_plan("Llama-3.1-8B", GPU_MEMORY_BYTES["80 GB (A100, H100)"], block_size=16, request_len=4096)
    budget = int(80 * 2**30 * 0.9) - 8_030_000_000 * 2
    assert plan["kv_budget_bytes"] == budget
    assert plan["num_blocks"] == budget // (16 * 131072)
    assert plan["max_tokens"] == plan["num_blocks"] * 16
    assert plan["max_requests"] == plan["num_blocks"] // 256


def test_capacity_plan_says_zero_when_weights_do_not_fit():
    plan = capacity_plan("Llama-3.1-70B", GPU_MEMORY_BYTES["80 GB (A100, H100)"])
    assert plan["kv_budget_bytes"] == 0 and plan["num_blocks"] == 0 and plan["max_requests"] == 0


def test_qwen_preset_is_the_base_model_with_its_128k_context():
    assert get_preset("Qwen2.5-7B").max_context == 131072  # the Instruct config says 32,768


def test_runtime_memory_comes_out_of_the_utilisation_fraction():
    assert kv_budget_bytes(100, 30, memory_utilization=0.5, runtime_bytes=5) == 15
    assert kv_budget_bytes(100, 30, memory_utilization=0.5, runtime_bytes=50) == 0
    with pytest.raises(ValueError, match="runtime_bytes"):
        kv_budget_bytes(100, 30, runtime_bytes=-1)
    with pytest.raises(TypeError, match="runtime_bytes"):
        kv_budget_bytes(100, 30, runtime_bytes=1.5)


def test_ledger_reproduces_the_kv_cache_of_vllms_profiling_log():
    from paged_kv.cache.ledger import VLLM_PROFILE_LOG as log

    gib = 2**30
    preset = get_preset(log["model"])
    assert round(preset.weight_bytes(2) / gib, 2) == log["weights_gib"]
    runtime = round((log["non_torch_gib"] + log["activation_peak_gib"]) * gib)
    budget = kv_budget_bytes(
        round(log["total_gpu_memory_gib"] * gib), preset.weight_bytes(2), log["gpu_memory_utilization"], runtime
    )
    assert abs(budget / gib - log["kv_cache_gib"]) < 0.01
    upper = kv_budget_bytes(
        round(log["total_gpu_memory_gib"] * gib), preset.weight_bytes(2), log["gpu_memory_utilization"]
    )
    assert upper - budget == runtime


def test_capacity_plan_refuses_requests_longer_than_the_models_context():
    with pytest.raises(ValueError, match="4096"):
        capacity_plan("Llama-2-7B", GPU_MEMORY_BYTES["80 GB (A100, H100)"], request_len=8192)
    plan = capacity_plan(
        "Llama-2-7B", GPU_MEMORY_BYTES["80 GB (A100, H100)"], request_len=4096, runtime_bytes=2 * 2**30
    )
    assert plan["kv_budget_bytes"] == int(80 * 2**30 * 0.9) - 6_740_000_000 * 2 - 2 * 2**30


def test_layout_table_names_the_kernel_layout_used_from_lab_04_on():
    from paged_kv.cache.ledger import KV_LAYOUTS

    shapes = {who: shape for who, shape, _ in KV_LAYOUTS}
    assert (
        shapes["this course from lab 04 on (paged_kv.kernels.attention, lab 06's kernel)"]
        == "[num_blocks, block_size, num_kv_heads, head_dim]"
    )
    assert any(shape == "[num_layers, 2, num_kv_heads, block_size, head_dim]" for shape in shapes.values())
