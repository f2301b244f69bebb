"""Lab 08, 08-fork-and-share: its declaration (``LAB``), its checks (``checks.py``, what the hidden tests call) and,
under ``tests/``, its catalogue of bugs and variants and its own tests."""

from autograder.course.model import Lab, Part, Stub, FORK

LAB = Lab(
    "08-fork-and-share",
    "fork and share",
    (
        Part(
            "fork", (Stub(FORK, "ForkingBlockManager.fork"),), ("lab08-visible-fork", "lab08-hidden-fork"), own_box=True
        ),
        Part(
            "copy-on-write",
            (Stub(FORK, "ForkingBlockManager.may_append"),),
            ("lab08-visible-cow", "lab08-hidden-cow", "lab08-hidden-oom"),
            # (_num_new_blocks_for_decode, the copy-on-write decision, stays: the given can_append needs it)
            own_box=True,
        ),
        Part(
            "beams",
            (Stub("engine/forking.py", "advance_beams"),),
            ("lab08-visible-beams", "lab08-hidden-beams"),
            own_box=True,
        ),
        Part("copy", (Stub("engine/cache_ops.py", "copy_blocks"),), ("lab08-visible-copy", "lab08-hidden-copy")),
    ),
    todo_object='ForkingBlockManager',
)
