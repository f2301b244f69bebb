"""Run notebooks' code cells the way a platform's kernel would (started by fake_runtime.run_in_runtime).

Usage: python fake_runtime_kernel.py NOTEBOOKS.json REPORT.json [--colab]
NOTEBOOKS.json maps a name to ``{"cells": [code-cell source, ...], "stop_on_error": bool}``; a
notebook that stops on error runs like Run All (nothing after the first failing cell). With ``--colab``,
``google.colab`` is importable and imported before any cell runs (Colab's kernel imports it at start), so
``"google.colab" in sys.modules`` holds, as it does in Colab; other platforms are told apart by the
environment the kernel is started in. Runs under the fake runtime's own python: it may import nothing from
the course's repository.
"""

import json
import resource
import sys
import tempfile
import time
from pathlib import Path


def install_google_colab_stub() -> None:
    stub = Path(tempfile.mkdtemp(prefix="google-colab-stub-"))
    (stub / "google" / "colab").mkdir(parents=True)
    (stub / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab."""\n')
    sys.path.append(str(stub))
    import google.colab  # noqa: F401  (Colab's kernel has it imported)


def _cpu_seconds() -> float:
    """CPU time used so far by this process and the processes it waited for (a setup cell's pip)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(notebooks_path: str, report_path: str, colab: bool) -> None:
    if colab:
        install_google_colab_stub()
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    notebooks = json.loads(Path(notebooks_path).read_text())
    report = {}
    for name, notebook in notebooks.items():
        shell.reset(new_session=True)
        results = []
        for source in notebook["cells"]:
            started = time.perf_counter(), _cpu_seconds()
            with capture_output(display=False) as shown:
                outcome = shell.run_cell(source, store_history=False)
            took = time.perf_counter() - started[0], _cpu_seconds() - started[1]
            print(f"--- {name}, cell {len(results)} ({took[0]:.1f} s, {took[1]:.1f} s of CPU)", flush=True)
            print(f"{shown.stdout}{shown.stderr}", flush=True)
            error = outcome.error_before_exec or outcome.error_in_exec
            results.append(
                {
                    "ok": bool(outcome.success),
                    "seconds": round(took[0], 2),
                    "shown": (shown.stdout + shown.stderr)[-4000:],
                    "error": "" if error is None else f"{type(error).__name__}: {error}",
                }
            )
            if error is not None and notebook["stop_on_error"]:
                break
        report[name] = results
    Path(report_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], colab="--colab" in sys.argv[3:])
