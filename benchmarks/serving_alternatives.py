"""The predictions a validation run no longer makes, recomputed from its records.

    python benchmarks/serving_alternatives.py                       # the recorded transformers repeats
    python benchmarks/serving_alternatives.py data/measurements/serving/development

A transformers run (`inferlab serving validate --engine transformers`) computes one prediction, the
judged one (`serving.study.validate.PREDICTION`, probe-tracked). Its record keeps what the others
need: each rate's averaged fits, its probe log and the first calibration's fit. This re-simulates,
per record and rate, the judged prediction and the alternatives (`serving.study.validate.alternatives`):
'split' (decode part x the host's speed, prompt-chunk part x its square root), 'bracketed' (the
brackets' mean raw fit, no probe) and 'first-calibration-only' (the first calibration's fit alone),
prints their errors (TTFT p50 / p99, ITL p50 / p99, simulated / live - 1) and how many bounded
(repeat, rate) pairs each puts within both bounds. Exit status 0: this script reports.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from inferlab.measure.plan import resolve_model
from inferlab.study import validate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", default=None,
                    help="a folder of validation records (default: data/measurements/serving)")
    args = ap.parse_args(argv)
    folder = None if args.directory is None else Path(args.directory)
    records = [r for r in validate.recorded(folder, engine="transformers") if any("probe" in x for x in r["runs"])]
    if not records:
        print("no probe-tracked transformers record")
        return 0
    model = resolve_model(records[0]["config"]["model"])
    print("record (UTC)      load   prediction              TTFT p50 / p99, ITL p50 / p99")
    for rec in records:
        for name, runs in validate.alternatives(rec, model).items():
            for r in runs:
                c = r["comparison"]
                errors = " / ".join(f"{c[m][p]['error']:+.0%}" for m, p, _ in validate.ERROR_KEYS)
                ok = " ok" if c["within_bounds"] and r["bounded"] else ("" if r["bounded"] else " (not bounded)")
                print(f"{rec['created'][:16].replace('T', ' ')}  {r['fraction']:.2f}x  {name:22s}  {errors}{ok}")
    counts = validate.alternative_counts(records, model)
    print(", ".join(f"{name} {n} of {counts['pairs']}" for name, n in counts.items() if name != "pairs")
          + " bounded (repeat, rate) pairs within both bounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
