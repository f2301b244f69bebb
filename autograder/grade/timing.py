"""Where a notebook's grading time went: ``Phases`` holds each phase's own seconds, and ``timed(phase)`` adds a
method's to its object's ``phases`` (the ``NotebookRun``'s: ``autograder.grade.notebook_run``).

``HardenedExecute`` writes them to the events file (``autograder.grade.grading_record``); the insight report
adds them up over the class.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from time import monotonic
from typing import Dict, Iterator, List


class Phases:
    """Seconds by phase of one notebook's grading, each phase's own: a phase timed inside another counts in its
    own phase only."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}
        self.inner: List[float] = []  # per phase being timed: the seconds of the phases timed inside it so far

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Add the seconds of the ``with`` body (less those of phases timed inside it) to ``phase``."""
        if not isinstance(phase, str) or not phase:
            raise ValueError(f"a phase is named by a non-empty string, not {phase!r}")
        self.inner.append(0.0)
        started = monotonic()
        try:
            yield
        finally:
            elapsed = monotonic() - started
            inner = self.inner.pop()
            self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed - inner
            if self.inner:
                self.inner[-1] += elapsed

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` measured outside ``timing`` (a kernel's start) to ``phase``."""
        if seconds < 0:
            raise ValueError(f"{seconds} s for {phase!r}: a phase's seconds are never negative")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def rounded(self) -> Dict[str, float]:
        """The seconds by phase, sorted by name and rounded to hundredths (what the events file holds)."""
        return {name: round(value, 2) for name, value in sorted(self.seconds.items())}


def timed(phase: str):
    """Add the method's own seconds (less those of timed methods it calls) to ``self.phases[phase]`` (``self``
    has a ``phases``: a ``Phases``)."""

    def wrap(method):
        @functools.wraps(method)
        def timed_method(self, *args, **kwargs):
            with self.phases.timing(phase):
                return method(self, *args, **kwargs)

        return timed_method

    return wrap
