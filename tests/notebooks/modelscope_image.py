"""What a ModelScope (魔搭) notebook instance holds: the facts the ModelScope tests stand on (ModelScope cannot be
reached from the course's machines, and GitHub often cannot be reached from ModelScope's).

ModelScope publishes no package list of its notebook images (Colab does: colab_image.py). What is known comes
from the scripts that build them, github:modelscope/modelscope at 2905da1 (2026-07-23; release v1.38.1 of
2026-07-06 has the same defaults), docker/:

- ``build_image.py``: Python 3.12.13 (``--python_version``'s default, also the default of
  .github/workflows/docker-image.yml), Ubuntu 22.04; torch 2.10.0 on both images: the GPU image's is PyPI's CUDA
  build (CUDA 12.8.1 base image), whose metadata requires ``triton==3.6.0`` on Linux x86_64 (PyPI, torch
  2.10.0); the CPU image's comes from PyTorch's CPU index (``--index-url https://download.pytorch.org/whl/cpu``,
  ``install_cpu.sh``), which brings no Triton. The "old" image type still built there is
  ``ubuntu22.04-py311-torch2.3.1-1.34.0``: Python 3.11, torch 2.3.1.
- ``Dockerfile.ubuntu``: ``pip==23.*``; ``ipykernel`` and ``ipywidgets`` unpinned; ``numpy>=2.0``
  reinstalled last; matplotlib (requirements/audio) and xxhash (through ``datasets``, requirements/
  framework.txt) come with ModelScope's own requirements; ``git`` from apt; ``ENV MODELSCOPE_CACHE=
  /mnt/workspace/.cache/modelscope/hub``; then ``pip config set global.index-url
  https://mirrors.aliyun.com/pypi/simple`` (extra index PyPI).
- ``scripts/modelscope_env_init.sh`` (copied to /usr/local/bin/ms_env_init.sh, run when an instance starts):
  reads ``MODELSCOPE_ENVIRONMENT`` (and MODELSCOPE_USERNAME, ...), which the platform sets, and points pip at
  Aliyun's internal mirror, ``PIP_CONFIG`` below.

Unpinned packages are the newest release on PyPI for Python 3.12 before the v1.38.1 release (2026-07-06), as
pip chose them then (``pip install --dry-run --uploaded-prior-to 2026-07-06T00:00:00Z --python-version 3.12``):
a derivation from the build scripts, not a published list.
"""

from __future__ import annotations

from typing import Dict

MODELSCOPE_PYTHON = "3.12.13"
# Only the packages the course's package or its notebooks touch, and pip (the setup cell's installer).
MODELSCOPE_CPU: Dict[str, str] = {
    "torch": "2.10.0+cpu",
    "numpy": "2.5.1",
    "matplotlib": "3.11.0",
    "xxhash": "3.8.0",
    "ipywidgets": "8.1.8",
    "widgetsnbextension": "4.0.15",
    "jupyterlab-widgets": "3.0.16",
    "ipython": "9.15.0",
    "ipykernel": "7.3.0",
    "nbformat": "5.10.4",
    "pip": "23.3.2",
}
MODELSCOPE_GPU: Dict[str, str] = dict(MODELSCOPE_CPU, torch="2.10.0", triton="3.6.0")

# The instance's pip configuration (modelscope_env_init.sh's three `pip config set` lines).
PIP_CONFIG: Dict[str, Dict[str, str]] = {
    "global": {
        "index-url": "https://mirrors.cloud.aliyuncs.com/pypi/simple",
        "extra-index-url": "https://pypi.org/simple",
    },
    "install": {"trusted-host": "mirrors.cloud.aliyuncs.com"},
}
# The instance's environment as the setup cell reads it: MODELSCOPE_CACHE is the image's (Dockerfile.ubuntu);
# MODELSCOPE_ENVIRONMENT's value in a notebook is not documented (ModelScope's modelscope-studio compares it with
# 'studio', the Studios' value; its CI sets 'ci'; its SDK reads 'custom' when unset): the cell tests that it is set, whatever its
# value; the fake instance says 'dsw', the name ModelScope's code gives its notebooks' platform (PAI-DSW:
# DownloadChannel.DSW in modelscope/utils/constant.py).
ENVIRONMENT: Dict[str, str] = {
    "MODELSCOPE_ENVIRONMENT": "dsw",
    "MODELSCOPE_CACHE": "/mnt/workspace/.cache/modelscope/hub",
}

# The fake instance built by the tests: the image's versions where this machine's Python (3.11) can install them.
# torch is the CPU build on this machine's disk (2.13.0), the torch that is "already there"; numpy 2.5 needs
# Python 3.12, so the newest numpy for 3.11 (2.4.6) stands in for it.
FAKE_MODELSCOPE_REQUIREMENTS = ["torch==2.13.0", "numpy==2.4.6"] + [
    f"{name}=={version}" for name, version in MODELSCOPE_CPU.items() if name not in ("torch", "numpy")
]
