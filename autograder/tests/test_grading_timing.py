"""Where a notebook's grading time went (``autograder.grade.timing``): each phase counts its own seconds only."""

from __future__ import annotations

import pytest

from autograder.grade import timing


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    made = Clock()
    monkeypatch.setattr(timing, "monotonic", made)
    return made


class Piece:
    def __init__(self, clock):
        self.phases, self.clock = timing.Phases(), clock

    @timing.timed("outer")
    def outer(self):
        self.clock.now += 2
        self.inner()
        self.clock.now += 1

    @timing.timed("inner")
    def inner(self):
        self.clock.now += 5


def test_a_phase_timed_inside_another_counts_in_its_own_phase_only(clock):
    piece = Piece(clock)
    piece.outer()
    piece.inner()
    assert piece.phases.seconds == {"outer": 3.0, "inner": 10.0}


def test_a_phase_that_raises_is_still_counted(clock):
    phases = timing.Phases()
    with pytest.raises(KeyError):
        with phases.timing("reading"):
            clock.now += 1.5
            raise KeyError("x")
    assert phases.seconds == {"reading": 1.5} and phases.inner == []


def test_seconds_measured_elsewhere_add_up_and_round_in_name_order():
    phases = timing.Phases()
    phases.add("kernel start", 1.004)
    phases.add("kernel start", 2.0)
    phases.add("a probe", 0.126)
    assert list(phases.rounded().items()) == [("a probe", 0.13), ("kernel start", 3.0)]
    with pytest.raises(ValueError, match="never negative"):
        phases.add("kernel start", -1)
    with pytest.raises(ValueError, match="non-empty string"):
        with phases.timing(""):
            pass
