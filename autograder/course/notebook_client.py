"""A notebook client that does not wait out a cell's whole timeout for a reply that has already come.

nbclient 0.11 asks the kernel's shell channel for a cell's reply once, with the cell's whole timeout; after a cell
that displays widgets (comm messages on the other channels) that one wait can miss the reply and last the whole
timeout, although the kernel answered at once (jupyter/nbclient#312, open). ``NotebookClient`` here asks again every
``POLL_S`` seconds until the same deadline, so a missed wake-up costs at most ``POLL_S``. Used where the course runs
whole notebooks outside nbgrader (``autograder.editions.check``, tests).
"""

from __future__ import annotations

from queue import Empty
from time import monotonic

from jupyter_core.utils import ensure_async, run_sync
from nbclient import NotebookClient as _NbClient

POLL_S = 1.0


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


class NotebookClient(_NbClient):
    """``nbclient.NotebookClient`` whose shell channel is asked for a reply a second at a time (module doc)."""

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        client.shell_channel.get_msg = _polling(client.shell_channel.get_msg)
        return client

    start_new_kernel_client = run_sync(async_start_new_kernel_client)
