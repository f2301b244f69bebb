"""Record the reference scheduler's snapshots of lab 07's own traces into paged_kv/lab/scheduler_traces.json.

A class's handout for lab 07 carries a package without the reference scheduler (``autograder.editions``), so
the lab's picture of a trace and its visible tests compare with these recordings instead. The traces are
the ones the solution notebook's cells build: its given and visible cells are run with the reference as
``Scheduler`` and with ``compare_with_reference`` / ``reference_snapshots`` collecting each trace they name.

    python -m tools.record_scheduler_traces          # rewrite the file
    python -m tools.record_scheduler_traces --check  # exit 1 when the file is not what the notebook needs now
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "solutions" / "07-serve-it" / "serve_it.ipynb"
CELLS = ("lab07-given-08", "lab07-visible")  # the cells whose traces are compared with the reference


def notebook_traces(notebook: Path = NOTEBOOK) -> List[tuple]:
    """``[(case, spec)]`` of every trace the notebook's CELLS compare with the reference, in order."""
    from paged_kv import BlockManager
    from paged_kv.engine.scheduler import Scheduler
    from paged_kv.lab import scheduler_trace

    found: List[tuple] = []

    def collect(_cls, spec, case="", *args, **kwargs):
        found.append((case, spec))
        return 0

    def snapshots(spec):
        found.append(("the trace drawn in section 3", spec))
        return []

    namespace = {
        "TraceRequest": scheduler_trace.TraceRequest,
        "TraceSpec": scheduler_trace.TraceSpec,
        "BlockManager": BlockManager,
        "Scheduler": Scheduler,
        "compare_with_reference": collect,
        "reference_snapshots": snapshots,
        "format_snapshot": str,
        "print": lambda *a, **k: None,
        "expect_equal": lambda *a, **k: None,
        "say": lambda *a, **k: None,
    }
    cells = {
        c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
        for c in json.loads(notebook.read_text())["cells"]
    }
    for grade_id in CELLS:
        if grade_id not in cells:
            raise SystemExit(f"{notebook}: no cell {grade_id}")
        exec(compile(cells[grade_id], f"{notebook.name}:{grade_id}", "exec"), namespace)  # noqa: S102 - our notebook
    return found


def recording(notebook: Path = NOTEBOOK) -> Dict[str, dict]:
    """``{spec_key: {"case", "spec", "snapshots"}}`` replayed now with the reference scheduler."""
    from dataclasses import asdict

    from paged_kv.engine.scheduler import Scheduler
    from paged_kv.lab.scheduler_trace import replay, snapshot_to_json, spec_key

    out: Dict[str, dict] = {}
    for case, spec in notebook_traces(notebook):
        out.setdefault(
            spec_key(spec),
            {"case": case, "spec": asdict(spec), "snapshots": [snapshot_to_json(s) for s in replay(Scheduler, spec)]},
        )
    return out


def render(data: Dict[str, dict]) -> str:
    """JSON with one snapshot a line (a diff of a new recording reads step by step)."""
    compact = lambda value: json.dumps(value, separators=(", ", ": "))  # noqa: E731
    entries = []
    for key in sorted(data):
        entry = data[key]
        rows = ",\n".join(f"    {compact(row)}" for row in entry["snapshots"])
        entries.append(
            f' {compact(key)}: {{\n  "case": {compact(entry["case"])},\n  "spec": {compact(entry["spec"])},\n'
            f'  "snapshots": [\n{rows}\n  ]\n }}'
        )
    return "{\n" + ",\n".join(entries) + "\n}\n"


def main(argv=None) -> int:
    from paged_kv.lab.scheduler_trace import RECORDED

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    text = render(recording())
    if args.check:
        if not RECORDED.exists() or RECORDED.read_text() != text:
            print(f"{RECORDED} is out of date: run python -m tools.record_scheduler_traces", file=sys.stderr)
            return 1
        print(f"{RECORDED} is up to date")
        return 0
    RECORDED.write_text(text)
    print(f"wrote {len(json.loads(text))} traces to {RECORDED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
