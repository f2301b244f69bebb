"""Every translated notebook runs top to bottom with the solution's answers, as nbval runs the English source
notebooks (``--nbval-lax``: every cell, no error except in a cell tagged ``raises-exception``; the current
environment's kernel): the notebook made from each lab's source (``solutions/``) exactly as ``make release`` makes
the translated release from ``course/`` (``tools.translations.translated_release``), so its setup cell sets the
language and every message, hint and picture of the run is the translated one (``paged_kv.lab.i18n``)."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder.course.languages import TRANSLATIONS, language_line
from autograder.course.layout import LABS, SOURCE_DIR
from tools import translations

CASES = [(lab, language) for lab in LABS for language in TRANSLATIONS]


@pytest.mark.parametrize("lab,language", CASES, ids=[f"{lab}-{language}" for lab, language in CASES])
def test_the_translated_notebook_runs_with_the_solutions_answers(tmp_path, lab, language):
    source = nbformat.read(SOURCE_DIR / lab / LABS[lab], as_version=4)
    nb = translations.translated_release(source, translations.read_catalog(SOURCE_DIR / lab, language), language)
    assert any(language_line(language) in c.source for c in nb.cells if c.cell_type == "code")
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{lab} in {language}: a cell failed:\n{str(error)[-3000:]}")
    shown = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        for o in c.get("outputs", [])
    )
    assert shown, "the notebook ran and showed something"
