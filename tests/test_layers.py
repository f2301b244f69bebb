"""The package's layers, enforced by reading every import of every module.

``paged_kv.cache`` imports no other layer; ``paged_kv.kernels`` may import ``cache``; ``paged_kv.engine`` may
import ``cache`` and ``kernels``; ``paged_kv.lab`` (the teaching aids) may import every layer. A module names
the layer it imports from (``from paged_kv.cache.checks import ...``): relative imports and imports of the
top-level ``paged_kv`` API would hide which layer a module leans on, so they are refused inside the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from import_walk import import_statements

PACKAGE = Path(__file__).resolve().parents[1] / "paged_kv"
MAY_IMPORT = {
    "cache": {"cache"},
    "kernels": {"cache", "kernels"},
    "engine": {"cache", "kernels", "engine"},
    "lab": {"cache", "kernels", "engine", "lab"},
}


def layer_violations(layer: str, source: str, where: str = "<source>") -> List[str]:
    """Every import in ``source`` (a module of ``layer``) that the layer rule refuses, as readable lines."""
    found = []
    for statement in import_statements(source):
        if statement.level:
            found.append(
                f"{where}:{statement.lineno}: relative import; name the layer (from paged_kv.<layer>.<module>)"
            )
            continue
        names = statement.reached()
        for name in names:
            parts = name.split(".")
            if parts[0] != "paged_kv":
                continue
            if len(parts) == 1:
                found.append(f"{where}:{statement.lineno}: imports the top-level paged_kv API; import from a layer")
            elif parts[1] not in MAY_IMPORT[layer]:
                found.append(f"{where}:{statement.lineno}: the {layer} layer imports paged_kv.{parts[1]}")
    return found


def _modules(layer: str) -> List[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def test_every_module_lives_in_a_layer():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"modules outside a layer folder: {loose}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(MAY_IMPORT), f"layer folders {sorted(folders)}, expected {sorted(MAY_IMPORT)}"


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_layer_imports_only_the_layers_below_it(layer):
    modules = _modules(layer)
    assert modules, f"paged_kv/{layer}/ has no modules"
    problems = [
        line
        for path in modules
        for line in layer_violations(layer, path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "layer, source, expected",
    [
        ("cache", "from paged_kv.lab.viz import draw", "the cache layer imports paged_kv.lab"),
        ("kernels", "def f():\n    import paged_kv.engine.model\n", "the kernels layer imports paged_kv.engine"),
        ("engine", "from paged_kv.lab import feedback", "the engine layer imports paged_kv.lab"),
        ("cache", "from .checks import check_positive_int", "relative import"),
        ("kernels", "from paged_kv import BlockManager", "top-level paged_kv API"),
    ],
)
def test_the_rule_catches_a_planted_violation(layer, source, expected):
    found = layer_violations(layer, source)
    assert len(found) == 1 and expected in found[0], found


def test_the_rule_lets_a_layer_import_what_lies_below():
    source = "from paged_kv.cache.checks import check_positive_int\nimport paged_kv.kernels.attention\nimport torch\n"
    assert layer_violations("engine", source) == []


def test_no_test_folder_is_skipped_by_pytests_norecursedirs():
    """A test folder whose name matches ``norecursedirs`` (``course`` keeps pytest out of the generated
    notebooks) would be dropped from ``make test`` without a word: every folder holding tests is collected."""
    import fnmatch
    import tomllib

    root = PACKAGE.parent
    options = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    patterns = options["norecursedirs"]
    test_dirs = {path.parent for top in options["testpaths"] for path in (root / top).rglob("test_*.py")}
    skipped = sorted(
        str(d.relative_to(root))
        for d in test_dirs
        if any(fnmatch.fnmatch(part, pattern) for part in d.relative_to(root).parts for pattern in patterns)
    )
    assert skipped == [], f"test folders pytest never enters (norecursedirs {patterns}): {skipped}"
    assert root / "tests" / "notebooks" in test_dirs
