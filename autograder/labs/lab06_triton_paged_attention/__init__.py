"""Lab 06, 06-triton-paged-attention: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub

LAB = Lab(
    "06-triton-paged-attention",
    "Triton paged attention",
    (
        Part(
            "kernels",
            (
                Stub("kernels/triton_kernels.py", "paged_decode_kernel"),
                Stub("kernels/triton_kernels.py", "merge_splits_kernel"),
            ),
            (
                "lab06-step1-visible",
                "lab06-step1-hidden",
                "lab06-step2-visible",
                "lab06-step2-hidden",
                "lab06-step3-visible",
                "lab06-step3-hidden",
                "lab06-step4-visible",
                "lab06-step4-hidden-batch",
                "lab06-step4-hidden-poison",
                "lab06-step4-hidden-int64",
                "lab06-step5-visible",
                "lab06-step5-hidden-correct",
                "lab06-step5-hidden-build",
            ),
        ),
    ),
    todo_object='',
)
