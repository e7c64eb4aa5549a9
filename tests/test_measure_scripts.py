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
    # eager decode: the dry run checks the script's path; the CPU's compiled default is tested on its own
    env = dict(os.environ, OUT=str(tmp_path), DEVICE="cpu", MODEL="tiny", QUICK="1", THREADS="1", LIMIT_S=str(HANG_S),
               DECODE_MODE="eager", PYTHON=sys.executable)
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
                           "--device", "cpu", "--threads", "1", "--rounds", "1", "--max-rounds", "1",
                           "--decode-mode", "eager"],
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


def test_the_measuring_page_s_sgemv_figures_are_those_of_the_stored_avx2_runs():
    # docs/measuring.md explains the AVX2 runs' MBU by the read rate of MKL's gemv kernel; the ranges it
    # states are recomputed here from each run's ceilings.read_by_kernel and its B = 1 batch point
    gemv, share, step, of_gemv = [], [], [], []
    for run in sorted((ROOT / "data" / "measurements" / "repeatability" / "2026-12-04-avx2-emulated").glob("run*.json")):
        d = json.loads(run.read_text())
        by, read = d["ceilings"]["read_by_kernel"], d["ceilings"]["read_bytes_per_s"]
        b1 = next(p for p in d["measurements"]["batch"] if p["batch"] == 1)
        gemv.append(by["gemv"] / 1e9)
        share.append(by["gemv"] / max(by["sum"], by["dot"]))
        step.append(b1["mbu"] * read / 1e9)  # the point's bytes / time: its MBU times the stream it was divided by
        of_gemv.append(b1["mbu"] * read / by["gemv"])
    assert len(gemv) == 5
    page = " ".join((ROOT / "docs" / "measuring.md").read_text().split())
    for values, unit in ((gemv, " GB/s"), (share, " of the sum and dot"), (step, " GB/s)"), (of_gemv, " of that `gemv` rate")):
        nd = 1 if unit.strip().startswith("GB/s") else 2
        stated = f"{min(values):.{nd}f}-{max(values):.{nd}f}{unit}"
        assert stated in page, stated


def test_gemv_benchmark_prints_each_kernel_share_of_the_fastest():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gemv_read
    finally:
        sys.path.pop(0)
    # 20 GB/s against 32 and 30: the shares are 20/32 = 0.62, 1.00 and 30/32 = 0.94
    table = gemv_read.report({"torch F.linear (M = 1)": 20e9, "torch.sum": 32e9, "numpy W @ x": 30e9})
    rows = {line[:24].strip(): line[24:].split() for line in table.splitlines()[1:]}
    assert rows == {"torch F.linear (M = 1)": ["20.0", "0.62"], "torch.sum": ["32.0", "1.00"],
                    "numpy W @ x": ["30.0", "0.94"]}


