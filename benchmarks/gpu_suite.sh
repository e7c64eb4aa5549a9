#!/usr/bin/env bash
# The whole measurement suite on one GPU, prepared to run unattended in under 8 minutes.
#
# On an H100/H200: Llama-2 13B's real shapes in bf16 (26 GB of weights; the largest Llama-2 that
# fits is chosen, so a smaller card measures 7B), decode steps replayed as CUDA graphs
# (DECODE_MODE=compile uses torch.compile with CUDA graphs instead; the harness falls back to
# graphs, then eager, if that fails), then MBU at B = 1 and MFU at the largest prefill printed
# from the same run. Writes $OUT/gpu-suite-<UTC stamp>.json and .log (OUT defaults to
# build/measurements). Copy the JSON into data/measurements/ to keep it as a recorded run.
#
#   benchmarks/gpu_suite.sh                          # on the GPU machine
#   DEVICE=cpu MODEL=tiny QUICK=1 benchmarks/gpu_suite.sh   # the same path, dry, on a CPU
# Other knobs: DECODE_MODE (auto|graph|compile|eager), LIMIT_S, THREADS, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-build/measurements}"
DEVICE="${DEVICE:-cuda}"
MODEL="${MODEL:-}"                 # empty: the largest of llama-2-13b / llama-2-7b that fits
DECODE_MODE="${DECODE_MODE:-auto}" # auto = CUDA graphs on a GPU
LIMIT_S="${LIMIT_S:-420}"          # the suite's wall-clock limit; the whole script stays < 8 min
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c "import inferlab" 2>/dev/null; then
  export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"   # a bare machine: run from the checkout
fi

mkdir -p "$OUT"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
json="$OUT/gpu-suite-$stamp.json"
log="$OUT/gpu-suite-$stamp.log"
args=(--device "$DEVICE" --decode-mode "$DECODE_MODE" --no-progress --out "$json")
[ -n "$MODEL" ] && args+=(--model "$MODEL")
[ -n "${QUICK:-}" ] && args+=(--quick)
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")

{
  echo "# inferlab gpu_suite $stamp: device=$DEVICE model=${MODEL:-auto} decode=$DECODE_MODE limit=${LIMIT_S}s"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm,power.limit,driver_version --format=csv
  else
    echo "(no nvidia-smi)"
  fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cuda available", torch.cuda.is_available())'
} 2>&1 | tee "$log"

start=$(date +%s)
status=0
timeout "$LIMIT_S" "$PY" -m inferlab measure "${args[@]}" 2>&1 | tee -a "$log" || status=${PIPESTATUS[0]}
echo "# suite exit status $status after $(( $(date +%s) - start )) s" | tee -a "$log"
if [ "$status" -ne 0 ] || [ ! -s "$json" ]; then
  echo "# no result: see $log" | tee -a "$log"
  [ "$status" -ne 0 ] && exit "$status"
  exit 1
fi
"$PY" benchmarks/measure_efficiency.py --from "$json" 2>&1 | tee -a "$log"
echo "# wrote $json and $log" | tee -a "$log"
