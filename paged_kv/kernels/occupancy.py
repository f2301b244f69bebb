"""How many programs of a compiled kernel one streaming multiprocessor (SM) holds at once, and how many
split-KV programs make one full wave of the GPU.

A program (a CUDA thread block) stays on its SM until it finishes, holding its registers and shared
memory. An SM runs several at once while none of four budgets runs out: registers, shared memory,
warps, and a fixed cap on resident programs. The rules below are the ones of NVIDIA's occupancy
calculator header ``cuda_occupancy.h`` (the copy Triton 3.7.1 ships in
``triton/backends/nvidia/include``), kept to what a Triton kernel needs (no dynamic shared memory, no
partitioned caching):

- registers go to warps, ``registers/thread x 32`` rounded up to 256 per warp
  (``cudaOccRegAllocationGranularity``, compute capability 8.x and 9.x), and each of the SM's four
  sub-partitions (``cudaOccSubPartitionsPerMultiprocessor``) holds a quarter of the register file;
- shared memory per program is the kernel's plus 1 KiB the driver reserves per block
  (``reservedSharedMemPerBlock``), rounded up to 128 bytes (``cudaOccSMemAllocationGranularity``);
- a fixed cap on resident programs per SM by compute capability (``cudaOccMaxBlocksPerMultiprocessor``): 32 on
  8.0 and 9.x, 24 on 8.9 (Ada), 16 on the other 8.x (8.6 and 8.7), 24 on 10.1, 11.0 and 12.x, else 32
  (:func:`max_programs_of`).

Per-SM totals are read from the device on a GPU; for offline builds :data:`SM80` and :data:`SM90`
hold them: 65,536 registers and 64 warps per SM (the H100 figures of Modal's GPU glossary, page
"occupancy", which match the CUDA guide's table for 8.0 and 9.0), and the largest shared-memory
carve-out per SM, 164 KiB on 8.0 and 228 KiB on 9.0 (the carve-out steps of ``cuda_occupancy.h``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

WARP = 32


@dataclass(frozen=True)
class SmLimits:
    """What one SM offers, and the allocation rules (see the module docstring for the sources)."""

    name: str
    registers: int = 65536
    max_warps: int = 64
    max_programs: int = 32
    shared_bytes: int = 228 * 1024
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory is allocated per program in units of this many bytes
    reserved_shared: int = 1024  # bytes the driver keeps per program
    sub_partitions: int = 4

    def __post_init__(self):
        for field in (
            "registers",
            "max_warps",
            "max_programs",
            "shared_bytes",
            "register_unit",
            "shared_unit",
            "sub_partitions",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SmLimits.{field} must be a positive int, got {value!r}")


SM80 = SmLimits("sm_80", shared_bytes=164 * 1024)
SM90 = SmLimits("sm_90", shared_bytes=228 * 1024)


@dataclass(frozen=True)
class KernelResources:
    """What one program of a compiled kernel holds: registers per thread, static shared memory, warps."""

    registers: int
    shared_bytes: int
    num_warps: int

    def __post_init__(self):
        if isinstance(self.registers, bool) or not isinstance(self.registers, int) or not 0 < self.registers <= 255:
            raise ValueError(f"registers per thread must be an int in 1..255, got {self.registers!r}")
        if isinstance(self.shared_bytes, bool) or not isinstance(self.shared_bytes, int) or self.shared_bytes < 0:
            raise ValueError(f"shared_bytes must be an int >= 0, got {self.shared_bytes!r}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two from 1 to 32, got {self.num_warps!r}")

    @classmethod
    def of_compiled(cls, compiled) -> Optional["KernelResources"]:
        """Read a launched Triton ``CompiledKernel`` (``n_regs``, ``metadata.shared``, ``metadata.num_warps``);
        ``None`` when it does not say (the interpreter returns no compiled kernel)."""
        registers = getattr(compiled, "n_regs", None)
        metadata = getattr(compiled, "metadata", None)
        shared = getattr(metadata, "shared", None)
        warps = getattr(metadata, "num_warps", None)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (registers, shared, warps)) or not registers:
            return None
        return cls(int(registers), int(shared), int(warps))


def max_programs_of(capability) -> int:
    """The most programs one SM of compute capability ``(major, minor)`` holds at once (``cuda_occupancy.h``'s
    ``cudaOccMaxBlocksPerMultiprocessor``, as Triton 3.7.1 ships it); ``ValueError`` before 8.0."""
    major, minor = (int(part) for part in capability)
    if major < 8:
        raise ValueError(f"compute capability {major}.{minor}: the course's kernels need 8.0 or newer")
    if major == 8:
        return {0: 32, 9: 24}.get(minor, 16)
    if (major, minor) in ((10, 1), (11, 0)) or major == 12:
        return 24
    return 32


def limits_of_device(props, capability) -> SmLimits:
    """The SM limits of a CUDA device from ``torch.cuda.get_device_properties`` (fields it lacks come from
    :data:`SM80`/:data:`SM90` by compute capability)."""
    base = SM90 if tuple(capability) >= (9, 0) else SM80
    registers = getattr(props, "regs_per_multiprocessor", None) or base.registers
    threads = getattr(props, "max_threads_per_multi_processor", None) or base.max_warps * WARP
    shared = getattr(props, "shared_memory_per_multiprocessor", None) or base.shared_bytes
    return SmLimits(
        f"sm_{capability[0]}{capability[1]}",
        registers=int(registers),
        max_warps=int(threads) // WARP,
        max_programs=max_programs_of(capability),
        shared_bytes=int(shared),
    )


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def programs_per_sm(resources: KernelResources, limits: SmLimits) -> int:
    """Resident programs per SM: the smallest of what registers, shared memory, warps and the cap allow.

    0 means one program does not fit (the launch would fail).
    """
    registers_per_warp = _round_up(resources.registers * WARP, limits.register_unit)
    warps_by_registers = (limits.registers // limits.sub_partitions // registers_per_warp) * limits.sub_partitions
    by_registers = warps_by_registers // resources.num_warps
    by_warps = limits.max_warps // resources.num_warps
    shared = _round_up(resources.shared_bytes + limits.reserved_shared, limits.shared_unit)
    by_shared = limits.shared_bytes // shared
    return max(0, min(by_registers, by_warps, by_shared, limits.max_programs))


def one_wave_splits(programs: int, wave: int, max_splits: int) -> int:
    """Split count for ``programs`` (sequence, KV head) pairs when ``wave`` programs run at once.

    The largest ``s <= max_splits`` with ``programs * s <= wave``: every program of the launch starts in the
    first wave, none waits for a second. 1 when the pairs alone fill a wave (or more).
    """
    for name, value in (("programs", programs), ("wave", wave), ("max_splits", max_splits)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return max(1, min(max_splits, wave // programs))
