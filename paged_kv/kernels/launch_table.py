"""The launch parameters that won a measured sweep, per (block size, head dim, query-head group) and GPU.

``bench/tune_paged_attention.py`` times the package kernel over ``TILE`` x ``num_warps`` x
``num_stages`` on the GPU at hand and writes the winners to ``launch_table.json`` beside this file;
``plan_launch`` reads them. Each entry records the GPU's name, the Triton version and the date of its
sweep, and the registers and shared memory of the winning build (what the split heuristic needs to
know the kernel's occupancy before its first launch). An entry is used only on a GPU of the same name;
anything else falls back to the defaults in ``triton_attention``. The table ships empty until a GPU
run fills it, and its ``about`` says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from paged_kv.kernels.occupancy import KernelResources

TABLE_PATH = Path(__file__).with_name("launch_table.json")
EMPTY_ABOUT = (
    "No GPU sweep has been recorded yet: plan_launch uses its defaults. Fill it on a GPU with "
    "`PYTHONPATH=. python3 bench/tune_paged_attention.py --write`."
)
_REQUIRED = ("gpu", "triton", "date", "block_size", "head_dim", "group", "tile", "num_warps", "num_stages")


@dataclass(frozen=True)
class TunedLaunch:
    """One winner of a sweep; ``registers``/``shared_bytes`` are of its compiled kernel (0: not recorded)."""

    gpu: str
    triton: str
    date: str
    block_size: int
    head_dim: int
    group: int
    tile: int
    num_warps: int
    num_stages: int
    registers: int = 0
    shared_bytes: int = 0
    ms: Optional[float] = None
    gbps: Optional[float] = None
    workload: str = ""

    def __post_init__(self):
        for name in ("block_size", "head_dim", "group", "tile", "num_warps", "num_stages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"launch table entry: {name} must be a positive int, got {value!r}")
        if self.tile & (self.tile - 1):
            raise ValueError(f"launch table entry: tile must be a power of two, got {self.tile}")
        if not self.gpu or not self.triton or not self.date:
            raise ValueError("launch table entry: gpu, triton and date must be named")

    @property
    def key(self) -> Tuple[str, int, int, int]:
        return self.gpu, self.block_size, self.head_dim, self.group

    @property
    def resources(self) -> Optional[KernelResources]:
        """The winning build's resources, when the sweep recorded them."""
        if not self.registers:
            return None
        return KernelResources(self.registers, self.shared_bytes, self.num_warps)


@dataclass(frozen=True)
class LaunchTable:
    about: str
    entries: Tuple[TunedLaunch, ...]

    def find(self, gpu: Optional[str], block_size: int, head_dim: int, group: int) -> Optional[TunedLaunch]:
        """The entry for this GPU name and shape, or ``None`` (then the defaults apply)."""
        if not gpu:
            return None
        for entry in self.entries:
            if entry.key == (gpu, block_size, head_dim, group):
                return entry
        return None


def parse_table(data: dict, where: str = "launch table") -> LaunchTable:
    """Check and read a table's JSON object; a malformed table is an error that names the bad entry."""
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError(f"{where}: expected an object with a list 'entries'")
    entries, seen = [], set()
    for index, raw in enumerate(data["entries"]):
        missing = [k for k in _REQUIRED if not isinstance(raw, dict) or k not in raw]
        if missing:
            raise ValueError(f"{where}: entry {index} lacks {missing}")
        known = {k: raw[k] for k in TunedLaunch.__dataclass_fields__ if k in raw}
        try:
            entry = TunedLaunch(**known)
        except ValueError as error:
            raise ValueError(f"{where}: entry {index}: {error}") from None
        if entry.key in seen:
            raise ValueError(f"{where}: entry {index} repeats {entry.key}")
        seen.add(entry.key)
        entries.append(entry)
    return LaunchTable(str(data.get("about", "")), tuple(entries))


_CACHE: dict = {}


def load_table(path: Path = TABLE_PATH) -> LaunchTable:
    """The table at ``path`` (read once per process and file version); a missing file is an empty table."""
    path = Path(path)
    if not path.exists():
        return LaunchTable(EMPTY_ABOUT, ())
    stamp = (str(path), path.stat().st_mtime_ns)
    if stamp not in _CACHE:
        _CACHE[stamp] = parse_table(json.loads(path.read_text()), str(path))
    return _CACHE[stamp]


def write_table(entries: Iterable[TunedLaunch], path: Path = TABLE_PATH, about: str = "") -> LaunchTable:
    """Merge ``entries`` into the table at ``path`` (a new entry replaces one of the same GPU and shape)."""
    old = load_table(path)
    merged = {e.key: e for e in old.entries}
    merged.update({e.key: e for e in entries})
    ordered: List[TunedLaunch] = sorted(merged.values(), key=lambda e: e.key)
    text = about or (
        old.about
        if old.entries
        else "Winners of bench/tune_paged_attention.py, one per GPU and "
        "(block size, head dim, group); plan_launch falls back to its defaults elsewhere."
    )
    table = LaunchTable(text, tuple(ordered))
    Path(path).write_text(json.dumps({"about": table.about, "entries": [asdict(e) for e in ordered]}, indent=2) + "\n")
    return table
