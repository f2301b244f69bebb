"""Lab 05, 05-prefix-cache: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub, PREFIX

LAB = Lab(
    "05-prefix-cache",
    "prefix cache",
    (
        Part(
            "hash",
            (Stub(PREFIX, "BlockManager.compute_hash"),),
            ("lab05-visible-hash", "lab05-hidden-hash"),
            equivalents=(Stub(PREFIX, "_chain_hash", "the package's own chained xxh64"),),
        ),
        Part(
            "release",
            (Stub(PREFIX, "BlockManager.deallocate"), Stub(PREFIX, "BlockManager._allocate_block")),
            ("lab05-visible-release", "lab05-hidden-release", "lab05-hidden-release-traces"),
            own_box=True,
        ),
        Part(
            "register",
            (Stub(PREFIX, "BlockManager.hash_blocks"),),
            ("lab05-visible-hash-blocks", "lab05-hidden-hash-blocks"),
            own_box=True,
        ),
        Part(
            "admit",
            (Stub(PREFIX, "BlockManager.can_allocate"), Stub(PREFIX, "BlockManager.allocate")),
            ("lab05-visible-allocate", "lab05-hidden-hits", "lab05-hidden-admit-traces"),
            own_box=True,
            # lab 09's chunked manager walks the same chain of cached blocks: left out while lab 05 is open
            equivalents=(
                Stub("engine/chunked.py", "ChunkedBlockManager.get_computed_blocks"),
                Stub("engine/chunked.py", "ChunkedBlockManager._hits"),
            ),
        ),
    ),
    todo_object='BlockManager',
)
