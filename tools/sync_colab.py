"""Write every Colab link of the course from the one place that names its public repository.

The address is ``[project.urls] Repository`` in pyproject.toml (a ``https://github.com/OWNER/REPO``
URL), the branch ``[tool.paged-kv-course.colab] branch``. From them this script writes, and writes
nothing else:

- in each source notebook (solutions/), the Colab block of the setup cell: the statement
  ``if "google.colab" in sys.modules:`` and its indented body, which installs the course package
  (with the ``gpu`` extra, which holds Triton, in labs whose code imports Triton: Colab's CPU
  runtime has none);
- in each source notebook, the "Open in Colab" badge under the title of the first markdown cell,
  pointing at the release notebook (course/) on GitHub;
- in README.md, the Colab columns of the table of labs (the English notebooks' and the Chinese ones',
  ``course/zh_CN/``), and in README.zh_CN.md, its Colab column (the Chinese notebooks).

Cell ids, metadata and every other line stay as they are, and a second run changes nothing, so it
is safe to run after any merge. ``--check`` writes nothing and exits 1 when something is out of
date. `make sync-colab` runs it; `make release` runs it before regenerating course/.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the course's own modules (autograder.course.layout) are found
    sys.path.insert(0, str(ROOT))
COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_TEST = 'if "google.colab" in sys.modules:'
PACKAGE = "paged-kv-course"
TRITON_EXTRA = "gpu"  # the package's extra that holds Triton
_GITHUB = re.compile(r"^https://github\.com/(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<repo>[A-Za-z0-9._-]+?)(\.git)?/?$")
_BADGE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)[ \t]*$", re.M)
_TRITON_IMPORT = re.compile(r"^\s*(import triton\b|from triton\b)|@triton\.jit", re.M)


class SyncError(ValueError):
    """A notebook or README that the script cannot update safely (the message says what to add)."""


@dataclass(frozen=True)
class ColabSettings:
    owner: str
    repo: str
    branch: str

    @property
    def repository_url(self) -> str:
        return f"https://github.com/{self.owner}/{self.repo}"

    def colab_url(self, path_in_repo: str) -> str:
        """The link that opens ``path_in_repo`` (a notebook) from GitHub in Colab."""
        return f"https://colab.research.google.com/github/{self.owner}/{self.repo}/blob/{self.branch}/{path_in_repo}"

    def badge(self, path_in_repo: str) -> str:
        return f"[![Open In Colab]({COLAB_BADGE_SVG})]({self.colab_url(path_in_repo)})"

    def install_block(self, with_triton: bool) -> str:
        """The setup cell's Colab statement: install the course package, keep Colab's torch."""
        extra = f"[{TRITON_EXTRA}]" if with_triton else ""
        return f'{COLAB_TEST}\n    %pip install --quiet "{PACKAGE}{extra} @ git+{self.repository_url}@{self.branch}"'


def read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest brings tomli there
        import tomli as tomllib
    return tomllib.loads(path.read_text())


def load_settings(pyproject: Path = ROOT / "pyproject.toml") -> ColabSettings:
    """The repository and branch named in ``pyproject``; SyncError when they are missing or odd."""
    data = read_toml(pyproject)
    url = data.get("project", {}).get("urls", {}).get("Repository", "")
    match = _GITHUB.match(url)
    if not match:
        raise SyncError(f"{pyproject}: [project.urls] Repository must be https://github.com/OWNER/REPO, got {url!r}")
    branch = data.get("tool", {}).get("paged-kv-course", {}).get("colab", {}).get("branch", "")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch or ""):
        raise SyncError(f"{pyproject}: [tool.paged-kv-course.colab] branch must name a branch, got {branch!r}")
    return ColabSettings(match["owner"], match["repo"], branch)


def needs_triton(notebook) -> bool:
    """Does any code cell import Triton or define a Triton kernel?"""
    return any(c.cell_type == "code" and _TRITON_IMPORT.search(c.source) for c in notebook.cells)


def with_colab_block(source: str, block: str, where: str) -> str:
    """``source`` with its Colab statement (the ``if`` line and its indented body) replaced by ``block``."""
    lines = source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(COLAB_TEST)]
    if len(starts) != 1:
        raise SyncError(
            f"{where}: the setup cell needs exactly one line starting with {COLAB_TEST!r} "
            f"(found {len(starts)}); the script writes its body"
        )
    start = end = starts[0]
    while end + 1 < len(lines) and (
        lines[end + 1].startswith((" ", "\t"))
        or (not lines[end + 1].strip() and end + 2 < len(lines) and lines[end + 2].startswith((" ", "\t")))
    ):
        end += 1
    if not any(re.match(r"\s*import sys\b", line) for line in lines[:start]):
        raise SyncError(f"{where}: the setup cell must `import sys` before {COLAB_TEST!r}")
    return "\n".join(lines[:start] + block.split("\n") + lines[end + 1 :])


def with_badge(source: str, badge: str, where: str) -> str:
    """``source`` (a markdown cell) with its Colab badge set to ``badge``, under the title line."""
    if _BADGE.search(source):
        return _BADGE.sub(lambda _: badge, source, count=1)
    lines = source.split("\n")
    if not lines or not lines[0].startswith("# "):
        raise SyncError(f"{where}: the first markdown cell must start with the lab's title (`# ...`)")
    rest = lines[1:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    return "\n".join([lines[0], "", badge] + (["", *rest] if rest else []))


def sync_notebook(path: Path, settings: ColabSettings, release_path: str) -> Optional[str]:
    """The notebook's new text when its Colab block or badge is out of date, else None."""
    text = path.read_text()
    notebook = nbformat.reads(text, as_version=4)
    setup = [c for c in notebook.cells if c.cell_type == "code" and COLAB_TEST in c.source]
    if len(setup) != 1:
        raise SyncError(f"{path}: exactly one code cell (the setup cell) must hold {COLAB_TEST!r}; found {len(setup)}")
    setup[0].source = with_colab_block(setup[0].source, settings.install_block(needs_triton(notebook)), str(path))
    title = next((c for c in notebook.cells if c.cell_type == "markdown"), None)
    if title is None:
        raise SyncError(f"{path}: no markdown cell to carry the Colab badge")
    title.source = with_badge(title.source, settings.badge(release_path), str(path))
    new = nbformat.writes(notebook) + "\n"
    return None if new == text else new


