"""Feedback that does not show hidden tests (nbgrader issue 917: its feedback HTML shows their source).

``HideHiddenTests`` runs in ``nbgrader generate_feedback`` (``nbgrader_config.py`` adds it). In each
graded cell it replaces the lines between the hidden-test markers (``autograder.course.notebook``) by
one comment, and in its error outputs it keeps the error message and the student's own frames but
drops every frame that shows hidden test or grader code.
"""

from __future__ import annotations

import re
from typing import List

from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade
from traitlets import Unicode

from autograder.course.notebook import BEGIN, END

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HIDDEN_NOTE = "# (hidden tests: their code is not shown; the message below says what failed)"


class HideHiddenTests(NbGraderPreprocessor):
    begin = Unicode(BEGIN).tag(config=True)
    end = Unicode(END).tag(config=True)
    grader_marker = Unicode("autograder/").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not is_grade(cell) or self.begin not in cell.source:
            return cell, resources
        hidden_lines = set()
        kept: List[str] = []
        inside = False
        for line in cell.source.splitlines():
            if self.begin in line:
                inside = True
                kept.append(HIDDEN_NOTE)
                continue
            if self.end in line:
                inside = False
                continue
            if inside:
                hidden_lines.add(line.strip())
            else:
                kept.append(line)
        cell.source = "\n".join(kept)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = self._clean(output.get("traceback", []), hidden_lines)
        return cell, resources

    def _clean(self, traceback: List[str], hidden_lines: set) -> List[str]:
        """Keep frames that show neither grader files nor a line of the hidden tests."""
        kept = []
        for frame in traceback:
            plain = ANSI.sub("", frame)
            shows_hidden = any(len(line) >= 8 and line in plain for line in hidden_lines)
            if self.grader_marker in plain or shows_hidden:
                if not kept or kept[-1] != "(hidden test code)":
                    kept.append("(hidden test code)")
                continue
            kept.append(frame)
        return kept
