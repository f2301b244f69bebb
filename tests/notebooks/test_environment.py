"""environment.yml, pyproject.toml and requirements-lock.txt name the same packages and pins."""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.10 installs from pyproject ranges, not the lock")

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return {_name(r) for r in reqs}


def lock_pins():
    pins = {}
    for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"lock line {line!r} is not an exact pin"
            pins[_name(name)] = version
    return pins


def environment_pins():
    text = (ROOT / "environment.yml").read_text()
    pins = {}
    for match in re.finditer(r"^\s+- ([A-Za-z0-9_.\-]+)==([^\s]+)\s*$", text, re.M):
        pins[_name(match.group(1))] = match.group(2)
    return pins


def test_environment_yml_names_exactly_the_pyproject_packages():
    assert set(environment_pins()) == pyproject_packages()


def test_lock_pins_every_direct_package_at_the_environment_version():
    lock, env = lock_pins(), environment_pins()
    missing = pyproject_packages() - set(lock)
    assert not missing, f"requirements-lock.txt lacks {sorted(missing)}"
    assert {name: lock[name] for name in env} == env


def test_torch_and_triton_are_a_pair_cuda_torch_accepts():
    lock = lock_pins()
    assert lock["torch"] == "2.13.0" and lock["triton"] == "3.7.1"


def test_pyproject_ranges_admit_the_locked_versions():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    lock = lock_pins()
    for req in reqs:
        assert req.specifier.contains(lock[_name(req.name)], prereleases=True), (req, lock[_name(req.name)])
