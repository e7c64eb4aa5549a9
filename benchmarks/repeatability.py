"""Repeatability: `inferlab measure --quick` several times in a row, one line per run.

    python benchmarks/repeatability.py                      # five quick runs in the default dtype
    python benchmarks/repeatability.py --dtype fp32 --runs 1
    python benchmarks/repeatability.py --from DIR           # the table of runs already in DIR/*.json

Each run is a separate process (as a reader runs it) writing its JSON into --out-dir. Per run:
MBU at B = 1 against the read-only stream timed in the same rounds as the step (measure.paired;
runs recorded before it: the median of the run's estimates), against the median of the run's
read-stream estimates, and against the copy, the same step eager, MFU at the largest prefill, the calibrated prediction's median and p90
error (corrected by the drift probes, and before the correction), the drift the probes saw and
whether the run is drifting, validity, and how much of the machine other processes took.
Targets (issue #27, 2-vCPU VM, default dtype): MBU >= 0.8, MFU >= 0.7, calibrated median error
<= 0.10 and p90 <= 0.20 in at least 4 of 5 runs. Exit status 0 whether or not they are met.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TARGETS = {"mbu": 0.8, "mfu": 0.7, "median": 0.10, "p90": 0.20}
HEADERS = ("run", "dtype", "decode", "took s", "MBU B=1 read", "MBU run-median", "MBU copy", "MBU eager", "MFU",
           "calib. median", "calib. p90", "uncorr. median", "uncorr. p90", "drift", "drifting",
           "valid", "others max %")


def row_of(doc: dict) -> dict:
    """The figures of one run's JSON document (schema inferlab.measure/1)."""
    s = doc["summary"]
    pe = s.get("prediction_error") or {}
    cal, unc = pe.get("calibrated") or {}, pe.get("calibrated_uncorrected") or {}
    dr = s.get("drift") or {}
    shares = [p["timing"].get("contention") for k in ("ttft", "itl", "batch")
              for p in doc["measurements"][k]]
    shares = [x for x in shares if x is not None]
    return {"created": doc.get("created"), "dtype": doc["config"]["dtype"],
            "decode_mode": doc["config"].get("decode_mode"), "elapsed_s": doc.get("elapsed_s"),
            "mbu": s.get("mbu_b1"), "mbu_run_median": s.get("mbu_b1_run_median", s.get("mbu_b1")), "mbu_copy": s.get("mbu_b1_copy"), "mbu_eager": s.get("mbu_b1_eager"),
            "mfu": s.get("mfu_prefill"), "median": cal.get("median"), "p90": cal.get("p90"),
            "median_uncorrected": unc.get("median"), "p90_uncorrected": unc.get("p90"),
            "drift": dr.get("drift"), "drifting": s.get("drifting"), "valid": s.get("valid"),
            "others_max": max(shares) if shares else None}


def meets(row: dict, targets=TARGETS) -> dict:
    """{'mbu', 'mfu', 'error'}: whether one run meets each target (a missing figure does not)."""
    def ok(v, cmp):
        return v is not None and cmp(v)
    return {"mbu": ok(row["mbu"], lambda v: v >= targets["mbu"]),
            "mfu": ok(row["mfu"], lambda v: v >= targets["mfu"]),
            "error": ok(row["median"], lambda v: v <= targets["median"])
            and ok(row["p90"], lambda v: v <= targets["p90"])}


def table(rows) -> str:
    from inferlab.base.text_tables import text_table

    def f(v, fmt=".2f"):
        return None if v is None else format(v, fmt)
    body = [(i + 1, r["dtype"], r["decode_mode"], f(r["elapsed_s"], ".0f"), f(r["mbu"]), f(r.get("mbu_run_median")), f(r["mbu_copy"]),
             f(r["mbu_eager"]), f(r["mfu"]), f(r["median"], ".3f"), f(r["p90"], ".3f"),
             f(r["median_uncorrected"], ".3f"), f(r["p90_uncorrected"], ".3f"), f(r["drift"], ".0%"),
             r["drifting"], r["valid"], f(None if r["others_max"] is None else 100 * r["others_max"], ".0f"))
            for i, r in enumerate(rows)]
    lines = [text_table(HEADERS, body)]
    hits = [meets(r) for r in rows]
    lines.append(f"targets met (MBU >= {TARGETS['mbu']}, MFU >= {TARGETS['mfu']}, calibrated median <= "
                 f"{TARGETS['median']} and p90 <= {TARGETS['p90']}): MBU in {sum(h['mbu'] for h in hits)}, "
                 f"MFU in {sum(h['mfu'] for h in hits)}, error in {sum(h['error'] for h in hits)} "
                 f"of {len(rows)} runs")
    return "\n".join(lines)


def load_dir(folder) -> list:
    docs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]
    return sorted(docs, key=lambda d: d.get("created", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="quick runs in a row (default 5)")
    ap.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    ap.add_argument("--model", default=None, help="preset or models.toml name (default: sized to the device)")
    ap.add_argument("--decode-mode", default="auto", choices=("auto", "eager", "graph", "compile"))
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="where each run's JSON goes (default build/repeatability/<UTC time>)")
    ap.add_argument("--from", dest="from_", type=Path, default=None, help="print the table of DIR/*.json instead")
    args = ap.parse_args(argv)
    if args.from_ is not None:
        if not args.from_.is_dir():
            print(f"repeatability: error: --from must be a folder of run JSONs; got {args.from_}", file=sys.stderr)
            return 2
        docs = load_dir(args.from_)
        if not docs:
            print(f"repeatability: error: no *.json in {args.from_}", file=sys.stderr)
            return 2
        print(table([row_of(d) for d in docs]))
        return 0
    if not 1 <= args.runs <= 100:
        print(f"repeatability: error: --runs must lie in 1..100; got {args.runs}", file=sys.stderr)
        return 2
    out = args.out_dir or Path("build") / "repeatability" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(args.runs):
        path = out / f"run{i + 1}.json"
        cmd = [sys.executable, "-m", "inferlab", "measure", "--quick", "--no-progress", "--dtype", args.dtype,
               "--decode-mode", args.decode_mode, "--out", str(path)]
        if args.model:
            cmd += ["--model", args.model]
        with open(os.devnull, "w") as sink:
            done = subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"repeatability: run {i + 1} failed (exit {done.returncode}): "
                  f"{(done.stderr.strip().splitlines() or [''])[-1]}", file=sys.stderr)
            return 1
        rows.append(row_of(json.loads(path.read_text())))
        r = rows[-1]

        def f(v, fmt):
            return "-" if v is None else format(v, fmt)
        print(f"run {i + 1}: MBU {f(r['mbu'], '.2f')}, MFU {f(r['mfu'], '.2f')}, calibrated median "
              f"{f(r['median'], '.3f')} p90 {f(r['p90'], '.3f')}, drifting {r['drifting']}, "
              f"took {f(r['elapsed_s'], '.0f')} s ({path})", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
