"""A notebook client that does not wait out a cell's whole timeout for a reply that has already come.

nbclient 0.11 asks the kernel's shell channel for a cell's reply once, with the cell's whole timeout; after a cell
that displays widgets (comm messages on the other channels) that one wait can miss the reply and last the whole
timeout, although the kernel answered at once (jupyter/nbclient#312, open). ``poll_channels`` makes a client ask its
shell and IOPub channels again every ``POLL_S`` seconds until the same deadline, so a missed wake-up costs at most
``POLL_S``. ``NotebookClient`` here is nbclient's with that client: the course runs whole notebooks outside nbgrader
with it (``autograder.editions.check``, tests); the grader's kernels poll too (``autograder.grade.hardened``,
``boxed_kernels``): before, about one graded notebook in three waited out a 30 s cell timeout on a cell that had
finished (lab 01's class, 2026-12-07).
"""

from __future__ import annotations

from queue import Empty
from time import monotonic

from jupyter_core.utils import ensure_async, run_sync
from nbclient import NotebookClient as _NbClient

POLL_S = 0.1


def _polling(get_msg):
    """``get_msg(timeout)`` asked in steps of at most ``POLL_S`` seconds until ``timeout`` (None: forever)."""

    async def get(timeout=None, **kwargs):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            step = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - monotonic()))
            try:
                return await ensure_async(get_msg(timeout=step, **kwargs))
            except Empty:
                if deadline is not None and monotonic() >= deadline:
                    raise

    return get


def poll_channels(client):
    """``client`` (a kernel client), its shell and IOPub channels asked in steps of ``POLL_S`` (module doc); returned."""
    for channel in (client.shell_channel, client.iopub_channel):
        if not getattr(channel.get_msg, "polls", False):
            channel.get_msg = _polling(channel.get_msg)
            channel.get_msg.polls = True
    return client


class PollingClient:
    """A mixin for an ``nbclient.NotebookClient`` (nbgrader's executor is one): its kernel client polls its channels
    (``poll_channels``). nbclient's sync ``start_new_kernel_client`` binds nbclient's own starter, so it is bound
    again here."""

    async def async_start_new_kernel_client(self):
        return poll_channels(await super().async_start_new_kernel_client())

    start_new_kernel_client = run_sync(async_start_new_kernel_client)


class NotebookClient(PollingClient, _NbClient):
    """``nbclient.NotebookClient`` whose kernel client polls its channels (``PollingClient``)."""
