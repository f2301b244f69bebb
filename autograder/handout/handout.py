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
- ``--language zh_CN`` (``make handout ... COURSE_LANG=zh_CN``): a handout in Simplified Chinese. A class's handout
  holds its language's notebooks only (``course/zh_CN/``'s, at ``course/<lab>/``: a class is taught in one language;
  grading accepts both); a self-study handout holds both, and its ``make lab`` opens the Chinese ones. Its README
  speaks its language (``student_files``).

Every notebook a class's handout rewrites is resealed (``autograder.course.handed_out.reseal``): nbgrader's checksums
match its read-only cells, so Validate reports no change the student did not make.
"""

from __future__ import annotations

import sys
import time
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from autograder.course import handed_out, languages
from autograder.course.notebook import BEGIN as HIDDEN_TESTS
from autograder.handout import colab_class, practice, student_files

REPO = Path(__file__).resolve().parents[2]
FILES = ["pyproject.toml", "environment.yml"]  # and requirements-student.txt, as the handout's requirements-lock.txt
STUDENT_LOCK = "requirements-student.txt"  # the developer lock's pins a student needs (tools/student_lock.py)
FOLDERS = ["course", "paged_kv", "student-lab"]
FORBIDDEN = ("### BEGIN SOLUTION", HIDDEN_TESTS, "autograder.labs.")


def handout_files(repo: Path = REPO, lab: Optional[str] = None) -> List[Path]:
    """The repository's files to hand out (``lab``: its package comes from the edition, its course stops at it and
    holds the English release's paths only: ``build`` puts the class's language's notebooks there)."""
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
    """A release folder of a lab after ``lab`` (labs are numbered ``NN-name``), or a translation's folder (a class's
    handout has one language, at the English release's paths)."""
    name = path.relative_to(repo / "course").parts[0]
    return name in languages.TRANSLATIONS or (name[:2].isdigit() and name[:2] > lab[:2])


def edition_files(lab: str) -> Dict[str, bytes]:
    """``{path in the handout: content}`` of lab ``lab``'s edition of the package."""
    return {f"paged_kv/{name}": data for name, data in edition_sources_of(lab).items()}


def check_clean(files: Iterable[Path], repo: Path = REPO, generated: Optional[Dict[str, bytes]] = None) -> None:
    """Raise when a file to hand out carries solution or hidden-test code."""
    texts = [(str(path.relative_to(repo)), path.read_text()) for path in files if path.suffix in (".ipynb", ".py")]
    texts += [(name, data.decode()) for name, data in (generated or {}).items() if name.endswith((".py", ".ipynb"))]
    for name, text in texts:
        for marker in FORBIDDEN:
            if marker in text:
                raise ValueError(f"{name} contains {marker!r}: it must not be handed out")


def build(target: Path, repo: Path = REPO, lab: Optional[str] = None, language: str = languages.SOURCE) -> Path:
    """Write the handout zip (``lab``: a class's handout for that lab; ``language``: its language; see the module
    doc)."""
    languages.check_language(language)
    files = handout_files(repo, lab)
    generated = edition_files(lab) if lab is not None else {}
    check_clean(files, repo, generated)
    readme = student_files.readme(language, lab)
    target.parent.mkdir(parents=True, exist_ok=True)
    if lab is not None:  # a class's copy: its notebooks install its edition (Colab, ModelScope), the open lab's
        open_notebook = _open_lab_notebook(repo, lab)  # practice close to the answers is left out
        notebooks = [path for path in files if path.suffix == ".ipynb"]
        files = [path for path in files if path not in notebooks]
        class_copies = {
            str(path.relative_to(repo)): _class_copy(_in_language(path, repo, language), path == open_notebook)
            for path in notebooks
        }
        check_clean([], repo, class_copies)
        generated = {**generated, **class_copies}
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
            ("Makefile", student_files.makefile(language, lab).encode()),
            ("README.md", readme.encode()),
        ]:
            info = zipfile.ZipInfo(f"paged-kv-course/{name}", date_time=time.localtime()[:6])
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r-- (writestr's default is 0600)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target


def _in_language(path: Path, repo: Path, language: str) -> Path:
    """The release notebook ``path`` (``course/<lab>/<notebook>``) in ``language``."""
    lab, name = path.relative_to(repo / "course").parts
    found = languages.release_notebook(repo / "course", lab, name, language)
    if not found.is_file():
        raise FileNotFoundError(f"{found.relative_to(repo)} is missing: run `make release`")
    return found


def _class_copy(path: Path, is_open: bool) -> bytes:
    """A release notebook as a class's handout holds it: its setup cell installs the class's edition on Colab and
    ModelScope (``colab_class``), for the open lab its practice close to the answers is left out (``practice``), and the
    checksums of what changed are recomputed (``handed_out.reseal``: Validate sees no change)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    if is_open:
        nb = practice.for_open_lab(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = colab_class.class_setup_source(cell.source)
    handed_out.reseal(nb)
    return (nbformat.writes(nb) + "\n").encode()


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


def target_for(lab: Optional[str], language: str = languages.SOURCE) -> Path:
    suffix = "" if language == languages.SOURCE else f"-{language}"
    return (
        REPO
        / "dist"
        / (f"paged-kv-course-{lab}-handout{suffix}.zip" if lab else f"paged-kv-course-handout{suffix}.zip")
    )


def main(argv=None) -> int:
    import argparse

    from autograder.editions.manifest import BY_LAB

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", choices=sorted(BY_LAB), help="a class's handout for this lab (its edition)")
    parser.add_argument("--language", choices=languages.LANGUAGES, default=languages.SOURCE, help="its language")
    args = parser.parse_args(argv)
    target = build(target_for(args.lab, args.language), lab=args.lab, language=args.language)
    with zipfile.ZipFile(target) as archive:
        count = len(archive.namelist())
    what = (
        f"labs up to {args.lab}, the package's edition of {args.lab} (its TODOs and later labs' left out)"
        if args.lab
        else "the whole course and package, for self-study"
    )
    said = languages.NAMES[args.language]
    print(
        f"{target.relative_to(REPO)}: {count} files ({what}; in {said}; install files; no solutions, graders or tests)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
