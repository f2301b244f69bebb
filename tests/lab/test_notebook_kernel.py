"""Notebooks open saved: they store exactly the kernel name and language_info that `make env`'s kernel reports."""

import sys

import nbformat
import pytest

from autograder.course.layout import LABS, RELEASE_DIR, SOURCE_DIR
from paged_kv.lab.notebook_kernel import KERNELSPEC, LANGUAGE_INFO, install


@pytest.mark.parametrize("folder", [SOURCE_DIR, RELEASE_DIR], ids=["source", "release"])
def test_every_notebook_stores_the_course_kernel_and_its_language_info(folder):
    for lab, name in LABS.items():
        metadata = nbformat.read(folder / lab / name, as_version=4).metadata
        assert metadata["kernelspec"] == KERNELSPEC, f"{lab}: {metadata['kernelspec']}"
        assert metadata["language_info"] == LANGUAGE_INFO, f"{lab}: {metadata['language_info']}"
        assert "version" not in metadata["language_info"], "a Python version here differs between machines"


def test_make_env_installs_the_course_kernel():
    from pathlib import Path

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "-m paged_kv.lab.notebook_kernel install" in makefile


def test_the_installed_kernel_reports_what_the_notebooks_store(tmp_path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    folder = install(prefix=str(tmp_path))
    specs = KernelSpecManager(kernel_dirs=[str(folder.parent)])
    spec = specs.get_kernel_spec("python3")
    assert spec.display_name == KERNELSPEC["display_name"]
    assert spec.argv[0] == sys.executable and "paged_kv.lab.notebook_kernel" in spec.argv
    manager = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        reply = client.kernel_info(reply=True, timeout=60)
        assert reply["content"]["language_info"] == LANGUAGE_INFO
        shown = []
        result = client.execute_interactive("print(6 * 7)", timeout=60, output_hook=shown.append)
        assert result["content"]["status"] == "ok"
        assert any(m["content"].get("text") == "42\n" for m in shown)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
