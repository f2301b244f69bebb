"""Write every Colab and ModelScope link of the course from the one place that names its repositories.

The public repository is ``[project.urls] Repository`` in pyproject.toml (a ``https://github.com/OWNER/REPO``
URL), its branch ``[tool.paged-kv-course.colab] branch``; its mirror on ModelScope (魔搭, where a notebook
in mainland China installs the course from, GitHub being out of reach there) is ``[project.urls] ModelScope``
(a ``https://www.modelscope.cn/models/NAMESPACE/NAME`` repository), its branch
``[tool.paged-kv-course.modelscope] branch``. From them this script writes, and writes nothing else:

- in each source notebook (solutions/), the platform blocks of the setup cell: the ModelScope statement
  (``MODELSCOPE_TEST`` and its indented body, which installs the course package from the ModelScope mirror
  through the instance's own PyPI mirror; ``import os`` is added when the cell lacks it), then the Colab
  statement ``if "google.colab" in sys.modules:`` and its body, which installs it from GitHub; both with the
  ``gpu`` extra, which holds Triton, in labs whose code imports Triton (the platforms' CPU images have
  none, their GPU images keep their own);
- in each source notebook, the badge line under the title of the first markdown cell: "Open in Colab"
  and "Open in ModelScope", both opening the release notebook (course/) from GitHub (ModelScope's
  ``notebook/share/github/...`` link reads it there on the server's side, then offers a notebook instance);
- in README.md, the table of labs' Colab and ModelScope columns (the English notebooks) and 中文 column (the
  Chinese ones, ``course/zh_CN/``: Colab's and ModelScope's badges), and in README.zh_CN.md its column of both
  badges.

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
# ModelScope has no badge image of its own: a static shields.io badge in its colour.
MODELSCOPE_BADGE_SVG = "https://img.shields.io/badge/ModelScope-Open%20in%20Notebook-624AFF"
# A ModelScope notebook instance: the platform sets MODELSCOPE_ENVIRONMENT (its image's init script,
# ms_env_init.sh, reads it), and its images set MODELSCOPE_CACHE under the instance's /mnt/workspace
# (docs/maintainers.md#modelscope has the sources). Either one is enough.
MODELSCOPE_TEST = 'if os.environ.get("MODELSCOPE_ENVIRONMENT") or os.environ.get("MODELSCOPE_CACHE", "").startswith("/mnt/workspace/"):'
MODELSCOPE_MARK = "MODELSCOPE_ENVIRONMENT"  # how a ModelScope statement of any version is recognised
PACKAGE = "paged-kv-course"
TRITON_EXTRA = "gpu"  # the package's extra that holds Triton
_GITHUB = re.compile(r"^https://github\.com/(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<repo>[A-Za-z0-9._-]+?)(\.git)?/?$")
_MODELSCOPE = re.compile(
    r"^https://(www\.)?modelscope\.cn/models/(?P<namespace>[A-Za-z0-9][A-Za-z0-9_.-]*)/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*?)/?$"
)
# The badge line: the Colab badge, then (since the ModelScope route) the ModelScope badge on the same line.
_BADGE = re.compile(
    r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)([ \t]+\[!\[Open In ModelScope\]\([^)]*\)\]\([^)]*\))?[ \t]*$", re.M
)
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

    def modelscope_url(self, path_in_repo: str) -> str:
        """The link that opens ``path_in_repo`` in a ModelScope notebook (ModelScope reads it from GitHub)."""
        return f"https://modelscope.cn/notebook/share/github/{self.owner}/{self.repo}/blob/{self.branch}/{path_in_repo}"

    def colab_badge(self, path_in_repo: str) -> str:
        return f"[![Open In Colab]({COLAB_BADGE_SVG})]({self.colab_url(path_in_repo)})"

    def modelscope_badge(self, path_in_repo: str) -> str:
        return f"[![Open In ModelScope]({MODELSCOPE_BADGE_SVG})]({self.modelscope_url(path_in_repo)})"

    def badge(self, path_in_repo: str) -> str:
        """The badge line under a notebook's title: Colab's badge, then ModelScope's."""
        return f"{self.colab_badge(path_in_repo)} {self.modelscope_badge(path_in_repo)}"

    def badges(self, path_in_repo: str, which: str) -> str:
        """A README cell's badges of ``path_in_repo``: ``which`` is one of ``BADGES``."""
        if which not in BADGES:
            raise SyncError(f"a README column shows one of {', '.join(BADGES)}, not {which!r}")
        return {"colab": self.colab_badge, "modelscope": self.modelscope_badge, "both": self.badge}[which](path_in_repo)

    def install_block(self, with_triton: bool) -> str:
        """The setup cell's Colab statement: install the course package, keep Colab's torch."""
        return _install_block(COLAB_TEST, f"git+{self.repository_url}@{self.branch}", with_triton)


