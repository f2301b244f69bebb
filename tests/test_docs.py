"""The docs by audience: README.md is the students' short page (the two commands, every lab), and every relative
link in the repository's Markdown (README.md, docs/*.md, deploy/ and student-lab/) reaches a file that exists
and, where it names one, a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 150
DOCS = [
    README,
    ROOT / "README.zh_CN.md",  # the students' part of README, in Chinese
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "deploy" / "README.md",
    ROOT / "student-lab" / "README.md",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def lab_folders() -> List[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and re.match(r"\d\d-", p.name))


def anchors(path: Path) -> Set[str]:
    """GitHub's anchor of each heading of ``path``: lower case, punctuation but ``-`` and ``_`` dropped, spaces
    to ``-`` (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: Set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        name, n = slug, 0
        while name in seen:
            n += 1
            name = f"{slug}-{n}"
        seen.add(name)
    return seen


def relative_links(path: Path) -> List[Tuple[str, Path, str]]:
    """``(link, target file, anchor)`` for every link of ``path`` that is not a URL."""
    found = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # https:, mailto:, ...
        file_part, _, anchor = target.partition("#")
        found.append((target, (path.parent / file_part).resolve() if file_part else path, anchor))
    return found


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move what is not for students to docs/"


def test_the_readme_names_the_two_commands_and_every_lab():
    text = README.read_text()
    assert "make lab" in text and "make test" in text
    labs = lab_folders()
    assert labs, "no lab folders found in solutions/"
    assert [lab for lab in labs if lab not in text] == []


def test_the_ci_runs_the_readme_test_command():
    """``.ci/run`` runs the README's test command."""
    assert re.search(r"^make test\b", README.read_text(), re.M)
    assert re.search(r"^make test\s*$", (ROOT / ".ci" / "run").read_text(), re.M)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(doc):
    broken = []
    for link, target, anchor in relative_links(doc):
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert broken == [], f"{doc.relative_to(ROOT)}: {broken}"


def test_the_docs_folder_has_each_audience():
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {"instructors.md", "design.md", "maintainers.md", "gpu-benchmark.md"} <= names
    readme = README.read_text()
    assert [name for name in sorted(names) if f"docs/{name}" not in readme] == [], "README's More list misses a doc"


def test_every_labs_facts_file_sits_beside_its_notebook_and_the_readme_links_its_release():
    facts = sorted((ROOT / "solutions").glob("*/facts.md"))
    assert facts, "lab 09's sources live in solutions/09-chunked-prefill/facts.md"
    readme = README.read_text()
    for source in facts:
        released = ROOT / "course" / source.parent.name / "facts.md"
        assert released.read_text() == source.read_text(), f"{released.relative_to(ROOT)} is stale: make release"
        assert f"](course/{source.parent.name}/facts.md)" in readme, (
            f"README's More list misses {source.parent.name}'s facts"
        )
    assert not list((ROOT / "docs").glob("lab*-facts.md")), "a lab's facts file goes beside its notebook, not in docs/"
