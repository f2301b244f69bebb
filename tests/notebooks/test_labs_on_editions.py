"""A class's handout for lab NN carries the package edition of lab NN (``autograder.editions``): its TODOs and
every later lab's are stubs. Each lab, finished as the solution finishes it, runs top to bottom on its own
edition (no given cell, picture or visible test leans on an answer the handout leaves out); since an earlier
lab's edition leaves out everything a later lab's does (``test_editions``), each also runs on the editions of
every later lab, so a handout for lab NN runs its labs up to NN. Lab 00 runs on the first lab's edition."""

from __future__ import annotations

import pytest

from autograder.editions.build import REPO
from autograder.editions.check import run_on_edition
from autograder.course.layout import discover_labs
from autograder.course.layout import graded_labs

GRADED = graded_labs(REPO / "solutions")
CASES = [(lab, lab) for lab in GRADED] + [
    (lab, GRADED[0]) for lab in discover_labs(REPO / "solutions") if lab not in GRADED and lab < GRADED[0]
]


@pytest.mark.parametrize("lab, edition", CASES, ids=[f"{lab}-on-{edition[:2]}" for lab, edition in CASES])
def test_a_finished_lab_runs_top_to_bottom_on_its_edition(lab, edition):
    errors = run_on_edition(lab, edition)
    assert not errors, "\n".join(str(e) for e in errors)
