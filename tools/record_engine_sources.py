"""Record the engine sources that the labs' "Where this lives in real engines" tables name (issue 38).

Each lab from 01 on ends with a markdown cell (grade_id ``labNN-md-engines``) holding a table: the function the
student wrote, nano-vllm's counterpart, vLLM's, and what the real one adds. In the two engine columns every
code span is either a file (``path/to/file.py``) or a name defined in the last file named before it in the
same table cell (``function``, ``Class``, ``Class.method``); any other code span there is an error.

This script reads those cells, takes every file they name, and writes ``tests/fixtures/engine_sources.json``:
for each engine its repository, the pinned commit (and vLLM's release tag), where the text came from, and for
each named file the names it defines (top-level functions and classes, and ``Class.method``), read with ast.
``tests/test_engine_maps.py`` checks the tables against that file, with no network and no engine sources.

Run it by hand after changing a table (the sources are not part of this repository):

    python -m tools.record_engine_sources --nano-vllm NANO_GIT_DIR --vllm VLLM_WHEEL_OR_GIT_DIR

- nano-vllm: a git directory (a bare clone is fine) of GeeeekExplorer/nano-vllm; files are read with
  ``git show COMMIT:PATH`` at ``--nano-vllm-ref`` (default HEAD, resolved to its full hash).
- vLLM: the release's wheel (``pip download vllm==0.34.0 --no-deps --only-binary :all:``), whose
  ``vllm/_version.py`` gives the version and the commit it was built from; or a git directory of
  vllm-project/vllm with ``--vllm-ref`` naming the release tag.
"""

import argparse
import ast
import hashlib
import json
import re
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "engine_sources.json"
SOLUTIONS = ROOT / "solutions"
# Every lab but the orientation (00) ends with its table (issue 38): a new lab under solutions/ is held to it.
LABS = tuple(sorted(p.name[:2] for p in SOLUTIONS.glob("[0-9][0-9]-*") if p.is_dir() and p.name[:2] != "00"))

ENGINES = ("nano-vllm", "vllm")
REPOS = {"nano-vllm": "GeeeekExplorer/nano-vllm", "vllm": "vllm-project/vllm"}
HEADINGS = {"nano-vllm": "nano-vllm", "vllm": "vLLM"}  # how each engine's column header starts

CODE_SPAN = re.compile(r"`([^`]+)`")
DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


# ---- reading the tables ------------------------------------------------------------------------------------


def engines_grade_id(lab):
    return f"lab{lab}-md-engines"


def lab_notebook(lab, root=SOLUTIONS):
    """The one notebook of lab NN under root (solutions/NN-name/*.ipynb)."""
    found = sorted(root.glob(f"{lab}-*/*.ipynb"))
    assert len(found) == 1, f"lab {lab}: expected one notebook under {root}/{lab}-*/, found {found}"
    return found[0]


def engines_cells(notebook):
    """The notebook's markdown cells whose grade_id is its lab's engines cell, as nbformat-like dicts."""
    nb = json.loads(Path(notebook).read_text())
    return [
        cell
        for cell in nb["cells"]
        if cell["cell_type"] == "markdown"
        and cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").endswith("-md-engines")
    ]


def cell_text(cell):
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def _split_row(line):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return cells


def parse_table(text):
    """The engines table in a cell's markdown: {'header': [...], 'rows': [[cell, ...], ...]}.

    Raises ValueError when there is no table, or a row has another number of cells than the header."""
    lines = [line for line in text.splitlines() if line.strip().startswith("|")]
    if len(lines) < 3:
        raise ValueError("no table (a header, a separator and at least one row) in the engines cell")
    header = _split_row(lines[0])
    if not all(set(c) <= set("-: ") for c in _split_row(lines[1])):
        raise ValueError(f"the table's second line is not a separator: {lines[1]!r}")
    rows = [_split_row(line) for line in lines[2:]]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells, the header {len(header)}: {row}")
    return {"header": header, "rows": rows}


def engine_columns(header):
    """{'wrote': i, 'nano-vllm': j, 'vllm': k} from the table's header."""
    columns = {}
    for i, name in enumerate(header):
        if name.lower().startswith("you wrote"):
            columns["wrote"] = i
        for engine, heading in HEADINGS.items():
            if name.startswith(heading):
                columns[engine] = i
    missing = {"wrote", *ENGINES} - set(columns)
    if missing:
        raise ValueError(f"the table's header {header} has no column for {sorted(missing)}")
    return columns


def header_label(header_cell):
    """The pin a column header shows in a code span: nano-vllm (`bb823b3`) -> 'bb823b3'."""
    spans = CODE_SPAN.findall(header_cell)
    if len(spans) != 1:
        raise ValueError(f"the column header {header_cell!r} should name its pin in one code span")
    return spans[0]


