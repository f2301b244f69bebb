"""The notebook client's reply wait (autograder/course/notebook_client.py): a missed wake-up costs a step, not the
cell's whole timeout, and the deadline still holds."""

import asyncio
from queue import Empty
from time import monotonic

import pytest

from autograder.course import notebook_client


def test_a_reply_missed_by_one_wait_is_found_by_the_next(monkeypatch):
    monkeypatch.setattr(notebook_client, "POLL_S", 0.01)
    asked = []

    def get_msg(timeout=None):
        asked.append(timeout)
        if len(asked) < 3:
            raise Empty
        return {"msg": "reply"}

    got = asyncio.run(notebook_client._polling(get_msg)(timeout=60))
    assert got == {"msg": "reply"} and len(asked) == 3 and max(asked) <= 0.01  # asked in steps, not for 60 s


def test_the_cells_deadline_still_holds(monkeypatch):
    monkeypatch.setattr(notebook_client, "POLL_S", 0.01)

    def never(timeout=None):
        raise Empty

    started = monotonic()
    with pytest.raises(Empty):
        asyncio.run(notebook_client._polling(never)(timeout=0.05))
    assert monotonic() - started >= 0.04  # asked until the deadline, then Empty as before
