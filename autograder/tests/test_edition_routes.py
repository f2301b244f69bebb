"""No function an edition keeps computes what it leaves out: a new lab's reference cannot open a route to an earlier
lab's answer unnoticed (``autograder/editions/routes.py`` finds such functions by what they do with the calls each
lab's own checks make)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from autograder.editions.build import REPO
from autograder.editions.routes import Finding

# What lab 09's reference added that computes earlier labs' answers (each declared since as an equivalent), and the
# package's own hash chain (lab 05's compute_hash minus its argument checks).
LAB09S_ROUTES = {
    ("05-prefix-cache", "engine/chunked.py", "ChunkedBlockManager.get_computed_blocks"),
    ("05-prefix-cache", "engine/chunked.py", "ChunkedBlockManager._hits"),
    ("07-serve-it", "engine/chunked.py", "ChunkedSchedulerBase.preempt"),
    ("05-prefix-cache", "cache/prefix_cache.py", "_chain_hash"),
}


def _search(tmp_path, *options: str) -> list:
    """Run the search (it runs itself in a process whose package is the strictest edition)."""
    done = subprocess.run(
        [sys.executable, "-m", "autograder.editions.routes", "--json", *options],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    printed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    found = [Finding(**line["finding"]) for line in printed if "finding" in line]
    blind = [line["blind"] for line in printed if "blind" in line]
    assert done.returncode == (1 if found or blind else 0), done.stderr[-3000:]
    assert not blind, f"the search cannot tell these by what they do: {blind}"
    return found


def test_no_function_an_edition_keeps_computes_what_it_leaves_out(tmp_path):
    """Every left-out function its lab's checks call answers a call as it did when run again (so a copy of it would
    be found), and no function an edition keeps does what one of them does."""
    found = _search(tmp_path)
    assert not found, "\n".join(str(f) for f in found)


def test_the_search_names_lab_09s_routes_to_labs_05_and_07_when_their_declarations_are_taken_out(tmp_path):
    """With the declarations taken out, each route is found, by what it returns (``get_computed_blocks``: what
    ``can_allocate`` returns; ``_chain_hash``: what ``compute_hash`` returns), by a local of the answer (``_hits``:
    the blocks ``allocate`` walked) or by the state it leaves (``preempt``), and named as a Stub to declare."""
    undeclared = [
        f"paged_kv.{module[: -len('.py')].replace('/', '.')}.{qualname}" for _, module, qualname in LAB09S_ROUTES
    ]
    found = _search(tmp_path, "--labs", "05-prefix-cache", "07-serve-it", "--undeclare", *undeclared)
    assert {(f.lab, f.module, f.qualname) for f in found} == LAB09S_ROUTES
    assert {f.key for f in found} >= {"return", "state", "local hits"}
    admit = next(f for f in found if f.qualname == "ChunkedBlockManager._hits")
    assert admit.left_out.endswith("BlockManager.allocate") and admit.matched == admit.of
    assert 'Stub("engine/chunked.py", "ChunkedBlockManager._hits")' in str(admit)
    assert "autograder/labs/lab05_prefix_cache/__init__.py" in str(admit)
