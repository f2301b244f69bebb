"""Lab 03, 03-decode-growth: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub, PREFIX

LAB = Lab(
    "03-decode-growth",
    "decode boundary growth",
    (
        Part(
            "decode",
            (Stub("cache/manager.py", "KVCacheManager.allocate_for_decode"),),
            (
                "lab03-visible",
                "lab03-hidden-boundaries",
                "lab03-hidden-block-size-one",
                "lab03-hidden-rollback",
                "lab03-hidden-random",
            ),
            equivalents=(
                Stub(PREFIX, "BlockManagerBase.may_append", "the block manager's decode growth"),
                Stub(PREFIX, "BlockManagerBase.can_append", "the block manager's decode growth"),
                Stub(PREFIX, "BlockManagerBase._num_new_blocks_for_decode", "the block manager's decode growth"),
                # The stretch (lab03-stretch, not graded) asks for this loop; serve_paged takes the student's own
                # when an edition leaves it out (lab 03's comparison says so).
                Stub("lab/baselines.py", "decode_step_with_preemption", "the stretch's preemption by recompute"),
            ),
        ),
    ),
    todo_object='KVCacheManager',
    todo_method='allocate_for_decode',
)
