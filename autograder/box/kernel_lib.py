"""A box's own library: the one folder of course code a grading kernel imports, copied into its private folder.

A kernel (and a compile box) imports two things of the course: the lab's **edition** of ``paged_kv`` (built by
``autograder.editions``; the open TODOs are stubs) and the grading channel's **agent**
(``autograder/agent``: plain data over a socket, nothing that grades). ``populate`` copies both into
``<private folder>/lib``, and that folder alone is the kernel's ``PYTHONPATH``: nothing of the grader's own
path (the repository, the graders, the reference package) is on it.

Being a copy, it needs no permission on the grader's folders: the editions cache and the course's checkout
can be closed to every other account (``autograder.box.trust``), and a kernel whose uid may read nothing of
the grader's still starts. Copying costs a few milliseconds (3 MB, the edition's byte-code included, whose
timestamps are kept so that it stays valid).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Union

AGENT = Path(__file__).resolve().parents[1] / "agent"
AGENT_FILES = ("__init__.py", "wire.py", "serve.py", "compile_box.py")
PACKAGE_INIT = '"""The grading agent (a copy in the box\'s own library: autograder.box.kernel_lib)."""\n'


def populate(edition: Union[str, Path], private_dir: Union[str, Path]) -> Path:
    """Copy ``edition``'s ``paged_kv/`` and the agent into ``private_dir/lib`` and return that folder.

    Raises FileNotFoundError when ``edition`` holds no ``paged_kv/`` (check that the edition was built)."""
    source = Path(edition) / "paged_kv"
    if not source.is_dir():
        raise FileNotFoundError(
            f"{edition} holds no paged_kv/: the lab's edition was not built (autograder.editions.build.build_edition)"
        )
    lib = Path(private_dir) / "lib"
    if lib.exists():
        shutil.rmtree(lib)
    shutil.copytree(source, lib / "paged_kv", symlinks=False, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    agent = lib / "autograder" / "agent"
    agent.mkdir(parents=True)
    (lib / "autograder" / "__init__.py").write_text(PACKAGE_INIT)
    for name in AGENT_FILES:
        shutil.copy2(AGENT / name, agent / name)
    for root, dirs, files in os.walk(lib):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return lib
