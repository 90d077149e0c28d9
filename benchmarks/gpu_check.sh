#!/usr/bin/env bash
# The GPU check: what holds on a machine with an NVIDIA GPU, in under 8 minutes.
#   1. the CUDA-marked tests (every reference on cuda, verdicts, the probe, the sandbox, training);
#   2. the sandbox suite and the gaming attempts on the spawn path (the path a GPU takes);
#   3. check latency with --device cuda through the worker;
#   4. parity: a sample of every corpus, a short training run of each lesson and a graded
#      notebook, on the CPU and on cuda, compared by what a learner is told.
# Prints one summary at the end that says which parts held. Needs .venv (make test builds it).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
LOG=$(mktemp -d)
export BACKPROP_TUTOR_HOME="$LOG/home" PYTHONWARNINGS=ignore

echo "== the machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "nvidia-smi: not available"
"$PY" -c "import torch; print('torch', torch.__version__, '| cuda available:', \
torch.cuda.is_available(), '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA device here: the CUDA parts below are skipped, so they cannot hold"
fi

run() {  # name, limit in seconds, command...
    local name=$1 limit=$2; shift 2
    echo "== $name"
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$LOG/$name.log" | tail -n 25
    local rc=${PIPESTATUS[0]}
    echo "$name|$rc|$((SECONDS - start))|$(grep -E '(passed|failed|skipped|error)' "$LOG/$name.log" \
        | tail -n 1 | tr -d '=' | sed 's/^ *//')" >> "$LOG/summary"
}

# -rs lists what was skipped; a machine without CUDA skips every one of these.
run cuda-tests 240 "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda tests/
BACKPROP_TUTOR_ISOLATION=spawn run sandbox-spawn 150 "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_sandbox.py tests/test_gaming.py
run latency 90 "$PY" benchmarks/gpu_latency.py
run parity 200 "$PY" benchmarks/device_parity.py --device cuda --sample 12

echo
echo "== summary"
held=0 total=0
while IFS='|' read -r name rc secs what; do
    total=$((total + 1))
    if [ "$rc" = 0 ]; then verdict="held"; held=$((held + 1));
    elif [ "$rc" = 124 ]; then verdict="RAN OUT OF TIME";
    else verdict="FAILED (exit $rc)"; fi
    printf '%-14s %-18s %4ss  %s\n' "$name" "$verdict" "$secs" "$what"
done < "$LOG/summary"
grep -h '^latency:' "$LOG/latency.log" 2>/dev/null
grep -h '^parity:' "$LOG/parity.log" 2>/dev/null
echo "$held of $total parts held (logs in $LOG)"
[ "$held" = "$total" ]
