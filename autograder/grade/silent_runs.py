"""Code the grader runs in a boxed kernel without recording it: the preamble of every fresh kernel, the cells
replayed after a kernel died or in a part's box, and the agent's call at a graded cell (``graded_cells``).

Nothing here reads what the code printed: only whether it finished (``ok``/``error``), ran out of time or
killed its kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic
from typing import Any, Optional

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync

from autograder.verdict import channel as grading_channel

# Run silently in every fresh grading kernel, before the notebook: exit()/quit() become sys.exit().
PREAMBLE = """
def _pkv_no_exit(*args, **kwargs):
    raise SystemExit("exit() and quit() do not stop a graded notebook")
get_ipython().user_ns.update(exit=_pkv_no_exit, quit=_pkv_no_exit)
get_ipython().ask_exit = _pkv_no_exit
del _pkv_no_exit
"""


@dataclass
class Kernel:
    """One boxed kernel the grader talks to: its manager, its client and its grading channel."""

    km: Any
    kc: Any
    channel: Any


def wait_reply(kc, km, msg_id: str, timeout: Optional[float]):
    """The shell reply to ``msg_id`` (``timeout`` seconds, 30 when None); ``DeadKernelError`` when the kernel
    died meanwhile, ``TimeoutError`` when no reply came in time."""
    deadline = monotonic() + (timeout if timeout is not None else 30)
    while monotonic() < deadline:
        try:
            msg = run_sync(kc.shell_channel.get_msg)(timeout=1)
        except Exception:  # noqa: BLE001  (queue.Empty: check the kernel and keep waiting)
            if km is not None and not run_sync(km.is_alive)():
                raise DeadKernelError("Kernel died")
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
    raise TimeoutError("no reply in time")


def interrupt(km) -> None:
    try:
        run_sync(km.interrupt_kernel)()
    except Exception:  # noqa: BLE001 - a dead kernel cannot be interrupted
        pass


def silent(kc, km, code: str, timeout: Optional[float] = None) -> bool:
    """Run code without recording it; False when the kernel died or it failed."""
    try:
        msg_id = kc.execute(code, silent=True, store_history=False)
        reply = wait_reply(kc, km, msg_id, timeout)
    except (DeadKernelError, CellTimeoutError, TimeoutError):
        return False
    return reply is not None and reply["content"].get("status") == "ok"


def run_silently(kernel: Kernel, code: str, timeout: float) -> str:
    """Run ``code`` in ``kernel`` without recording it: ``ok``, ``error``, ``timeout`` (interrupted, it
    stopped) or ``dead`` (it died, or did not stop when interrupted)."""
    try:
        msg_id = kernel.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        reply = wait_reply(kernel.kc, kernel.km, msg_id, timeout)
    except DeadKernelError:
        return "dead"
    except TimeoutError:
        interrupt(kernel.km)
        try:
            wait_reply(kernel.kc, kernel.km, msg_id, grading_channel.GRACE_S)
            return "timeout"
        except (DeadKernelError, TimeoutError):
            return "dead"
    return "ok" if reply["content"].get("status") == "ok" else "error"