@dataclass(frozen=True)
class ModelScopeSettings:
    """The course's mirror on ModelScope: a model repository (ModelScope's git repositories hold any files)."""

    namespace: str
    name: str
    branch: str

    @property
    def page_url(self) -> str:
        return f"https://www.modelscope.cn/models/{self.namespace}/{self.name}"

    @property
    def git_url(self) -> str:
        """The repository's git address (modelscope's hub/repository.py: ``{endpoint}/{model_id}.git``)."""
        return f"https://www.modelscope.cn/{self.namespace}/{self.name}.git"

    def install_block(self, with_triton: bool) -> str:
        """The setup cell's ModelScope statement: install the course from the mirror; its dependencies come
        through the instance's PyPI mirror (its pip config), and the image's torch (and Triton) stay."""
        return _install_block(MODELSCOPE_TEST, f"git+{self.git_url}@{self.branch}", with_triton)


def _install_block(test: str, address: str, with_triton: bool) -> str:
    extra = f"[{TRITON_EXTRA}]" if with_triton else ""
    return f'{test}\n    %pip install --quiet "{PACKAGE}{extra} @ {address}"'


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


def load_modelscope_settings(pyproject: Path = ROOT / "pyproject.toml") -> ModelScopeSettings:
    """The ModelScope mirror and branch named in ``pyproject``; SyncError when they are missing or odd."""
    data = read_toml(pyproject)
    url = data.get("project", {}).get("urls", {}).get("ModelScope", "")
    match = _MODELSCOPE.match(url)
    if not match:
        raise SyncError(
            f"{pyproject}: [project.urls] ModelScope must be https://www.modelscope.cn/models/NAMESPACE/NAME, got {url!r}"
        )
    branch = data.get("tool", {}).get("paged-kv-course", {}).get("modelscope", {}).get("branch", "")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch or ""):
        raise SyncError(f"{pyproject}: [tool.paged-kv-course.modelscope] branch must name a branch, got {branch!r}")
    return ModelScopeSettings(match["namespace"], match["name"], branch)


def needs_triton(notebook) -> bool:
    """Does any code cell import Triton or define a Triton kernel?"""
    return any(c.cell_type == "code" and _TRITON_IMPORT.search(c.source) for c in notebook.cells)


def _statement_end(lines: List[str], start: int) -> int:
    """The last line of the statement that starts at ``lines[start]``: its indented body (blank lines inside it
    included)."""
    end = start
    while end + 1 < len(lines) and (
        lines[end + 1].startswith((" ", "\t"))
        or (not lines[end + 1].strip() and end + 2 < len(lines) and lines[end + 2].startswith((" ", "\t")))
    ):
        end += 1
    return end


def with_colab_block(source: str, block: str, where: str) -> str:
    """``source`` with its Colab statement (the ``if`` line and its indented body) replaced by ``block``."""
    lines = source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(COLAB_TEST)]
    if len(starts) != 1:
        raise SyncError(
            f"{where}: the setup cell needs exactly one line starting with {COLAB_TEST!r} "
            f"(found {len(starts)}); the script writes its body"
        )
    start = starts[0]
    if not any(re.match(r"\s*import sys\b", line) for line in lines[:start]):
        raise SyncError(f"{where}: the setup cell must `import sys` before {COLAB_TEST!r}")
    return "\n".join(lines[:start] + block.split("\n") + lines[_statement_end(lines, start) + 1 :])


def with_modelscope_block(source: str, block: str, where: str) -> str:
    """``source`` (a setup cell with its Colab statement) with its ModelScope statement set to ``block``, right
    before the Colab statement: the one written before (any ``if`` line naming ``MODELSCOPE_MARK``) is
    replaced, and ``import os`` is added before ``import sys`` when the cell does not import it first. It comes
    first so that whatever follows the Colab statement (a translated notebook's language line) runs after both."""
    lines = source.split("\n")
    old = [i for i, line in enumerate(lines) if line.startswith("if ") and MODELSCOPE_MARK in line]
    if len(old) > 1:
        raise SyncError(
            f"{where}: the setup cell has {len(old)} ModelScope statements; keep one (the script writes it)"
        )
    if old:
        del lines[old[0] : _statement_end(lines, old[0]) + 1]
    colab = next((i for i, line in enumerate(lines) if line.startswith(COLAB_TEST)), None)
    if colab is None:
        raise SyncError(f"{where}: the ModelScope statement goes before the Colab one ({COLAB_TEST!r}): none found")
    lines[colab:colab] = block.split("\n")
    if not any(re.match(r"import os\b", line) for line in lines[:colab]):
        at = next(i for i, line in enumerate(lines) if re.match(r"\s*import sys\b", line))
        lines.insert(at, "import os")
    return "\n".join(lines)


