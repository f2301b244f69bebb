"""Practice cells close to a lab's answers, left out of a class's copy of that lab while it is open.

Some of a lab's ungraded practice (lab 05's bug hunts) shows code that is the answer to one of the lab's TODOs
minus a line, and folds the line away under "Answer". A class's copy of the open lab (``make handout LAB=NN``,
``make hub-release LAB=NN``) must not carry it. Such cells are tagged in the source notebook
(``metadata.paged_kv.near_answer: true``, kept by nbgrader in the release); ``for_open_lab`` replaces each run of
them by one short note. Self-study copies and the copies of past labs keep them.
"""

from __future__ import annotations

import copy

import nbformat

NEAR_ANSWER = "near_answer"
PLACEHOLDER = (
    "*Left out of your class's copy while this lab is open: this practice shows code close to the "
    "lab's answers. It comes back once the lab is past due.*"
)
PLACEHOLDERS = {  # in the notebook's language (autograder.course.languages)
    "en": PLACEHOLDER,
    "zh_CN": "*本实验开放期间，你们班的这份笔记本略去了这段练习：它展示的代码离本实验的答案太近。实验截止之后它会回来。*",
}


def is_near_answer(cell) -> bool:
    """Whether ``cell`` is tagged as practice close to the lab's answers."""
    return (cell.get("metadata") or {}).get("paged_kv", {}).get(NEAR_ANSWER) is True


def for_open_lab(nb):
    """A copy of ``nb`` (a notebook node) with each run of tagged cells replaced by one note (``PLACEHOLDERS``, in
    the notebook's language)."""
    from autograder.course.languages import notebook_language

    placeholder = PLACEHOLDERS[notebook_language(nb)]
    out = copy.deepcopy(nb)
    cells, previous_tagged = [], False
    for index, cell in enumerate(nb.cells):
        tagged = is_near_answer(cell)
        if tagged and not previous_tagged:
            cells.append(nbformat.v4.new_markdown_cell(placeholder, id=f"left-out-{index}"))
        elif not tagged:
            cells.append(copy.deepcopy(cell))
        previous_tagged = tagged
    out.cells = cells
    return out


def open_lab_notebook_bytes(path) -> bytes:
    """The notebook file at ``path`` as a class's copy of the open lab holds it (see ``for_open_lab``)."""
    nb = nbformat.read(str(path), as_version=4)
    return nbformat.writes(for_open_lab(nb)).encode()
