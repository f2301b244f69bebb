"""Lab 09, 09-chunked-prefill: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call)
and, under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "09-chunked-prefill",
    "chunked prefill: one token budget",
    (
        Part(
            "scheduler",
            (Stub("engine/chunked.py", "ChunkedScheduler.schedule"),),
            (
                "lab09-visible",
                "lab09-hidden-budget",
                "lab09-hidden-blocks",
                "lab09-hidden-cache",
                "lab09-hidden-random",
            ),
        ),
    ),
    todo_object="ChunkedScheduler",
)
