"""What students get: ``python -m autograder.handout.handout [--lab NN-lab]`` (``make handout [LAB=...]``).

It holds the release notebooks (``course/``), the ``paged_kv`` package they import, the JupyterLab
settings that hide nbgrader's instructor tools (``student-lab/``), and what installs it
(``pyproject.toml``, ``environment.yml``, and as ``requirements-lock.txt`` the pins a student needs:
``requirements-student.txt``, no hub, browser or test tools), with a student's README and a
Makefile whose ``make lab`` sets everything up and opens the course as the repository's ``make lab``
does for students (the student settings, the course kernel, ``PORT`` and ``LAB_ARGS``). It holds no solutions, no graders,
no tests and no hidden test code (the release has none; this module checks).

- ``--lab NN-lab`` (a class's handout, ``dist/paged-kv-course-NN-lab-handout.zip``): the labs up to NN and the
  package's *edition* of lab NN (``autograder.editions``): the TODOs of lab NN and of every later lab have no
  implementation in it (earlier labs' answers, past due, stay: later labs build on them). So the handout does
  not carry the answer to the lab in front of the student.
- no ``--lab`` (``dist/paged-kv-course-handout.zip``): the whole course and the whole package, for self-study.
"""

from __future__ import annotations

import sys
import time
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from autograder.course.notebook import BEGIN as HIDDEN_TESTS
from autograder.handout import colab_class, practice

REPO = Path(__file__).resolve().parents[2]
FILES = ["pyproject.toml", "environment.yml"]  # and requirements-student.txt, as the handout's requirements-lock.txt
STUDENT_LOCK = "requirements-student.txt"  # the developer lock's pins a student needs (tools/student_lock.py)
FOLDERS = ["course", "paged_kv", "student-lab"]
FORBIDDEN = ("### BEGIN SOLUTION", HIDDEN_TESTS, "autograder.labs.")

STUDENT_MAKEFILE = """\
# paged-kv-course (student handout): `make lab` installs what the course needs and opens it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
KERNEL := $(VENV)/.kernel-stamp
# make lab PORT=8899 LAB_ARGS="--no-browser --ip=0.0.0.0": any JupyterLab option goes in LAB_ARGS.
PORT ?=
LAB_ARGS ?=
# On Linux without an NVIDIA driver (no nvidia-smi), pip takes the CPU build of the lock's torch from PyTorch's own
# index (torch==X matches X+cpu, which it prefers): PyPI's Linux build brings CUDA's libraries, several GB the labs
# never use there. TORCH_INDEX= keeps PyPI's build.
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),$(if $(shell command -v nvidia-smi),,https://download.pytorch.org/whl/cpu))
PIP_INDEX := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

.PHONY: lab env
lab: env
\tJUPYTER_CONFIG_PATH="$(CURDIR)/student-lab$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \\
\t$(VENV)/bin/jupyter lab --notebook-dir=course $(if $(PORT),--port=$(PORT)) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

env: $(STAMP) $(KERNEL)

$(STAMP): requirements-lock.txt pyproject.toml
\t@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed, found " + sys.version.split()[0])'
\ttest -x $(PY) || $(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install --quiet --upgrade pip
\tif $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \\
\t  $(PY) -m pip install --quiet $(PIP_INDEX) -r requirements-lock.txt; \\
\telse \\
\t  $(PY) -m pip install --quiet $(PIP_INDEX) -e ".[course]"; \\
\tfi
\t$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
\ttouch $(STAMP)

# The notebooks' kernel (paged_kv/lab/notebook_kernel.py: reports what the notebooks store, so they open saved).
$(KERNEL): $(STAMP) paged_kv/lab/notebook_kernel.py
\t$(PY) -m paged_kv.lab.notebook_kernel install >/dev/null
\ttouch $(KERNEL)
"""

STUDENT_README = """\
# paged-kv-course: the labs

How LLM inference engines manage the KV cache with paged attention, one lab at a time.

- On your machine (Python 3.10+): `make lab` installs the course into `.venv/` (on Linux without an
  NVIDIA GPU, PyTorch's CPU build: far smaller than PyPI's) and opens JupyterLab on `course/`. Work
  through the labs in order, starting with `00-start-here`. On a remote machine, run
  `make lab PORT=8899 LAB_ARGS=--no-browser` there and `ssh -L 8899:localhost:8899 that-machine`
  here, then open the link it prints (any JupyterLab option goes in `LAB_ARGS`).
- In Google Colab: upload a notebook from `course/`; its first cell installs the course package (a class's
  handout: see below).

Each lab has an answer cell to fill in and a cell of visible tests to run after it; more tests run
when your notebook is graded. Submit the notebook file itself (`.ipynb`), keeping its name and the
names of the functions and classes the lab asks for.
"""


def handout_files(repo: Path = REPO, lab: Optional[str] = None) -> List[Path]:
    """The repository's files to hand out (``lab``: its package comes from the edition, its course stops at it)."""
    files = [repo / name for name in FILES if (repo / name).exists()]
    for folder in FOLDERS:
        if folder == "paged_kv" and lab is not None:
            continue  # the edition's sources take its place (``edition_files``)
        files += sorted(
            p
            for p in (repo / folder).rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and ".ipynb_checkpoints" not in p.parts
            and p.suffix != ".pyc"
            and not (folder == "course" and lab is not None and _later(p, repo, lab))
        )
    return files


