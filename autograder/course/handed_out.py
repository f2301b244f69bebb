"""What a student is handed, in each of its forms: the texts a given cell may have, and checksums that match them.

A given (read-only) code cell reaches a student as the English release has it or rewritten in one known way:

- a translated release's setup cell adds its language line (``languages.with_language``);
- a class's handout (``make handout LAB=...``) installs the class's edition on Colab instead of the public package
  (``class_setup_source``: ``colab/paged-kv-class-edition.zip``, uploaded to Colab's ``/content``).

``given_forms`` lists them all, so that collection (``autograder.collect.repair``), the grader's reading of a
submission (``autograder.verdict.notebook``) and nbgrader's restoring of locked cells (``autograder.grade``) take
each for the given cell it is, never for an edit. Every notebook rewritten this way is ``reseal``-ed: nbgrader's
checksum of each locked cell it changed is computed again (``nbgrader.utils.compute_checksum``), so that nbgrader's
Validate does not report the rewrite as a change the student made.
"""

from __future__ import annotations

import re
from typing import Any, List

from autograder.course import languages

EDITION_ZIP = "paged-kv-class-edition.zip"
COLAB_PATH = f"/content/{EDITION_ZIP}"
_PUBLIC_INSTALL = re.compile(
    r'^(?P<indent>[ \t]*)%pip install --quiet "(?P<name>paged-kv-course(\[[a-z]+\])?) @ '
    r'git\+https://[^"]+"[ \t]*$',
    re.M,
)


def class_setup_source(source: str) -> str:
    """``source`` (a setup cell) with its public-package install replaced by the class edition's (same extras);
    unchanged when it has no such line."""

    def replace(match: re.Match) -> str:
        pad = match.group("indent")
        return (
            f"{pad}import os  # a class's copy: the package edition in your handout's colab/ folder\n"
            f'{pad}if not os.path.exists("{COLAB_PATH}"):\n'
            f'{pad}    raise FileNotFoundError("Upload colab/{EDITION_ZIP} from your class\'s handout to Colab\'s '
            f'Files panel (the folder icon), then run this cell again.")\n'
            f'{pad}%pip install --quiet "{match.group("name")} @ file://{COLAB_PATH}"'
        )

    return _PUBLIC_INSTALL.sub(replace, source)


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
