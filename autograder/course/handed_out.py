"""What a student is handed, in each of its forms: the texts a given cell may have, and checksums that match them.

A given (read-only) code cell reaches a student as the English release has it or rewritten in one known way:

- a translated release's setup cell adds its language line (``languages.with_language``);
- a class's handout (``make handout LAB=...``) installs the class's edition instead of the public package, on each
  route (``class_setup_source``): ``colab/paged-kv-class-edition.zip`` of the handout, uploaded to Colab's
  ``/content`` on Colab; on ModelScope, uploaded beside the notebook or to ``/mnt/workspace``, where a ModelScope
  instance's file browser starts (docs/maintainers.md#modelscope). Without it the cell stops and says what to
  upload, in the notebook's language.

``given_forms`` lists them all, so that collection (``autograder.collect.repair``), the grader's reading of a
submission (``autograder.verdict.notebook``) and nbgrader's restoring of locked cells (``autograder.grade``) take
each for the given cell it is, never for an edit. Every notebook rewritten this way is ``reseal``-ed: nbgrader's
checksum of each locked cell it changed is computed again (``nbgrader.utils.compute_checksum``), so that nbgrader's
Validate does not report the rewrite as a change the student made.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List

from autograder.course import languages

EDITION_ZIP = "paged-kv-class-edition.zip"
COLAB_PATH = f"/content/{EDITION_ZIP}"
MODELSCOPE_WORKSPACE = "/mnt/workspace"  # a ModelScope instance's working folder (docs/maintainers.md#modelscope)
MODELSCOPE_PATH = f"{MODELSCOPE_WORKSPACE}/{EDITION_ZIP}"
_PUBLIC_INSTALL = re.compile(
    r'^(?P<indent>[ \t]*)%pip install --quiet "(?P<name>paged-kv-course(\[[a-z]+\])?) @ '
    r'git\+(?P<address>https://[^"]+)"[ \t]*$',
    re.M,
)
_MODELSCOPE_ADDRESS = re.compile(r"^https://(www\.)?modelscope\.cn/")  # the course's mirror there (tools/sync_colab.py)
# What the class's setup cell says when the edition is not where it looks: per route, in the notebook's language (the
# course package, which speaks it, is not installed yet).
UPLOAD_MESSAGES: Dict[str, Dict[str, str]] = {
    "colab": {
        "en": f"Upload colab/{EDITION_ZIP} from your class's handout to Colab's Files panel (the folder icon), "
        "then run this cell again.",
        "zh_CN": f"请把班级讲义里的 colab/{EDITION_ZIP} 上传到 Colab 的“文件”面板（左侧的文件夹图标），"
        "然后重新运行这个单元。",
    },
    "modelscope": {
        "en": f"Upload colab/{EDITION_ZIP} from your class's handout to this notebook's folder or to "
        f"{MODELSCOPE_WORKSPACE} (the upload button of the file browser on the left), then run this cell again.",
        "zh_CN": f"请把班级讲义里的 colab/{EDITION_ZIP} 上传到这个 notebook 所在的文件夹或 {MODELSCOPE_WORKSPACE}"
        "（左侧文件浏览器的上传按钮），然后重新运行这个单元。",
    },
}


def class_setup_source(source: str) -> str:
    """``source`` (a setup cell) with each public-package install replaced by the class edition's (same extras): on
    Colab from ``COLAB_PATH``; on ModelScope (an install from ModelScope's mirror) from the notebook's folder or
    ``MODELSCOPE_PATH``. Each stops with ``UPLOAD_MESSAGES`` in the language of ``source`` (its language line, see
    ``languages.with_language``) when the file is not there. Unchanged when ``source`` has no such line."""
    language = languages.notebook_language({"cells": [{"cell_type": "code", "source": source}]})

    def replace(match: re.Match) -> str:
        pad, name = match.group("indent"), match.group("name")
        if _MODELSCOPE_ADDRESS.match(match.group("address")):
            return _modelscope_install(pad, name, UPLOAD_MESSAGES["modelscope"][language])
        return (
            f"{pad}import os  # a class's copy: the package edition in your handout's colab/ folder\n"
            f'{pad}if not os.path.exists("{COLAB_PATH}"):\n'
            f"{pad}    raise FileNotFoundError({json.dumps(UPLOAD_MESSAGES['colab'][language], ensure_ascii=False)})\n"
            f'{pad}%pip install --quiet "{name} @ file://{COLAB_PATH}"'
        )

    return _PUBLIC_INSTALL.sub(replace, source)


def _modelscope_install(pad: str, name: str, message: str) -> str:
    """The class's ModelScope install: the edition uploaded beside the notebook (the kernel's working folder: an upload
    lands in the folder the file browser shows) or to the instance's working folder, as a file:// URL (a folder's
    name may hold spaces or Chinese); IPython fills ``{class_edition[0]}`` in when the line runs."""
    return (
        f"{pad}import pathlib  # a class's copy: the package edition in your handout's colab/ folder\n"
        f"{pad}class_edition = [\n"
        f"{pad}    pathlib.Path(p).resolve().as_uri()\n"
        f'{pad}    for p in ("{EDITION_ZIP}", "{MODELSCOPE_PATH}")  # this notebook\'s folder, the instance\'s\n'
        f"{pad}    if os.path.isfile(p)\n"
        f"{pad}]\n"
        f"{pad}if not class_edition:\n"
        f"{pad}    raise FileNotFoundError({json.dumps(message, ensure_ascii=False)})\n"
        f'{pad}%pip install --quiet "{name} @ {{class_edition[0]}}"'
    )


def given_forms(source: str) -> List[str]:
    """Every text a given code cell whose release text is ``source`` (in any language) may have in what students are
    handed (``source`` first; see the module doc). A cell other than the setup cell has one form, its own."""
    forms = [source]
    if languages.is_setup_cell({"cell_type": "code", "source": source}):
        english = languages.without_language(source)
        forms += [english] + [languages.with_language(english, language) for language in languages.TRANSLATIONS]
        forms += [class_setup_source(form) for form in list(forms)]
    return list(dict.fromkeys(forms))


def reseal(nb: Any) -> int:
    """Recompute nbgrader's checksum of every locked cell of ``nb`` (an nbformat notebook) whose text no longer
    matches it; returns how many changed. A cell without a checksum (an unlocked one) is left as it is."""
    from nbgrader.utils import compute_checksum, is_locked

    changed = 0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if not isinstance(meta, dict) or "checksum" not in meta or not is_locked(cell):
            continue
        checksum = compute_checksum(cell)
        if meta["checksum"] != checksum:
            meta["checksum"] = checksum
            changed += 1
    return changed
