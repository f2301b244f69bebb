"""Each lab from 01 on ends with "Where this lives in real engines" (issue 38): a table of the functions the student
wrote, nano-vllm's and vLLM's counterparts (file and function) and what the real one adds. Every file and name
it gives must exist at the pinned commit / release, as recorded in tests/fixtures/engine_sources.json by
tools/record_engine_sources.py (no network and no engine sources at test time)."""

import ast
import json

import pytest

from tools.record_engine_sources import (
    ENGINES,
    FIXTURE,
    LABS,
    cell_text,
    engines_cells,
    engines_grade_id,
    lab_notebook,
    named_files,
    read_engines_table,
)

SOURCES = json.loads(FIXTURE.read_text())


def _notebook(lab):
    return json.loads(lab_notebook(lab).read_text())


def _engines_cell(lab):
    cells = engines_cells(lab_notebook(lab))
    assert len(cells) == 1, f"lab {lab}: expected one engines cell ({engines_grade_id(lab)}), found {len(cells)}"
    return cells[0]


def _solution_names(nb):
    """Top-level functions and classes, and Class.method, that the notebook's solution cells define."""
    names = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        for node in ast.parse(cell_text(cell)).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names.update(f"{node.name}.{m.name}" for m in node.body if isinstance(m, ast.FunctionDef))
    return names


def problems(text, sources=SOURCES, student=None):
    """What is wrong with an engines cell's markdown against the recorded sources (an empty list: nothing)."""
    found = []
    table = read_engines_table(text)
    for engine in ENGINES:
        pin = sources[engine]
        if table["labels"][engine] != pin["label"]:
            found.append(f"{engine}'s column names {table['labels'][engine]!r}, the recording {pin['label']!r}")
    if sources["nano-vllm"]["commit"] not in text:
        found.append(f"the cell does not give nano-vllm's full commit {sources['nano-vllm']['commit']}")
    for row in table["rows"]:
        if not row["wrote"]:
            found.append(f"a row names no function the student wrote: {row['text']['wrote']!r}")
        for name in row["wrote"]:
            if student is not None and name not in student:
                found.append(f"`{name}` is not defined in the lab's solution cells")
        for engine in ENGINES:
            files = sources[engine]["files"]
            if not row[engine] and not row["text"][engine].lower().startswith("none"):
                found.append(
                    f"{engine}: a cell names no file and function and does not say 'none': {row['text'][engine]!r}"
                )
            for path, name in row[engine]:
                if path not in files:
                    found.append(f"{engine}: {path} is not in the recording (run tools/record_engine_sources.py)")
                elif name not in files[path]:
                    found.append(f"{engine}: {path} defines no `{name}` at {sources[engine]['label']}")
    return found


@pytest.mark.parametrize("lab", LABS)
def test_lab_ends_with_its_engines_cell(lab):
    nb = _notebook(lab)
    cell = _engines_cell(lab)
    assert nb["cells"][-1]["id"] == cell["id"], f"lab {lab}: the engines cell should be the notebook's last cell"
    assert cell["metadata"]["nbgrader"] == {
        "grade": False,
        "grade_id": engines_grade_id(lab),
        "locked": True,
        "schema_version": 3,
        "solution": False,
    }
    assert cell_text(cell).startswith("## Where this lives in real engines\n")


@pytest.mark.parametrize("lab", LABS)
def test_every_name_exists_at_the_pinned_sources(lab):
    nb = _notebook(lab)
    text = cell_text(_engines_cell(lab))
    assert problems(text, student=_solution_names(nb)) == []


def test_the_recording_holds_the_files_the_tables_name_and_no_other():
    assert named_files() == {engine: sorted(SOURCES[engine]["files"]) for engine in ENGINES}


def test_the_recording_names_its_pins():
    nano, vllm = SOURCES["nano-vllm"], SOURCES["vllm"]
    assert nano["repo"] == "GeeeekExplorer/nano-vllm" and len(nano["commit"]) == 40
    assert nano["label"] == nano["commit"][:7]
    assert vllm["repo"] == "vllm-project/vllm" and vllm["tag"] == vllm["label"]
    assert vllm["tag"].startswith("v") and vllm["tag"][1:].replace(".", "").isdigit(), "a release tag, not a branch"


def test_a_wrong_name_a_wrong_file_or_a_wrong_pin_is_caught():
    """The check can fail: misspell a function, name a file that was not recorded, show another pin."""
    text = cell_text(_engines_cell("05"))
    student = _solution_names(_notebook("05"))
    assert problems(text, student=student) == []
    misspelt = text.replace("`BlockPool.touch`", "`BlockPool.tuoch`")
    assert any("defines no `BlockPool.tuoch`" in p for p in problems(misspelt, student=student))
    moved = text.replace("`vllm/v1/core/block_pool.py`", "`vllm/core/block_pool.py`")
    assert any("vllm/core/block_pool.py is not in the recording" in p for p in problems(moved, student=student))
    other_pin = text.replace(f"vLLM (`{SOURCES['vllm']['label']}`)", "vLLM (`main`)")
    assert any("names 'main'" in p for p in problems(other_pin, student=student))
    not_written = text.replace("`HashingManager.compute_hash` |", "`HashingManager.compute_hsah` |")
    assert any("compute_hsah" in p for p in problems(not_written, student=student))


def test_a_name_outside_any_file_is_rejected():
    bad = (
        "| You wrote | nano-vllm (`a`) | vLLM (`b`) | What the real one adds |\n|---|---|---|---|\n"
        "| `f` | `Scheduler.schedule` | none | x |\n"
    )
    with pytest.raises(ValueError, match="before any file"):
        read_engines_table(bad)