def _later(path: Path, repo: Path, lab: str) -> bool:
    """A release folder of a lab after ``lab`` (labs are numbered ``NN-name``)."""
    name = path.relative_to(repo / "course").parts[0]
    return name[:2].isdigit() and name[:2] > lab[:2]


def edition_files(lab: str) -> Dict[str, bytes]:
    """``{path in the handout: content}`` of lab ``lab``'s edition of the package."""
    return {f"paged_kv/{name}": data for name, data in edition_sources_of(lab).items()}


def check_clean(files: Iterable[Path], repo: Path = REPO, generated: Optional[Dict[str, bytes]] = None) -> None:
    """Raise when a file to hand out carries solution or hidden-test code."""
    texts = [(str(path.relative_to(repo)), path.read_text()) for path in files if path.suffix in (".ipynb", ".py")]
    texts += [(name, data.decode()) for name, data in (generated or {}).items() if name.endswith(".py")]
    for name, text in texts:
        for marker in FORBIDDEN:
            if marker in text:
                raise ValueError(f"{name} contains {marker!r}: it must not be handed out")


def build(target: Path, repo: Path = REPO, lab: Optional[str] = None) -> Path:
    """Write the handout zip (``lab``: a class's handout for that lab, see the module doc)."""
    files = handout_files(repo, lab)
    generated = edition_files(lab) if lab is not None else {}
    check_clean(files, repo, generated)
    readme = STUDENT_README + (EDITION_NOTE.format(lab=lab) if lab else "")
    target.parent.mkdir(parents=True, exist_ok=True)
    if lab is not None:  # a class's copy: its notebooks install its edition on Colab, the open lab's practice
        open_notebook = _open_lab_notebook(repo, lab)  # close to the answers is left out
        notebooks = [path for path in files if path.suffix == ".ipynb"]
        files = [path for path in files if path not in notebooks]
        generated = {
            **generated,
            **{str(path.relative_to(repo)): _class_copy(path, path == open_notebook) for path in notebooks},
        }
        pyproject = (repo / "pyproject.toml").read_bytes()
        generated[f"colab/{colab_class.EDITION_ZIP}"] = colab_class.edition_zip(
            edition_sources_of(lab), pyproject, readme.encode()
        )
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, f"paged-kv-course/{path.relative_to(repo)}")
        lock = [("requirements-lock.txt", (repo / STUDENT_LOCK).read_bytes())] if (repo / STUDENT_LOCK).exists() else []
        for name, data in [
            *generated.items(),
            *lock,
            ("Makefile", STUDENT_MAKEFILE.encode()),
            ("README.md", readme.encode()),
        ]:
            info = zipfile.ZipInfo(f"paged-kv-course/{name}", date_time=time.localtime()[:6])
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r-- (writestr's default is 0600)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target


def _class_copy(path: Path, is_open: bool) -> bytes:
    """A release notebook as a class's handout holds it: its setup cell installs the class's edition on Colab
    (``colab_class``), and, for the open lab, its practice close to the answers is left out (``practice``)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    if is_open:
        nb = practice.for_open_lab(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = colab_class.class_setup_source(cell.source)
    return nbformat.writes(nb).encode()


def edition_sources_of(lab: str) -> Dict[str, bytes]:
    """Lab ``lab``'s edition of the package, ``{path in the package: content}``."""
    from autograder.editions.build import edition_sources

    return edition_sources(lab)


def _open_lab_notebook(repo: Path, lab: Optional[str]) -> Optional[Path]:
    """The release notebook of the lab a class's handout is for (None for self-study)."""
    if lab is None:
        return None
    notebooks = sorted((repo / "course" / lab).glob("*.ipynb"))
    return notebooks[0] if notebooks else None


EDITION_NOTE = """
This handout is for lab {lab}: it holds the labs up to that one, and its copy of the course package leaves
out the code that answers lab {lab} and every later lab (calling it says so). Your own code answers them.

In Google Colab, upload the lab's notebook and `colab/paged-kv-class-edition.zip` (the Files panel, the
folder icon on the left): the notebook's first cell installs that copy of the package (not the public one).
"""


def target_for(lab: Optional[str]) -> Path:
    return REPO / "dist" / (f"paged-kv-course-{lab}-handout.zip" if lab else "paged-kv-course-handout.zip")


def main(argv=None) -> int:
    import argparse

    from autograder.editions.manifest import BY_LAB

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", choices=sorted(BY_LAB), help="a class's handout for this lab (its edition)")
    args = parser.parse_args(argv)
    target = build(target_for(args.lab), lab=args.lab)
    with zipfile.ZipFile(target) as archive:
        count = len(archive.namelist())
    what = (
        f"labs up to {args.lab}, the package's edition of {args.lab} (its TODOs and later labs' left out)"
        if args.lab
        else "the whole course and package, for self-study"
    )
    print(f"{target.relative_to(REPO)}: {count} files ({what}; install files; no solutions, graders or tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
