#!/usr/bin/env bash
# The three recorded vLLM validations (docs/vllm.md), for a quiet machine: nothing else running, since
# vLLM's server, its engine, its benchmark client and the simulator share the cores. Each repeat starts
# its own server (about 2 minutes) and takes 5-8 minutes in all on 2 cores.
#   benchmarks/vllm_repeats.sh [REPEATS] [DIR]   records DIR/vllm-tiny-<UTC time>.json
#   (DIR: default data/measurements/serving/vllm/steplog-<UTC date>)
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
DIR=${2:-data/measurements/serving/vllm/steplog-$(date -u +%Y-%m-%d)}
mkdir -p "$DIR"
make vllm
if [ ! -f .venv-vllm/.installed ]; then echo "vllm_repeats: no .venv-vllm (make vllm skipped); nothing recorded"; exit 1; fi
load=$(cut -d' ' -f1 /proc/loadavg)
echo "vllm_repeats: load average $load on $(nproc) cores before the first repeat (quiet: well under the core count)"
for i in $(seq 1 "$REPEATS"); do
    out=$DIR/vllm-tiny-$(date -u +%Y%m%dT%H%M).json
    echo "vllm_repeats: repeat $i of $REPEATS -> $out (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    .venv/bin/inferlab serving validate --engine vllm --out "$out"
done
