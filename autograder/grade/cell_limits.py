"""How the grader reads and explains the limits a cell ran into (time, memory, output, a kernel that died)."""

from __future__ import annotations

# Signs, in an error's name and message, that a cell (or a grader's request) went over the memory limit.
MEMORY_SIGNS = (
    "MemoryError",
    "can't allocate memory",
    "DefaultCPUAllocator",
    "std::bad_alloc",
    "Cannot allocate memory",
)
