"""Lab 02, 02-atomic-prefill: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "02-atomic-prefill",
    "atomic prefill",
    (
        Part(
            "prefill",
            (Stub("cache/manager.py", "KVCacheManager.allocate_for_prefill"),),
            ("lab02-visible", "lab02-hidden-count", "lab02-hidden-atomic", "lab02-hidden-random"),
        ),
    ),
    todo_object='KVCacheManager',
    todo_method='allocate_for_prefill',
)
