"""Lab 01, 01-capacity-ledger: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "01-capacity-ledger",
    "capacity ledger",
    (
        Part(
            "estimate",
            (Stub("cache/ledger.py", "estimate_kv_cache_bytes"),),
            (
                "lab01-visible",
                "lab01-hidden-per-token",
                "lab01-hidden-per-block",
                "lab01-hidden-total",
                "lab01-hidden-random",
            ),
            equivalents=(
                Stub("engine/model.py", "TinyLlama.kv_bytes_per_token", "the tiny model's own bytes-per-token formula"),
            ),
        ),
    ),
    todo_object='estimate_kv_cache_bytes',
)
