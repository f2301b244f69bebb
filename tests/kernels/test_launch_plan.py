"""The launcher's choices: occupancy from a build's registers and shared memory, the one-wave split rule,
the measured launch table (used only for the GPU it was measured on), and the defaults without it."""

import json

import pytest

from paged_kv.kernels.launch_table import TABLE_PATH, LaunchTable, TunedLaunch, load_table, parse_table, write_table
from paged_kv.kernels.occupancy import SM80, SM90, KernelResources, limits_of_device, one_wave_splits, programs_per_sm
from paged_kv.kernels.triton_attention import LaunchPlan, plan_launch
from paged_kv.kernels.triton_mode import triton_available

H200 = "NVIDIA H200"


def entry(**overrides):
    fields = dict(
        gpu=H200,
        triton="3.7.1",
        date="2026-12-01",
        block_size=16,
        head_dim=128,
        group=4,
        tile=32,
        num_warps=8,
        num_stages=2,
        registers=96,
        shared_bytes=20000,
    )
    fields.update(overrides)
    return TunedLaunch(**fields)


@pytest.mark.parametrize(
    "registers, shared, warps, limits, expected",
    [
        (126, 39168, 4, SM90, 4),  # the package kernel's sm_90 build: registers bind (4096 per warp -> 16 warps)
        (64, 0, 4, SM90, 8),  # 2048 registers a warp: 32 warps, 8 programs
        (32, 0, 1, SM90, 32),  # tiny programs hit the cap of 32 resident programs
        (32, 100 * 1024, 4, SM90, 2),  # shared memory binds: 228 KiB / (100 KiB + 1 KiB reserved)
        (32, 100 * 1024, 4, SM80, 1),  # 164 KiB on sm_80
        (255, 0, 32, SM90, 0),  # does not fit at all
    ],
)
def test_programs_per_sm_takes_the_tightest_budget(registers, shared, warps, limits, expected):
    assert programs_per_sm(KernelResources(registers, shared, warps), limits) == expected


def test_register_allocation_rounds_up_per_warp():
    # 121 registers x 32 threads = 3872, rounded to 4096: the same occupancy as 128 registers
    assert programs_per_sm(KernelResources(121, 0, 4), SM90) == programs_per_sm(KernelResources(128, 0, 4), SM90) == 4
    assert programs_per_sm(KernelResources(120, 0, 4), SM90) == 4  # 3840 -> 3840: 4 warps a sub-partition still


def test_one_wave_splits_fill_but_never_overflow_the_wave():
    assert one_wave_splits(16, 528, 64) == 33  # 528 programs exactly
    assert one_wave_splits(256, 528, 64) == 2  # 512 <= 528 < 768
    assert one_wave_splits(1024, 528, 64) == 1  # the pairs alone fill the GPU
    assert one_wave_splits(1, 528, 8) == 8  # capped by the sequence length
    with pytest.raises(ValueError, match="wave"):
        one_wave_splits(4, 0, 8)


def test_plan_uses_the_kernels_occupancy_for_one_full_wave():
    resources = KernelResources(126, 39168, 4)
    plan = plan_launch(2, 8, 32768, native=True, sm_count=132, resources=resources)
    # the rule asks for 33 splits (528 programs); rounding each split to whole tiles leaves 32
    assert plan.num_splits == 32 and 16 * plan.num_splits <= 132 * 4 and plan.tokens_per_split % plan.tile == 0
    assert "one wave of 132 x 4" in plan.source
    fewer = plan_launch(2, 8, 32768, native=True, sm_count=132, resources=KernelResources(255, 0, 4))
    assert fewer.num_splits == 16  # 255 registers: 2 programs per SM, 264 programs


def test_resources_callback_gets_the_chosen_variant():
    asked = []

    def resources(tile, warps, stages):
        asked.append((tile, warps, stages))
        return KernelResources(64, 0, warps)

    plan = plan_launch(4, 8, 16384, native=True, sm_count=132, tile=32, num_warps=8, stages=2, resources=resources)
    assert asked == [(32, 8, 2)] and (plan.tile, plan.num_warps, plan.num_stages) == (32, 8, 2)
    assert plan.num_splits == 16  # 64 registers, 8 warps: 4 per SM, 528 programs over 32 pairs, 32 tokens x 512


def test_without_resources_the_plan_falls_back_and_says_so():
    plan = plan_launch(2, 8, 32768, native=True, sm_count=132)
    assert plan.num_splits == 17 and "occupancy unknown" in plan.source
    assert plan_launch(2, 8, 32768, native=False).num_splits == 1


