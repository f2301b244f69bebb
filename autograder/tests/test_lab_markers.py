"""Each lab's pytest marker is derived, never written by hand: a lab's folders, its parametrized cases and the
package tests of its TODOs' modules carry ``labNN`` (``autograder/labs/markers.py``, applied by ``conftest.py``)."""

from __future__ import annotations

import pytest

from autograder.labs import LABS
from autograder.labs.lab01_capacity_ledger import checks as lab01_checks
from autograder.labs.markers import REPO, lab_ids, lab_of_marker, labs_of_params, labs_of_path, marker


def test_a_labs_marker_is_its_number_and_names_it_back():
    assert marker("05-prefix-cache") == "lab05"
    assert lab_of_marker("lab09") == lab_of_marker("09-chunked-prefill") == "09-chunked-prefill"
    with pytest.raises(ValueError, match="not a lab id"):
        marker("prefix cache")
    with pytest.raises(ValueError, match="the labs are 00-start-here"):
        lab_of_marker("lab42")


@pytest.mark.parametrize("lab", [entry.lab for entry in LABS])
def test_every_graded_labs_folders_and_the_package_tests_of_its_todos_are_its(lab):
    from autograder.labs import package_name

    folder = REPO / "autograder" / "labs" / package_name(lab)
    assert all(labs_of_path(p) == {lab} for p in folder.rglob("test_*.py")), lab
    assert all(labs_of_path(p) == {lab} for p in (REPO / "solutions" / lab).glob("*.ipynb")), lab
    package_tests = [p for p in (REPO / "tests").glob("*/test_*.py") if lab in labs_of_path(p)]
    assert package_tests, f"no package test of lab {lab}'s TODOs is marked"


def test_package_tests_follow_the_modules_they_test():
    tests = REPO / "tests"
    assert labs_of_path(tests / "cache" / "test_ledger.py") == {"01-capacity-ledger"}
    assert labs_of_path(tests / "cache" / "test_manager.py") == {
        "02-atomic-prefill",
        "03-decode-growth",
        "04-logical-reconstruction",
    }
    assert "09-chunked-prefill" in labs_of_path(tests / "engine" / "test_chunked.py")
    assert labs_of_path(tests / "lab" / "test_chunked_lab.py") == {"09-chunked-prefill"}  # lab 09 alone uses it
    assert labs_of_path(tests / "test_docs.py") == set()  # no layer's test: every lab's
    assert labs_of_path(tests / "notebooks" / "test_hub_in_browser.py") == set()


def test_a_parametrized_case_is_its_labs_by_id_parameter_or_check():
    assert labs_of_params({"lab": "07-serve-it"}) == {"07-serve-it"}
    assert labs_of_params({"lab, part": ("05-prefix-cache", "admit")}) == {"05-prefix-cache"}
    assert labs_of_params({"check": lab01_checks.check_total_bytes}) == {"01-capacity-ledger"}
    assert labs_of_params({}, "lab03-check_boundaries") == {"03-decode-growth"}
    assert labs_of_params({}, "solutions/09-chunked-prefill/facts.md") == {"09-chunked-prefill"}
    assert labs_of_params({"level": "rlimits", "n": 3}, "rlimits-3") == set()
    assert labs_of_params({}, "lab031-x") == set() and len(lab_ids()) >= 10
