"""Where a notebook's grading time went: ``timed(phase)`` adds a method's own seconds to its executor's ``phases``.

``HardenedExecute`` writes ``phases`` to the events file (``autograder.grade.grading_record``); the insight report
adds them up over the class.
"""

from __future__ import annotations

import functools
from time import monotonic


def timed(phase: str):
    """Add the method's own seconds (less those of timed methods it calls) to its executor's ``phases[phase]``
    (the executor is ``self``, or ``self.executor`` for the objects that grade for it: a part's box, the graded
    cells)."""

    def wrap(method):
        @functools.wraps(method)
        def timed_method(self, *args, **kwargs):
            executor = getattr(self, "executor", self)
            stack = executor.__dict__.setdefault("_timing", [])
            stack.append(0.0)  # seconds of the timed calls made inside this one
            started = monotonic()
            try:
                return method(self, *args, **kwargs)
            finally:
                elapsed = monotonic() - started
                inner = stack.pop()
                phases = executor.__dict__.setdefault("phases", {})
                phases[phase] = phases.get(phase, 0.0) + elapsed - inner
                if stack:
                    stack[-1] += elapsed

        return timed_method

    return wrap
