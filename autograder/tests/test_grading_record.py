"""The grading record (``autograder.verdict.events``): one schema for its writer and its readers."""

from __future__ import annotations

import json

import pytest

from autograder.verdict.events import (
    EventKind,
    VerdictKind,
    check_record,
    describe,
    event,
    events_path,
    read_record,
    write_record,
)


def _record(**changes):
    record = {
        "student": "s1",
        "assignment": "02-atomic-prefill",
        "isolation": "bubblewrap",
        "seconds": 3.5,
        "events": [event("lab02-hidden-count", EventKind.TIMEOUT, "> 30 s", graded=True)],
        "verdicts": {
            "lab02-hidden-count": {
                "passed": False,
                "kind": VerdictKind.TIMEOUT.value,
                "seconds": 30.0,
                "requests": 2,
                "message": "",
            }
        },
    }
    record.update(changes)
    return record


def test_a_record_written_is_read_back_unchanged(tmp_path):
    path = events_path(tmp_path, "02-atomic-prefill", "s1")
    write_record(path, _record())
    assert read_record(path) == json.loads(json.dumps(_record()))


@pytest.mark.parametrize(
    "changes, where",
    [
        ({"events": [{"cell": "x", "kind": "typo-kind", "graded": True}]}, "events/0/kind"),
        ({"verdicts": {"x": {"passed": "yes", "kind": "pass"}}}, "verdicts/x/passed"),
        ({"seconds": "3"}, "seconds"),
    ],
)
def test_a_record_that_breaks_the_schema_is_refused_naming_the_field(changes, where):
    with pytest.raises(ValueError, match=where):
        check_record(_record(**changes))


def test_a_reader_names_the_file_that_is_not_a_record(tmp_path):
    path = tmp_path / "s1.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="s1.json: not JSON"):
        read_record(path)


def test_an_event_kind_must_be_declared_before_it_is_logged():
    with pytest.raises(TypeError, match="EventKind"):
        event("cell", "made-up", "detail")


def test_every_event_kind_has_the_text_the_notes_show():
    for kind in EventKind:
        assert kind.text and describe(event("c", kind, "why")).startswith(kind.text)
    assert describe(event("c", EventKind.NOT_RUN, "budget")) == EventKind.NOT_RUN.text


def test_every_event_kind_belongs_to_one_group_the_views_list_it_under():
    """The instructor's views list events by group (``kinds_of``): a kind without a group would vanish there."""
    from autograder.verdict.events import EventGroup, kinds_of

    grouped = [kind for group in EventGroup for kind in kinds_of(group)]
    assert sorted(grouped) == sorted(EventKind) and len(grouped) == len(set(grouped))
    assert f"{EventKind.OUTPUT_CUT}" == "output-cut" and f"{EventGroup.LIMIT:>6}" == " limit"  # print as values


def test_a_verdicts_kind_is_a_verdict_kind():
    from autograder.verdict.cells import Verdict
    from autograder.verdict.events import VerdictKind

    assert Verdict("g", False, "check").kind is VerdictKind.CHECK
    with pytest.raises(ValueError, match="declare it in autograder.verdict.events.VerdictKind"):
        Verdict("g", False, "made-up")
