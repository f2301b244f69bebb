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


class _Channel:
    def __init__(self):
        self.asked = []

    def get_msg(self, timeout=None):
        self.asked.append(timeout)
        if len(self.asked) < 2:
            raise Empty
        return {"msg": "idle"}


class _Client:
    def __init__(self):
        self.shell_channel, self.iopub_channel = _Channel(), _Channel()


def test_both_channels_a_cell_waits_on_poll_once_however_often_they_are_wrapped(monkeypatch):
    """The shell reply and the IOPub output (nbclient waits on each) are asked in steps; wrapping twice (a spare
    kernel's client handed on) adds no second layer."""
    monkeypatch.setattr(notebook_client, "POLL_S", 0.01)
    client = notebook_client.poll_channels(notebook_client.poll_channels(_Client()))
    for channel in (client.shell_channel, client.iopub_channel):
        assert asyncio.run(channel.get_msg(timeout=None)) == {"msg": "idle"}
        assert channel.asked == [0.01, 0.01]  # no wait without end (IOPub's None), one layer of steps


def test_the_graders_kernel_client_polls():
    """The client the grader's notebook kernel gets polls (nbclient's sync name would otherwise bind nbclient's
    own client starter, without the polling); a part's box kernel gets its client in ``boxed_kernels``."""
    from autograder.grade.hardened import HardenedExecute

    class Manager:
        def client(self):
            client = _Client()
            client.start_channels = lambda: None
            client.wait_for_ready = lambda timeout=None: None
            return client

    grader = HardenedExecute()
    grader.km = Manager()
    client = grader.start_new_kernel_client()
    assert client is grader.kc and getattr(client.shell_channel.get_msg, "polls", False)
    assert getattr(client.iopub_channel.get_msg, "polls", False)
