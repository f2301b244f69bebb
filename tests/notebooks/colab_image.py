"""What a Colab runtime holds, and how Colab rewrites a notebook it saves: the facts the Colab tests
stand on (Colab itself cannot be reached from the course's machines).

Package versions: googlecolab/backend-info, commit a724079 of 2026-08-19 ("Upgrade to Python 3.13"),
files os-info.txt, pip-freeze.txt (CPU runtime) and pip-freeze.gpu.txt (GPU runtime). That repository
publishes the runtime image's `pip freeze`; Colab notes the live image can lag it by a day or two.
"""

from __future__ import annotations

import copy
import random
import string
from typing import Dict

COLAB_PYTHON = "3.13.15"
# Only the packages the course's package or its notebooks touch.
COLAB_CPU: Dict[str, str] = {
    "torch": "2.11.0+cpu",
    "numpy": "2.1.3",
    "matplotlib": "3.10.0",
    "xxhash": "4.0.1",
    "ipywidgets": "7.7.1",
    "widgetsnbextension": "3.6.10",
    "ipython": "7.34.0",
    "ipykernel": "6.17.1",
    "notebook": "6.5.7",
    "nbformat": "5.11.1",
}
COLAB_GPU: Dict[str, str] = dict(COLAB_CPU, torch="2.11.0+cu128", triton="3.6.0")

# The fake Colab built by the tests: Colab's versions where this machine's Python (3.11) can install
# them; torch is the CPU build on this machine's disk (2.13.0), the torch that is "already there".
FAKE_COLAB_REQUIREMENTS = (
    ["torch==2.13.0"]
    + [f"{name}=={version}" for name, version in COLAB_CPU.items() if name not in ("torch", "notebook")]
    + ["pytest"]
)


def _colab_cell_id(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits + "-_") for _ in range(12))


def as_saved_by_colab(notebook: dict, nbformat_minor: int, gpu: bool = True, seed: int = 0) -> dict:
    """``notebook`` (.ipynb JSON) as Colab writes it back after a student ran it and saved it.

    What Colab changes (seen in notebooks it saved, and colabtools#5402 / cocalc#5504 for cell ids):
    notebook metadata gets ``colab`` (provenance, name, toc_visible, gpuType), ``accelerator`` on a
    GPU runtime and the widgets' state; the kernelspec loses ``language``; each cell's metadata gets
    Colab's own ``id``, code cells ``colab`` (base_uri, height), ``executionInfo`` and ``outputId``,
    and outputs. Colab keeps top-level cell ids of nbformat 4.5 notebooks it opened
    (``nbformat_minor=5``); a notebook saved as 4.0 (``nbformat_minor=0``) has none. Every other
    metadata key (nbgrader's included) is kept.
    """
    rng = random.Random(seed)
    saved = copy.deepcopy(notebook)
    saved["nbformat_minor"] = nbformat_minor
    meta = saved["metadata"]
    meta["colab"] = {"provenance": [], "name": "lab.ipynb", "toc_visible": True}
    if gpu:
        meta["colab"]["gpuType"] = "T4"
        meta["accelerator"] = "GPU"
    meta["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    meta["language_info"] = {"name": "python"}
    meta["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    for count, cell in enumerate(saved["cells"], start=1):
        if nbformat_minor < 5:
            cell.pop("id", None)
        cell["metadata"]["id"] = _colab_cell_id(rng)
        if cell["cell_type"] == "code":
            cell["metadata"]["colab"] = {"base_uri": "https://localhost:8080/", "height": rng.randint(20, 400)}
            cell["metadata"]["executionInfo"] = {
                "status": "ok",
                "timestamp": 1_790_000_000_000 + count,
                "user_tz": -60,
                "elapsed": rng.randint(1, 900),
                "user": {"displayName": "A Student", "userId": "0123456789"},
            }
            cell["metadata"]["outputId"] = f"{rng.getrandbits(128):032x}"
            cell["execution_count"] = count
            cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["ran in Colab\n"]}]
    return saved
