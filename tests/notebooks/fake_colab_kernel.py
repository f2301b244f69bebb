"""Run notebooks' code cells the way Colab's kernel would (started by fake_colab.run_like_colab).

Usage: python fake_colab_kernel.py NOTEBOOKS.json REPORT.json
NOTEBOOKS.json maps a name to ``{"cells": [code-cell source, ...], "stop_on_error": bool}``; a
notebook that stops on error runs like Run All (nothing after the first failing cell). ``google.colab`` is importable and
imported before any cell runs (Colab's kernel imports it at start), so ``"google.colab" in
sys.modules`` holds, as it does in Colab. Runs under the fake Colab's own python: it may import
nothing from the course's repository.
"""

import json
import sys
import tempfile
from pathlib import Path


def install_google_colab_stub() -> None:
    stub = Path(tempfile.mkdtemp(prefix="google-colab-stub-"))
    (stub / "google" / "colab").mkdir(parents=True)
    (stub / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab."""\n')
    sys.path.append(str(stub))
    import google.colab  # noqa: F401  (Colab's kernel has it imported)


def main(notebooks_path: str, report_path: str) -> None:
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
            with capture_output(display=False) as shown:
                outcome = shell.run_cell(source, store_history=False)
            print(f"--- {name}, cell {len(results)}\n{shown.stdout}{shown.stderr}", flush=True)
            error = outcome.error_before_exec or outcome.error_in_exec
            results.append(
                {
                    "ok": bool(outcome.success),
                    "shown": (shown.stdout + shown.stderr)[-4000:],
                    "error": "" if error is None else f"{type(error).__name__}: {error}",
                }
            )
            if error is not None and notebook["stop_on_error"]:
                break
        report[name] = results
    Path(report_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