def test_table_entry_is_used_only_on_its_gpu_and_shape():
    table = LaunchTable("test", (entry(),))
    shape = dict(block_size=16, head_dim=128, group=4)
    tuned = plan_launch(32, 8, 4096, native=True, gpu=H200, table=table, **shape)
    assert (tuned.tile, tuned.num_warps, tuned.num_stages) == (32, 8, 2) and "launch table (NVIDIA H200" in tuned.source
    assert "96 registers" in tuned.source  # the entry's recorded build gives the occupancy
    for other in (dict(gpu="NVIDIA A100-SXM4-80GB", **shape), dict(gpu=H200, block_size=256, head_dim=128, group=4)):
        plan = plan_launch(32, 8, 4096, native=True, table=table, **other)
        assert (plan.tile, plan.num_warps, plan.num_stages) == (64, 4, 3) and plan.source.startswith("defaults")
    interpreted = plan_launch(32, 8, 4096, native=False, gpu=H200, table=table, **shape)
    assert interpreted.tile == 32 and interpreted.num_stages == 1 and interpreted.source.startswith("defaults")


def test_explicit_arguments_beat_the_table():
    table = LaunchTable("test", (entry(),))
    plan = plan_launch(
        32,
        8,
        4096,
        native=True,
        gpu=H200,
        block_size=16,
        head_dim=128,
        group=4,
        table=table,
        tile=128,
        num_warps=4,
        stages=4,
    )
    assert (plan.tile, plan.num_warps, plan.num_stages) == (128, 4, 4)


def test_shipped_table_parses_and_says_whether_it_holds_measurements():
    table = load_table(TABLE_PATH)
    data = json.loads(TABLE_PATH.read_text())
    assert len(table.entries) == len(data["entries"])
    if not table.entries:
        assert "No GPU sweep" in table.about
    assert plan_launch(1, 1, 10, native=True) == LaunchPlan(1, 64, 64, 4, 3)


def test_write_table_merges_and_replaces_by_gpu_and_shape(tmp_path):
    path = tmp_path / "table.json"
    write_table([entry(), entry(block_size=256, tile=64)], path)
    write_table([entry(tile=128)], path)
    table = load_table(path)
    assert sorted((e.block_size, e.tile) for e in table.entries) == [(16, 128), (256, 64)]
    assert table.find(H200, 16, 128, 4).tile == 128 and table.find(None, 16, 128, 4) is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"entries": [{"gpu": H200}]}, "lacks"),
        ({"entries": [dict(entry().__dict__, tile=48)]}, "power of two"),
        ({"entries": [entry().__dict__, entry().__dict__]}, "repeats"),
        ({"rows": []}, "entries"),
    ],
)
def test_malformed_tables_are_refused_with_the_entry_named(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_table(bad)


def test_device_limits_come_from_the_device_where_it_says():
    class Props:
        regs_per_multiprocessor = 65536
        max_threads_per_multi_processor = 1536
        shared_memory_per_multiprocessor = 100 * 1024

    limits = limits_of_device(Props(), (8, 6))
    assert (limits.max_warps, limits.shared_bytes, limits.name) == (48, 100 * 1024, "sm_86")
    assert limits_of_device(object(), (9, 0)) == SM90 and limits_of_device(object(), (8, 0)) == SM80


@pytest.mark.parametrize(
    "capability, programs",
    [((8, 0), 32), ((8, 6), 16), ((8, 7), 16), ((8, 9), 24), ((9, 0), 32), ((10, 0), 32), ((12, 0), 24)],
)
def test_the_resident_program_cap_follows_the_compute_capability(capability, programs):
    """``cudaOccMaxBlocksPerMultiprocessor`` in the ``cuda_occupancy.h`` Triton ships: an RTX 3090 (8.6) holds 16
    programs per SM, an L4 or RTX 4090 (8.9) 24, an A100 (8.0) and an H100 (9.0) 32."""
    assert limits_of_device(object(), capability).max_programs == programs


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
def test_the_offline_sm90_build_gives_the_occupancy_the_plan_uses():
    """The package kernel built for sm_90 here (no GPU) has the resources that make one wave on an H200 a
    known number of programs; the plan for a batch of 32 fills that wave with 2 splits."""
    from paged_kv.kernels import triton_kernels as kernels
    from paged_kv.kernels.triton_compile import compile_for_gpu
    from test_triton_gpu_build import decode_args

    args, _ = decode_args(split=True)
    build = compile_for_gpu(kernels.paged_decode_kernel, args, arch=90, num_warps=4, num_stages=3)
    if build.registers is None:
        pytest.skip("ptxas is not available to report registers")
    resources = KernelResources(build.registers, build.shared_bytes, 4)
    per_sm = programs_per_sm(resources, SM90)
    assert 1 <= per_sm <= 8
    plan = plan_launch(32, 8, 8192, native=True, sm_count=132, resources=resources)
    assert 256 * plan.num_splits <= 132 * per_sm < 256 * (plan.num_splits + 1)
