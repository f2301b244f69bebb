"""Lab 07, 07-serve-it: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "07-serve-it",
    "serving engine's scheduler",
    (
        Part(
            "scheduler",
            (Stub("engine/scheduler.py", "Scheduler.schedule"), Stub("engine/scheduler.py", "Scheduler.preempt")),
            (
                "lab07-visible",
                "lab07-hidden-admission",
                "lab07-hidden-decode",
                "lab07-hidden-preemption",
                "lab07-hidden-random",
            ),
            # lab 09's given preempt is lab 07's answer: left out of the editions up to lab 07
            equivalents=(Stub("engine/chunked.py", "ChunkedSchedulerBase.preempt"),),
        ),
    ),
    todo_object='Scheduler',
)
