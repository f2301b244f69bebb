"""The Jupyter kernel that `make env` installs: ipykernel, reporting its language without the patch version.

When JupyterLab opens a notebook it writes the kernel's name and ``language_info`` into the notebook's
metadata; if they differ from what the file holds (Python 3.11.7 on one machine, 3.12.3 on another),
the notebook opens marked as unsaved. The course notebooks store ``KERNELSPEC`` and ``LANGUAGE_INFO``
(no ``version``), and this kernel reports exactly those, on every Python. Elsewhere (Colab, another
Jupyter) the notebooks run on any ``python3`` kernel.

``python -m paged_kv.lab.notebook_kernel install`` installs it as the ``python3`` kernel of this
environment; ``python -m paged_kv.lab.notebook_kernel -f CONNECTION_FILE`` is how Jupyter starts it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict

from ipykernel.ipkernel import IPythonKernel

DISPLAY_NAME = "Python 3 (paged-kv-course)"
KERNELSPEC: Dict[str, str] = {"display_name": DISPLAY_NAME, "language": "python", "name": "python3"}
LANGUAGE_INFO: Dict[str, object] = {
    key: value for key, value in IPythonKernel.language_info.items() if key != "version"
}


class CourseKernel(IPythonKernel):
    """IPython's kernel, with ``LANGUAGE_INFO`` (no Python patch version) in its kernel_info reply."""

    language_info = LANGUAGE_INFO


def install(prefix: str = sys.prefix) -> Path:
    """Install this kernel as ``python3`` under ``prefix`` (the virtual environment); returns its folder."""
    from ipykernel.kernelspec import install as install_ipykernel

    folder = Path(install_ipykernel(kernel_name="python3", display_name=DISPLAY_NAME, prefix=prefix))
    spec_file = folder / "kernel.json"
    spec = json.loads(spec_file.read_text())
    if "ipykernel_launcher" not in spec["argv"]:
        raise RuntimeError(f"unexpected ipykernel kernelspec argv: {spec['argv']}")
    spec["argv"][spec["argv"].index("ipykernel_launcher")] = "paged_kv.lab.notebook_kernel"
    spec_file.write_text(json.dumps(spec, indent=1))
    return folder


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["install"]:
        print(f"installed the {DISPLAY_NAME!r} kernel in {install()}")
        return
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(argv=argv, kernel_class=CourseKernel)


if __name__ == "__main__":
    main()
