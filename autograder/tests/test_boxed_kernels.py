"""Starting and stopping a boxed kernel (``autograder.grade.boxed_kernels``) without booting one: a manager that
fails to start is discarded, a spare that runs already is not started again, and the kernel works in a copy of
the assignment's files (never its notebooks, never through a link); its client polls its channels."""

from __future__ import annotations

import os

import pytest

from autograder.grade import boxed_kernels


class Channel:
    def get_msg(self, timeout=None):
        return {}


class Client:
    def __init__(self, ready: bool):
        self.ready, self.started, self.stopped, self.allow_stdin = ready, False, False, True
        self.shell_channel, self.iopub_channel = Channel(), Channel()

    def start_channels(self):
        self.started = True

    def stop_channels(self):
        self.stopped = True

    async def wait_for_ready(self, timeout=None):
        if not self.ready:
            raise RuntimeError("Kernel didn't respond in 60 seconds")


class Manager:
    def __init__(self, folder, ready=True, has_kernel=False):
        self.private_dir, self.has_kernel, self.calls = str(folder), has_kernel, []
        self.kc = Client(ready)

    async def start_kernel(self, extra_arguments=None):
        self.calls.append(("start", tuple(extra_arguments)))

    def client(self):
        return self.kc

    async def shutdown_kernel(self, now=False):
        self.calls.append(("shutdown", now))

    def cleanup_resources(self):
        self.calls.append(("cleanup",))


def test_a_kernel_that_does_not_become_ready_is_discarded_and_the_error_raised(tmp_path):
    km = Manager(tmp_path, ready=False)
    with pytest.raises(RuntimeError, match="didn't respond"):
        boxed_kernels.start_kernel(km, ["--x"], 1)
    assert km.kc.stopped and km.calls == [("start", ("--x",)), ("shutdown", True), ("cleanup",)]


def test_a_spare_is_not_started_again_and_its_kernel_takes_no_stdin_and_gets_a_channel(tmp_path):
    km = Manager(tmp_path, has_kernel=True)
    kernel = boxed_kernels.start_kernel(km, None, 1)
    try:
        assert km.calls == [] and kernel.kc is km.kc and kernel.kc.started and kernel.kc.allow_stdin is False
        assert kernel.kc.shell_channel.get_msg.polls and kernel.kc.iopub_channel.get_msg.polls  # notebook_client
        assert kernel.channel.path == os.path.join(str(tmp_path), "verdict.sock") and os.path.exists(
            kernel.channel.path
        )
    finally:
        boxed_kernels.close_kernel(kernel)
    assert km.kc.stopped and km.calls == [("shutdown", True), ("cleanup",)]


def test_the_kernel_works_in_a_copy_of_the_assignments_files_without_notebooks_or_links(tmp_path):
    source, work = tmp_path / "submitted", tmp_path / "work"
    (source / "data").mkdir(parents=True)
    work.mkdir()
    (source / "lab.ipynb").write_text("{}")
    (source / "trace.json").write_text("[1]")
    (source / "data" / "a.txt").write_text("a")
    (tmp_path / "secret").write_text("s")
    (source / "link").symlink_to(tmp_path / "secret")

    class Km:
        workdir = str(work)

    boxed_kernels.copy_assignment_files({"metadata": {"path": str(source)}}, Km())
    assert sorted(p.name for p in work.iterdir()) == ["data", "trace.json"]
    assert (work / "data" / "a.txt").read_text() == "a"
    boxed_kernels.copy_assignment_files({}, Km())  # no folder: nothing to copy, no error


def test_spare_settings_key_the_same_whatever_their_order():
    assert boxed_kernels.spare_key({"a": 1, "b": [2]}) == boxed_kernels.spare_key({"b": [2], "a": 1})
    assert boxed_kernels.spare_key({"a": 1}) != boxed_kernels.spare_key({"a": 2})
