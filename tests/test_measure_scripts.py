"""The prepared GPU script and the efficiency benchmark, run dry on the CPU with the tiny model:
the same code path as on an H100, minus the GPU."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                    reason="needs bash and coreutils' timeout")
def test_gpu_suite_script_runs_dry_on_cpu_and_writes_json_and_log(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), DEVICE="cpu", MODEL="tiny", QUICK="1", THREADS="1", LIMIT_S=str(HANG_S),
               PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_suite.sh")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (json_path,) = tmp_path.glob("gpu-suite-*.json")
    (log_path,) = tmp_path.glob("gpu-suite-*.log")
    data = json.loads(json_path.read_text())
    assert data["config"]["model"]["name"] == "tiny" and data["device"]["kind"] == "cpu"
    log = log_path.read_text()
    assert "suite exit status 0" in log and "MBU at B = 1" in log and "MFU at prefill" in log


def test_efficiency_benchmark_reads_a_recorded_run(tmp_path):
    from inferlab import measure
    recorded = sorted((ROOT / "data" / "measurements").glob("*.json"))
    if not recorded:
        pytest.skip("no recorded run in data/measurements")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measure_efficiency.py"),
                           "--from", str(recorded[0])], capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    r = measure.load(recorded[0])
    assert f"{r.summary['mbu_b1']:.3f}" in proc.stdout and f"{r.summary['mfu_prefill']:.3f}" in proc.stdout


def test_efficiency_benchmark_measures_live_with_the_tiny_model():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measure_efficiency.py"), "--model", "tiny",
                           "--device", "cpu", "--threads", "1", "--rounds", "1", "--max-rounds", "1"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "round 1: copy" in out and "MBU at B = 1 (context 64)" in out and "MFU at prefill S = 512" in out


def test_efficiency_benchmark_refuses_an_impossible_model():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measure_efficiency.py"), "--model",
                           "llama-2-70b", "--device", "cpu", "--dtype", "fp32"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 2 and "needs" in proc.stderr and "Traceback" not in proc.stderr


def test_drift_benchmark_runs_with_the_tiny_model_and_refuses_a_bad_duration():
    script = str(ROOT / "benchmarks" / "machine_drift.py")
    proc = subprocess.run([sys.executable, script, "--model", "tiny", "--seconds", "2", "--context", "64"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tiny bf16, B = 1, context 64" in out and "spread of the decode step, p90 / p10:" in out
    assert "correlation of copy bandwidth with decode speed:" in out
    bad = subprocess.run([sys.executable, script, "--seconds", "0"], capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode == 2 and "--seconds must be > 0; got 0.0" in bad.stderr