def test_gemv_benchmark_runs_small_and_holds_torch_to_avx2():
    script = str(ROOT / "benchmarks" / "gemv_read.py")
    proc = subprocess.run([sys.executable, script, "--mib", "1", "--rounds", "1", "--threads", "1", "--hold", "avx2"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    head, *rows = proc.stdout.strip().splitlines()
    # the re-run under the hold: torch reports AVX2 whatever this CPU has (or DEFAULT on a CPU without it)
    assert "CPU capability AVX2" in head or "CPU capability DEFAULT" in head, head
    shares = [float(r.split()[-1]) for r in rows[1:]]
    assert len(shares) == 3 and max(shares) == 1.0 and all(0 < s <= 1 for s in shares)
    bad = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode == 2 and "--rounds must be in [1, 100]; got 0" in bad.stderr


def _run_doc(mbu, mfu, median, p90, drifting, created):
    """The fields of one run's JSON that benchmarks/repeatability.py reads."""
    timing = {"contention": 0.02}
    return {"created": created, "elapsed_s": 150.0, "config": {"dtype": "bf16", "decode_mode": "compile"},
            "measurements": {"ttft": [{"timing": timing}], "itl": [{"timing": {"contention": 0.07}}], "batch": []},
            "summary": {"mbu_b1": mbu, "mbu_b1_copy": mbu / 2, "mbu_b1_eager": mbu / 1.4, "mfu_prefill": mfu,
                        "prediction_error": {"calibrated": {"median": median, "p90": p90},
                                             "calibrated_uncorrected": {"median": 2 * median, "p90": 2 * p90}},
                        "drift": {"drift": 0.3 if drifting else 0.05}, "drifting": drifting, "valid": True}}


def test_repeatability_counts_the_runs_that_meet_each_target(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import repeatability
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    # MBU 0.85 / 0.79 / 0.80: two at >= 0.8; MFU 0.7 / 0.69 / 0.9: two; error (median <= 0.10 and
    # p90 <= 0.20): (0.10, 0.20) yes, (0.05, 0.21) no, (0.11, 0.1) no: one.
    docs = [_run_doc(0.85, 0.70, 0.10, 0.20, False, "2026-01-01T00:00:01"),
            _run_doc(0.79, 0.69, 0.05, 0.21, True, "2026-01-01T00:00:02"),
            _run_doc(0.80, 0.90, 0.11, 0.10, False, "2026-01-01T00:00:03")]
    rows = [repeatability.row_of(d) for d in docs]
    assert rows[0]["others_max"] == 0.07 and rows[1]["drifting"] is True
    assert [repeatability.meets(r) for r in rows] == [{"mbu": True, "mfu": True, "error": True},
                                                      {"mbu": False, "mfu": False, "error": False},
                                                      {"mbu": True, "mfu": True, "error": False}]
    docs[0]["summary"]["mbu_b1_run_median"] = 0.66  # paired runs: the run-median figure in its own column
    for i, d in enumerate(reversed(docs)):  # files named out of order: the table follows `created`
        (tmp_path / f"r{i}.json").write_text(json.dumps(d))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "repeatability.py"), "--from", str(tmp_path)],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "MBU in 2, MFU in 2, error in 1 of 3 runs" in proc.stdout
    first = next(line for line in proc.stdout.splitlines() if line.strip().startswith("1 "))
    assert "0.85" in first and "0.66" in first and "0.100" in first and "0.200" in first


def test_repeatability_refuses_bad_input_in_one_line(tmp_path):
    for args, words in ((["--runs", "0"], "--runs must lie in 1..100; got 0"),
                        (["--from", str(tmp_path / "none")], "--from must be a folder"),
                        (["--from", str(tmp_path)], "no *.json in")):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "repeatability.py"), *args],
                              capture_output=True, text=True, timeout=HANG_S)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def _printed_table(folder):
    """The lines `benchmarks/repeatability.py --from FOLDER` prints (it must exit 0)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "repeatability.py"), "--from", str(folder)],
                          capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert proc.returncode == 0, proc.stderr
    return [line.rstrip() for line in proc.stdout.strip().splitlines()]


def test_the_readme_table_of_the_paired_runs_is_what_their_stored_files_print():
    # the lab notes' (docs/lab-notes.md) third repeatability table is not typed: it is the benchmark's table of the five stored runs
    folder = ROOT / "data" / "measurements" / "repeatability" / "2026-12-02-paired"
    printed = _printed_table(folder)
    assert len(printed) == 8 and "MBU in 5, MFU in 5, error in 4 of 5 runs" in printed[-1]
    readme = [line.rstrip() for line in (ROOT / "docs" / "lab-notes.md").read_text().splitlines()]
    start = readme.index(printed[0], readme.index("Then MBU at B = 1 was paired with the read stream of its own rounds (`inferlab.measure.paired`,"))
    assert readme[start:start + len(printed)] == printed


def test_the_measuring_page_table_of_the_avx2_emulated_runs_is_what_their_stored_files_print():
    # docs/measuring.md's AVX2 (emulated) table is the benchmark's own table of the five stored runs, not typed
    folder = ROOT / "data" / "measurements" / "repeatability" / "2026-12-04-avx2-emulated"
    printed = _printed_table(folder)
    assert len(printed) == 8 and "MBU in 0, MFU in 5, error in 4 of 5 runs" in printed[-1]
    docs = [line.rstrip() for line in (ROOT / "docs" / "measuring.md").read_text().splitlines()]
    start = docs.index(printed[0], docs.index("### On an AVX2 CPU (emulated): five quick runs"))
    assert docs[start:start + len(printed)] == printed
    # every run says why bf16 was not measured
    for run in sorted(folder.glob("run*.json")):
        doc = json.loads(run.read_text())
        assert "bf16" in doc["dtype_probe"]["excluded"], run.name
        assert doc["config"]["dtype"] == "fp32"
