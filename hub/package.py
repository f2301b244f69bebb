"""The course package the hub's students import: one edition at a time, in ``HUB_DIR/package``.

``make hub-release LAB=NN`` releases the labs up to NN and puts the package's edition of lab NN here
(``autograder.editions``: the TODOs of lab NN and of every later lab have no implementation in it), so a
student's server can neither read nor call the answer to the lab in front of them. Earlier labs' answers,
past due, stay: later labs build on them. Until a lab is released the hub carries the strictest edition
(the first graded lab's); ``make hub-release`` with no LAB releases every lab with the whole package, for
a self-study hub (it says so). The instructor's server imports the repository's whole package.

The swap is atomic (a new folder renamed over the old one); running kernels keep what they imported and
get the new edition when they restart.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

from hub.layout import Layout


def package_dir(layout: Layout) -> Path:
    """The folder on every student server's ``PYTHONPATH`` (it holds ``paged_kv/``)."""
    return layout.root / "package"


def install_edition(layout: Layout, lab: Optional[str]) -> Path:
    """Write lab ``lab``'s edition (None: the whole package) to ``package_dir``; world-readable; atomic."""
    from autograder.editions.build import edition_sources, write_package
    from autograder.editions.manifest import BY_LAB, LABS

    if lab is not None and lab not in BY_LAB:
        raise ValueError(f"{lab!r} is not a graded lab; the graded labs are {[e.lab for e in LABS]}")
    target = package_dir(layout)
    fresh = target.with_name(target.name + ".new")
    if fresh.exists():
        shutil.rmtree(fresh)
    write_package(edition_sources(lab), fresh)
    (fresh / "edition.json").write_text(json.dumps({"lab": lab}))
    os.chmod(fresh / "edition.json", 0o644)
    old = target.with_name(target.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.rename(target, old)
    os.rename(fresh, target)
    if old.exists():
        shutil.rmtree(old)
    return target


def installed_edition(layout: Layout) -> Optional[str]:
    """The lab whose edition students import now (None: the whole package); KeyError when none is there."""
    return json.loads((package_dir(layout) / "edition.json").read_text())["lab"]


def first_graded_lab() -> str:
    from autograder.editions.manifest import LABS

    return LABS[0].lab
