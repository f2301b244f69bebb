"""The Colab and ModelScope routes of a class's handout: the notebooks install the class's edition, never the public
package.

A release notebook's setup cell installs the whole course package, in Colab from the public repository and in a
ModelScope instance from the course's ModelScope mirror (``tools/sync_colab.py`` writes those lines): every lab's
reference. A class's handout (``make handout LAB=NN``) instead carries ``colab/paged-kv-class-edition.zip`` (the
package's edition of lab NN: its TODOs and every later lab's have no implementation) and its notebooks' setup
cells install that file and nothing else: in Colab uploaded to ``/content``, in ModelScope beside the notebook or
to ``/mnt/workspace``; without it they stop and say what to upload, in the notebook's language.

``class_setup_source`` (``autograder.course.handed_out``) is the one rewrite of a setup cell, so the grader can tell
it from an edit: a notebook from a class handout is graded without an "edited given cell" note
(``autograder.collect.repair``), and its setup cell stays the class's in the feedback.
"""

from __future__ import annotations

import io
import time
import zipfile
from typing import Dict

from autograder.course.handed_out import COLAB_PATH, EDITION_ZIP, MODELSCOPE_PATH, class_setup_source

# The rewrite itself lives with the other forms of a given cell (``autograder.course.handed_out``): the grader,
# below the handout in the layers, reads it too.
__all__ = ["EDITION_ZIP", "COLAB_PATH", "MODELSCOPE_PATH", "class_setup_source", "edition_zip"]


def edition_zip(sources: Dict[str, bytes], pyproject: bytes, readme: bytes) -> bytes:
    """The installable zip of an edition: ``paged-kv-course/`` with ``pyproject.toml``, ``README.md`` and
    ``paged_kv/`` (``sources``: path in the package -> content), as pip installs a source archive."""
    buffer = io.BytesIO()
    stamp = time.localtime()[:6]
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        files = {
            "pyproject.toml": pyproject,
            "README.md": readme,
            **{f"paged_kv/{name}": data for name, data in sorted(sources.items())},
        }
        for name, data in files.items():
            info = zipfile.ZipInfo(f"paged-kv-course/{name}", date_time=stamp)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()
