"""Code run in a kernel unrecorded (``autograder.grade.silent_runs``), against a fake kernel: what each reply (or its
absence, or the kernel's death) becomes, and that a run past its time is interrupted."""

from __future__ import annotations

import queue

from autograder.grade import silent_runs
from autograder.grade.silent_runs import Kernel


class FakeKernel:
    """Client and manager at once: ``replies`` are the statuses it answers in turn (None: no answer yet);
    ``alive`` False once it died; an interrupt makes it answer ``after_interrupt``."""

    def __init__(self, replies, alive=True, after_interrupt=None):
        self.replies, self.alive, self.after_interrupt = list(replies), alive, after_interrupt
        self.shell_channel, self.ran, self.interrupts, self.msg_id = self, [], 0, None

    def execute(self, code, **kwargs):
        self.ran.append((code, kwargs.get("silent"), kwargs.get("store_history")))
        self.msg_id = f"m{len(self.ran)}"
        return self.msg_id

    async def get_msg(self, timeout=None):
        status = self.replies.pop(0) if self.replies else None
        if status is None:
            raise queue.Empty()
        return {"parent_header": {"msg_id": self.msg_id}, "content": {"status": status}}

    async def is_alive(self):
        return self.alive

    async def interrupt_kernel(self):
        self.interrupts += 1
        if self.after_interrupt:
            self.replies.append(self.after_interrupt)


def _kernel(fake):
    return Kernel(km=fake, kc=fake, channel=None)


def test_a_silent_run_says_ok_or_error_and_records_nothing():
    ok, failing = FakeKernel(["ok"]), FakeKernel(["error"])
    assert silent_runs.run_silently(_kernel(ok), "x = 1", 5) == "ok"
    assert silent_runs.run_silently(_kernel(failing), "1/0", 5) == "error"
    assert ok.ran == [("x = 1", True, False)]


def test_a_silent_run_past_its_time_is_interrupted_and_counts_as_timeout_if_it_stops():
    fake = FakeKernel([], after_interrupt="error")
    assert silent_runs.run_silently(_kernel(fake), "while True: pass", 0.2) == "timeout"
    assert fake.interrupts == 1


def test_a_silent_run_whose_kernel_died_is_dead():
    assert silent_runs.run_silently(_kernel(FakeKernel([], alive=False)), "import os; os._exit(1)", 5) == "dead"


def test_silent_says_whether_the_code_ran_without_error():
    assert silent_runs.silent(FakeKernel(["ok"]), None, "x = 1", timeout=5)
    assert not silent_runs.silent(FakeKernel(["error"]), None, "1/0", timeout=5)
    assert not silent_runs.silent(FakeKernel([], alive=False), FakeKernel([], alive=False), "x", timeout=5)