def _cells(row: str) -> List[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _row(cells: List[str]) -> str:
    return "| " + " | ".join(cells) + " |"


README_COLUMNS = {  # the generated columns of each README's table of labs: (title, language of the notebooks linked)
    "README.md": (("Colab", "en"), ("中文", "zh_CN")),
    "README.zh_CN.md": (("Colab", "zh_CN"),),
}


def sync_readme(
    text: str, settings: ColabSettings, notebooks: Dict[str, str], columns=(("Colab", "en"),), where: str = "README.md"
) -> str:
    """A README with its generated columns (``columns``: title and language) at the end of its table of labs (the
    table whose header starts ``| # | lab |`` or ``| # | 实验 |``): each a Colab badge of the lab's notebook in that
    language (English: ``course/<lab>/``; another: ``course/<language>/<lab>/``).

    ``notebooks`` maps a lab number ("02") to its English release notebook's path in the repository; rows of
    labs not written yet get an empty cell.
    """
    lines = text.split("\n")
    header = next((i for i, line in enumerate(lines) if re.match(r"^\|\s*#\s*\|\s*(lab|实验)\s*\|", line)), None)
    if header is None:
        raise SyncError(f"{where}: no table of labs (a header row starting `| # | lab |` or `| # | 实验 |`)")
    titles = [title for title, _ in columns]
    known = {"Colab", *titles}
    found = _cells(lines[header])
    kept = len(found)
    while kept > 2 and found[kept - 1] in known:
        kept -= 1
    width = kept + len(columns)
    lines[header] = _row(found[:kept] + titles)
    lines[header + 1] = _row(["---"] * width).replace(" ", "")
    row = header + 2
    while row < len(lines) and lines[row].startswith("|"):
        cells = _cells(lines[row])
        cells = cells[:kept] + [""] * (kept - len(cells))
        number = cells[0]
        for _, language in columns:
            path = notebooks.get(number)
            if path is not None and language != "en":
                release, rest = path.split("/", 1)
                path = f"{release}/{language}/{rest}"
            cells.append(settings.badge(path) if path else "")
        lines[row] = _row(cells)
        row += 1
    return "\n".join(lines)


def sync(root: Path = ROOT, check: bool = False) -> List[Path]:
    """Bring every generated Colab link under ``root`` up to date; returns the files that were (or,
    with ``check``, would be) rewritten."""
    from autograder.course.layout import RELEASE_DIR, SOURCE_DIR, discover_labs

    settings = load_settings(root / "pyproject.toml")
    source_dir, release_name = root / SOURCE_DIR.name, RELEASE_DIR.name
    labs = discover_labs(source_dir)
    changed: List[Path] = []
    for lab, name in labs.items():
        path = source_dir / lab / name
        new = sync_notebook(path, settings, f"{release_name}/{lab}/{name}")
        if new is not None:
            changed.append(path)
            if not check:
                path.write_text(new)
    notebooks = {lab[:2]: f"{release_name}/{lab}/{name}" for lab, name in labs.items()}
    for readme_name, columns in README_COLUMNS.items():
        readme = root / readme_name
        if not readme.exists() and readme_name != "README.md":
            continue
        text = readme.read_text()
        new = sync_readme(text, settings, notebooks, columns, readme_name)
        if new != text:
            changed.append(readme)
            if not check:
                readme.write_text(new)
    return changed


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is out of date")
    args = parser.parse_args(argv)
    try:
        changed = sync(check=args.check)
    except SyncError as error:
        print(f"sync-colab: {error}", file=sys.stderr)
        return 2
    for path in changed:
        print(f"{'out of date' if args.check else 'updated'}: {path.relative_to(ROOT)}")
    if changed and args.check:
        print("run `make sync-colab` (then `make release`) and commit", file=sys.stderr)
    return 1 if changed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
