"""Which edition of the course package this is.

The repository's package is the whole course (``LAB`` is None): every implementation is here, for
self-study and for the trusted grader. ``autograder.editions`` writes this file into each edition it
builds: ``LAB`` is the lab whose TODOs (with every later lab's) the edition leaves out, ``PART`` the one
part of a multi-part lab whose TODOs a grading box leaves out (None: all of that lab's), and ``STUBBED``
the qualified names of what it left out.
"""

from typing import FrozenSet, Optional

LAB: Optional[str] = None
PART: Optional[str] = None
STUBBED: FrozenSet[str] = frozenset()


def describe() -> str:
    """One line for a notebook's setup cell: which TODOs this copy of the package leaves out."""
    if LAB is None:
        return "the whole course (every lab's reference implementation)"
    part = f", part {PART!r} only" if PART else ""
    return f"the edition of lab {LAB}{part}: {len(STUBBED)} implementations left out (its TODOs and later labs')"