def references(table_cell):
    """[(file, name), ...] that one engine column's table cell names, in order.

    A code span ending in .py sets the file; a dotted name is a name defined in the last file named before it.
    Any other code span, or a name before any file, raises ValueError."""
    found = []
    current = None
    for span in CODE_SPAN.findall(table_cell):
        if span.endswith(".py"):
            current = span
        elif DOTTED_NAME.fullmatch(span):
            if current is None:
                raise ValueError(f"`{span}` comes before any file in {table_cell!r}")
            found.append((current, span))
        else:
            raise ValueError(f"`{span}` is neither a file nor a name, in {table_cell!r}")
    return found


def student_names(table_cell):
    return CODE_SPAN.findall(table_cell)


def read_engines_table(text):
    """Everything a test or the recorder needs from an engines cell's markdown.

    {'labels': {engine: pin shown in its header}, 'rows': [{'wrote': [...], engine: [(file, name), ...],
    'text': {column: raw cell}}]}."""
    table = parse_table(text)
    columns = engine_columns(table["header"])
    labels = {engine: header_label(table["header"][columns[engine]]) for engine in ENGINES}
    rows = []
    for row in table["rows"]:
        parsed = {"wrote": student_names(row[columns["wrote"]]), "text": {key: row[i] for key, i in columns.items()}}
        for engine in ENGINES:
            parsed[engine] = references(row[columns[engine]])
        rows.append(parsed)
    return {"labels": labels, "rows": rows}


def named_files(root=SOLUTIONS, labs=LABS):
    """{engine: sorted files} named by the labs' engines tables."""
    files = {engine: set() for engine in ENGINES}
    for lab in labs:
        for cell in engines_cells(lab_notebook(lab, root)):
            for row in read_engines_table(cell_text(cell))["rows"]:
                for engine in ENGINES:
                    files[engine].update(path for path, _ in row[engine])
    return {engine: sorted(paths) for engine, paths in files.items()}


# ---- reading the sources -----------------------------------------------------------------------------------


def defined_names(source, path="<source>"):
    """Sorted top-level function and class names of a Python module, and Class.method for its classes."""
    tree = ast.parse(source, filename=path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(f"{node.name}.{member.name}")
    return sorted(names)


def _git(git_dir, *args):
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True).stdout


def git_source(git_dir, ref):
    commit = _git(git_dir, "rev-parse", f"{ref}^{{commit}}").strip()
    return commit, lambda path: _git(git_dir, "show", f"{commit}:{path}")


def wheel_source(wheel):
    archive = zipfile.ZipFile(wheel)
    version_py = archive.read("vllm/_version.py").decode()
    version = re.search(r"__version__ = version = '([^']+)'", version_py).group(1)
    commit_id = re.search(r"__commit_id__ = commit_id = 'g?([0-9a-f]+)'", version_py).group(1)
    sha256 = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()
    return version, commit_id, sha256, lambda path: archive.read(path).decode()


def record(nano_git, nano_ref, vllm_path, vllm_ref=None):
    files = named_files()
    fixture = {}

    commit, read = git_source(nano_git, nano_ref)
    fixture["nano-vllm"] = {
        "repo": REPOS["nano-vllm"],
        "commit": commit,
        "label": commit[:7],
        "source": f"git show {commit}:PATH",
        "files": {path: defined_names(read(path), path) for path in files["nano-vllm"]},
    }

    vllm_path = Path(vllm_path)
    if vllm_path.suffix == ".whl":
        version, commit_id, sha256, read = wheel_source(vllm_path)
        source = (
            f"{vllm_path.name} (PyPI, sha256 {sha256}); the commit is the one its "
            "vllm/_version.py names (abbreviated there)"
        )
        tag = f"v{version}"
    else:
        assert vllm_ref, "a vLLM git directory needs --vllm-ref (a release tag)"
        commit_id, read = git_source(vllm_path, vllm_ref)
        source = f"git show {commit_id}:PATH (tag {vllm_ref})"
        tag = vllm_ref
    fixture["vllm"] = {
        "repo": REPOS["vllm"],
        "tag": tag,
        "commit": commit_id,
        "label": tag,
        "source": source,
        "files": {path: defined_names(read(path), path) for path in files["vllm"]},
    }
    return fixture


def render(fixture):
    return json.dumps(fixture, indent=1, sort_keys=True) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nano-vllm", required=True, help="git directory of GeeeekExplorer/nano-vllm")
    parser.add_argument("--nano-vllm-ref", default="HEAD")
    parser.add_argument("--vllm", required=True, help="vLLM release wheel, or a git directory of vllm-project/vllm")
    parser.add_argument("--vllm-ref", help="release tag, when --vllm is a git directory")
    args = parser.parse_args(argv)
    fixture = record(args.nano_vllm, args.nano_vllm_ref, args.vllm, args.vllm_ref)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(render(fixture))
    for engine in ENGINES:
        pin = fixture[engine]
        print(f"{engine}: {pin['commit']} ({pin['label']}), {len(pin['files'])} files")
    print(f"wrote {FIXTURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