def with_badge(source: str, badge: str, where: str) -> str:
    """``source`` (a markdown cell) with its badge line (Colab's badge, and ModelScope's after it when there) set
    to ``badge``, under the title line."""
    if _BADGE.search(source):
        return _BADGE.sub(lambda _: badge, source, count=1)
    lines = source.split("\n")
    if not lines or not lines[0].startswith("# "):
        raise SyncError(f"{where}: the first markdown cell must start with the lab's title (`# ...`)")
    rest = lines[1:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    return "\n".join([lines[0], "", badge] + (["", *rest] if rest else []))


def sync_notebook(
    path: Path, settings: ColabSettings, modelscope: ModelScopeSettings, release_path: str
) -> Optional[str]:
    """The notebook's new text when its platform blocks or badges are out of date, else None."""
    text = path.read_text()
    notebook = nbformat.reads(text, as_version=4)
    setup = [c for c in notebook.cells if c.cell_type == "code" and COLAB_TEST in c.source]
    if len(setup) != 1:
        raise SyncError(f"{path}: exactly one code cell (the setup cell) must hold {COLAB_TEST!r}; found {len(setup)}")
    triton = needs_triton(notebook)
    source = with_colab_block(setup[0].source, settings.install_block(triton), str(path))
    setup[0].source = with_modelscope_block(source, modelscope.install_block(triton), str(path))
    title = next((c for c in notebook.cells if c.cell_type == "markdown"), None)
    if title is None:
        raise SyncError(f"{path}: no markdown cell to carry the Colab and ModelScope badges")
    title.source = with_badge(title.source, settings.badge(release_path), str(path))
    new = nbformat.writes(notebook) + "\n"
    return None if new == text else new


def _cells(row: str) -> List[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _row(cells: List[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# The generated columns of each README's table of labs: (title, language of the notebooks linked, which badges: one
# of BADGES). ModelScope's free instances are the route that works in mainland China, for a notebook in any language.
BADGES = ("colab", "modelscope", "both")
README_COLUMNS = {
    "README.md": (("Colab", "en", "colab"), ("ModelScope", "en", "modelscope"), ("中文", "zh_CN", "both")),
    "README.zh_CN.md": (("在线打开", "zh_CN", "both"),),
}


def sync_readme(
    text: str,
    settings: ColabSettings,
    notebooks: Dict[str, str],
    columns=(("Colab", "en", "colab"),),
    where: str = "README.md",
) -> str:
    """A README with its generated columns (``columns``: title, language, and which badges, one of ``BADGES``) at
    the end of its table of labs (the table whose header starts ``| # | lab |`` or ``| # | 实验 |``):
    each the badges of the lab's notebook in that language (English: ``course/<lab>/``; another:
    ``course/<language>/<lab>/``).

    ``notebooks`` maps a lab number ("02") to its English release notebook's path in the repository; rows of
    labs not written yet get an empty cell.
    """
    lines = text.split("\n")
    header = next((i for i, line in enumerate(lines) if re.match(r"^\|\s*#\s*\|\s*(lab|实验)\s*\|", line)), None)
    if header is None:
        raise SyncError(f"{where}: no table of labs (a header row starting `| # | lab |` or `| # | 实验 |`)")
    titles = [column[0] for column in columns]
    known = {"Colab", *(title for c in README_COLUMNS.values() for title, *_ in c)}
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
        for _, language, which in columns:
            path = notebooks.get(number)
            if path is not None and language != "en":
                release, rest = path.split("/", 1)
                path = f"{release}/{language}/{rest}"
            cells.append(settings.badges(path, which) if path else "")
        lines[row] = _row(cells)
        row += 1
    return "\n".join(lines)


def sync(root: Path = ROOT, check: bool = False) -> List[Path]:
    """Bring every generated Colab and ModelScope link under ``root`` up to date; returns the files that were
    (or, with ``check``, would be) rewritten."""
    from autograder.course.layout import RELEASE_DIR, SOURCE_DIR, discover_labs

    settings = load_settings(root / "pyproject.toml")
    modelscope = load_modelscope_settings(root / "pyproject.toml")
    source_dir, release_name = root / SOURCE_DIR.name, RELEASE_DIR.name
    labs = discover_labs(source_dir)
    changed: List[Path] = []
    for lab, name in labs.items():
        path = source_dir / lab / name
        new = sync_notebook(path, settings, modelscope, f"{release_name}/{lab}/{name}")
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
