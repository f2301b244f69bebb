"""nbgrader's restoring of locked cells, which keeps each one as the student was handed it.

nbgrader's ``OverwriteCells`` (the sanitising step of ``nbgrader autograde``) puts back the gradebook's text of every
locked cell whose checksum differs: the English release's. A student handed a translated notebook
(``course/zh_CN/``) or a class's copy (its setup cell installs the class's edition) would then be graded, and read
their feedback, in another notebook than theirs: English prose, the public install route. ``KeepHandedOutCells``
restores exactly as nbgrader does, then gives a locked cell back the text it had when that text is one of the forms
the student was handed (``autograder.course.handed_out.given_forms`` for code; for markdown, the same cell of a
translated release, ``course/<language>/<lab>/``, trusted as the course's own), with its checksum recomputed. Graded
(test) cells are always the gradebook's: what decides a score never comes from the submission.
"""

from __future__ import annotations

from typing import Dict, Set

from nbgrader.preprocessors import OverwriteCells
from nbgrader.utils import compute_checksum, is_grade, is_locked
from traitlets import Unicode

from autograder.course.handed_out import given_forms
from autograder.course.languages import translated_releases
from autograder.course.notebook import cell_text, normalized


class KeepHandedOutCells(OverwriteCells):
    """See the module doc. ``release_dir``: the course's releases (``course/``, translations in its subfolders)."""

    release_dir = Unicode("", help="folder of the releases: <release_dir>/<language>/<lab>/<notebook>.ipynb").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        nbgrader = resources.get("nbgrader", {})
        lab, notebook = nbgrader.get("assignment"), nbgrader.get("notebook")
        self._translated: Dict[str, Set[str]] = {}
        if self.release_dir and lab and notebook:
            for translated in translated_releases(self.release_dir, lab, f"{notebook}.ipynb").values():
                for cell in translated["cells"]:
                    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    if grade_id and cell.get("cell_type") == "markdown":
                        self._translated.setdefault(grade_id, set()).add(cell_text(cell))
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        handed = cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.source == handed or is_grade(cell) or not is_locked(cell):
            return cell, resources
        if cell.cell_type == "code":
            kept = {normalized(form): form for form in reversed(given_forms(cell.source))}.get(normalized(handed))
        else:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            kept = handed if handed in self._translated.get(grade_id, ()) else None
        if kept is not None:
            cell.source = kept
            cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
        return cell, resources
