#!/usr/bin/env bash
# One check of the course's GPU work, in one go, on a GPU machine's own Python (no make, no lock):
#   1. the package kernel's tests on the GPU        (pytest tests/kernels)
#   2. lab 06's solution notebook, top to bottom    (nbclient; its GPU section included)
#   3. the benchmark, quick grid + target region    (bench/bench_paged_attention.py --quick --target)
#   4. a short tuning sweep                         (bench/tune_paged_attention.py --quick)
# Everything lands in OUT_DIR (7 files): gpu_check.log, triton_paged_attention.ipynb (executed),
# paged_attention.json/.png, paged_attention_roofline.png, tune_results.json, launch_table.json (the
# package's table with this GPU's winners merged in: copy it to paged_kv/kernels/ to keep them).
# Each step has a time budget (together under 8 minutes); a step that fails or runs out is reported and
# the others still run; the exit status is non-zero if any step failed.
#
# Usage: bash bench/gpu_check.sh [--dry-run] OUT_DIR     (run from the repository root)
# Without a CUDA GPU, or with --dry-run, it checks the same plumbing on the CPU in well under a minute:
# test collection instead of the tests, the notebook's prerequisites instead of running it, and the dry
# runs of the benchmark and the sweep. PYTHON=... picks another interpreter (default python3).
set -u
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUT=${1:?usage: bash bench/gpu_check.sh [--dry-run] OUT_DIR}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg  # absolute: the notebook runs in its folder
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
: > "$LOG"
NOTEBOOK=solutions/06-triton-paged-attention/triton_paged_attention.ipynb
FAILED=0
START=$(date +%s)

say() { echo "$*" | tee -a "$LOG"; }

# step NAME SECONDS COMMAND...: run with a time limit, output into the log, one status line.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  say "=== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    say "--- $name: ok in $(( $(date +%s) - t0 ))s"
  else
    FAILED=1
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "--- $name: OUT OF TIME after ${limit}s"
    else say "--- $name: FAILED (exit $rc) in $(( $(date +%s) - t0 ))s"; fi
  fi
}

if [ $DRY -eq 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "No CUDA GPU seen by $PY's torch: running the dry run instead."
  DRY=1
fi
MODE=$([ $DRY -eq 1 ] && echo "dry run (CPU)" || echo "GPU")
say "gpu_check: $MODE, $("$PY" -c 'import platform, torch, triton; print("python", platform.python_version(), "torch", torch.__version__, "triton", triton.__version__)' 2>&1)"
command -v nvidia-smi >/dev/null && nvidia-smi -L >> "$LOG" 2>&1
cp paged_kv/kernels/launch_table.json "$OUT/launch_table.json"

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= tests/kernels)
if [ $DRY -eq 1 ]; then
  step "kernel tests (collection only)" 60 "${PYTEST[@]}" --collect-only
else
  step "kernel tests on the GPU" 90 "${PYTEST[@]}"
fi

if ! "$PY" -c 'import nbclient, nbformat, ipykernel' 2>/dev/null; then
  say "=== lab 06 notebook: SKIPPED: nbclient, nbformat or ipykernel is missing (pip install nbclient ipykernel)"
elif [ $DRY -eq 1 ]; then
  step "lab 06 notebook (dry run: prerequisites only)" 30 "$PY" -c "import nbformat; nb = nbformat.read('$NOTEBOOK', 4); print(len(nb.cells), 'cells would run in kernel python3')"
else
  step "lab 06 notebook, top to bottom" 130 "$PY" - "$NOTEBOOK" "$OUT/triton_paged_attention.ipynb" <<'EOF'
import sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient

source, target = Path(sys.argv[1]), Path(sys.argv[2])
nb = nbformat.read(source, as_version=4)
started = time.time()
client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(source.parent)}})
try:
    client.execute()
finally:
    nbformat.write(nb, target)
    print(f"executed {len(nb.cells)} cells in {time.time() - started:.0f}s; saved to {target}")
EOF
fi

if [ $DRY -eq 1 ]; then
  step "benchmark (dry run)" 60 "$PY" bench/bench_paged_attention.py --dry-run --out "$OUT"
  step "tuning sweep (dry run)" 40 "$PY" bench/tune_paged_attention.py --dry-run --out "$OUT" --write --table "$OUT/launch_table.json"
else
  step "benchmark: quick grid + target region" 180 "$PY" bench/bench_paged_attention.py --quick --target --out "$OUT"
  step "tuning sweep (quick)" 60 "$PY" bench/tune_paged_attention.py --quick --out "$OUT" --write --table "$OUT/launch_table.json"
fi

say "gpu_check: $MODE done in $(( $(date +%s) - START ))s; $([ $FAILED -eq 0 ] && echo 'every step passed' || echo 'SOME STEP FAILED')"
exit $FAILED
