"""Lab 04, 04-logical-reconstruction: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "04-logical-reconstruction",
    "logical reconstruction",
    (
        Part(
            "reconstruct",
            (Stub("cache/manager.py", "KVCacheManager.get_physical_cache"),),
            ("lab04-visible", "lab04-hidden-order", "lab04-hidden-tail", "lab04-hidden-random"),
            equivalents=(
                Stub("kernels/attention.py", "gather_kv", "reads a pool through block tables"),
                Stub("engine/cache_ops.py", "slots_for", "maps logical positions through a block table"),
            ),
        ),
    ),
    todo_object='KVCacheManager',
    todo_method='get_physical_cache',
)
