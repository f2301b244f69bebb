"""Lab 06 kernels as students write them: realistic bugs (each must lose points on its step) and
correct kernels written differently (each must keep full marks).

Every kernel keeps the stub's parameter list. Bugs are named after the mistake. Each step's kernels are in a module
of their own (``bugs_step1_gather`` ... ``bugs_step5_fast``, what they share in ``catalogue_kit``); this one gathers
them: ``STEP_BUGS`` (``(kernel, grid or None, the checks it must fail)`` per step), ``STEP_VARIANTS`` (``(kernel,
grid or None)`` per step) and ``HIDDEN_ONLY``, and keeps the names other tests read (``blocks_grid``,
``decode_helper_correct``, ...).
"""

from autograder.labs.lab06_triton_paged_attention.tests import (
    bugs_step1_gather,
    bugs_step2_scores,
    bugs_step3_online_softmax,
    bugs_step4_decode,
    bugs_step5_fast,
)
from autograder.labs.lab06_triton_paged_attention.tests.bugs_step1_gather import (  # noqa: F401 - read as bugs.X
    gather_python_in_kernel,
)
from autograder.labs.lab06_triton_paged_attention.tests.bugs_step4_decode import (  # noqa: F401 - read as bugs.X
    decode_calls_the_package_kernel,
    decode_helper_correct,
    decode_query_head_as_kv_head,
    per_query_head_grid,
)
from autograder.labs.lab06_triton_paged_attention.tests.bugs_step5_fast import fast_helper_correct  # noqa: F401
from autograder.labs.lab06_triton_paged_attention.tests.catalogue_kit import blocks_grid, decode_grid  # noqa: F401

STEP_MODULES = {
    "step1": bugs_step1_gather,
    "step2": bugs_step2_scores,
    "step3": bugs_step3_online_softmax,
    "step4": bugs_step4_decode,
    "step5": bugs_step5_fast,
}

# (kernel, grid) pairs: bugs with the checks that must fail, and correct variants per step.
STEP_BUGS = {step: module.BUGS for step, module in STEP_MODULES.items()}
STEP_VARIANTS = {step: module.VARIANTS for step, module in STEP_MODULES.items()}

# Pitfalls that only the hidden checks catch (each step's, with why). test_the_visible_tests_catch_every_pitfall
# leaves them out.
HIDDEN_ONLY = {
    kernel: why for module in STEP_MODULES.values() for kernel, why in getattr(module, "HIDDEN_ONLY", {}).items()
}
