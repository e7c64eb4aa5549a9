"""A validation's record as data: the rates and predictions every record names, and how the stored
records are found and read (`recorded`).

The pipelines (`serving.study.validate` for the project's own loop and transformers,
`serving.study.engines.vllm_validate` for vLLM) write one JSON record per validation;
`serving.study.reports` turns records into tables and sentences. The study's terms: docs/glossary.md.
"""
from __future__ import annotations

from inferlab.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
from inferlab.serving.workload import LengthDist


LOAD_FACTORS = (0.3, 0.6, 0.85, 1.3)
LOAD_NAMES = ("light", "moderate", "near saturation", "overloaded")
STEP_MODELS = ("profile", "fitted")  # what the simulator steps on: the operator profile, or a fit to calibrations
BOUNDED_UP_TO = 1.0  # fractions of capacity above this are reported, not held to the bounds
# Requests served at each rate. A TTFT p99 over n requests interpolates between the two slowest
# (numpy's linear percentile puts it 0.99 (n - 1) ranks up): it is close to the max, and one
# request decides it. 20 keeps a whole transformers validation, calibrations included, within
# minutes on a 2-core host (its durations: docs/lab-notes.md).
REQUESTS_PER_RATE = 20
# The predictions a transformers run makes from its probe (serving.study.hostspeed), both on the mean of
# its two brackets' probe-normalized fits (docs/glossary.md): every step x the host's speed
# ('probe-tracked', judged), or only its decode part x the speed and its prompt-chunk part x speed ** 0.5
# ('split'). Of predictions that did equally well on the development records, the simpler is judged
# (the counts: docs/lab-notes.md). PREDICTION is the one judged against the bounds (the run's
# `comparison` and summary.rates), and the only one a run computes. Older records also kept the others
# beside it (under PREDICTION_KEYS[name], `bracketed`: the brackets' raw fits without the probe, and
# `first_calibration_only`); `alternatives` recomputes all of them from what every record keeps
# (benchmarks/serving_alternatives.py).
PREDICTIONS = ("probe-tracked", "split")
PREDICTION = "probe-tracked"
PREDICTION_KEYS = {"probe-tracked": "tracked", "split": "split"}
PREDICTION_MODELS = {"probe-tracked": SpeedTrackedStepTime, "split": SplitSpeedStepTime}
ALTERNATIVES = ("split", "bracketed", "first-calibration-only")


def _length_record(d: LengthDist) -> dict:
    return {"kind": d.kind, "mean": d.mean, "cv": d.cv, "low": d.low, "high": d.high}


def _length_dist(d: dict) -> LengthDist:
    """A record's config.prompt / config.output as a LengthDist; records made before their bounds
    were kept take the CLI's (low = mean // 8, high = 3 x mean)."""
    mean = d["mean"]
    return LengthDist(d["kind"], mean, d["cv"], d.get("low", max(1, int(mean) // 8)), d.get("high", 3 * int(mean)))


def rates_summary(runs: list) -> list:
    """summary.rates of a record: per run {fraction, bounded, requests (the sample behind each
    TTFT percentile), ttft_p50_error, ttft_p99_error, itl_p50_error, itl_p99_error} (errors:
    simulated / live - 1); with a host-speed probe, those are the judged prediction's (`prediction`:
    'probe-tracked' or 'split'), and `bracketed` (the same four errors without the probe) and the other
    probe prediction's (under its PREDICTION_KEYS name, in records that have it) are added."""
    out = []
    for r in runs:
        row = {"fraction": float(r["fraction"]), "bounded": bool(r["bounded"]), "requests": int(r["requests"])}
        for m, short in (("ttft_s", "ttft"), ("itl_s", "itl")):
            for p in ("p50", "p99"):
                row[f"{short}_{p}_error"] = float(r["comparison"][m][p]["error"])
        if "probe" in r:  # the errors above are the judged prediction's; the others beside them (older records)
            row["prediction"] = r.get("prediction", "probe-tracked")
            for key in ("bracketed", *(PREDICTION_KEYS[k] for k in PREDICTIONS if k != row["prediction"])):
                if key in r:
                    row[key] = {f"{short}_{p}_error": float(r[key]["comparison"][m][p]["error"])
                                for m, short in (("ttft_s", "ttft"), ("itl_s", "itl")) for p in ("p50", "p99")}
        out.append(row)
    return out


def step_log(steps: list, durations_s) -> dict:
    """Timed steps as JSON columns: {n_decode, decode_kv_tokens, chunks [[q, p], ...], sampled, step_s}."""
    return {"n_decode": [int(s.decode_seqs) for s in steps], "decode_kv_tokens": [float(s.decode_kv_tokens) for s in steps],
            "chunks": [[[int(q), int(p)] for q, p in s.chunks] for s in steps], "sampled": [int(s.sampled) for s in steps],
            "step_s": [float(x) for x in durations_s]}


def calibration_drift(calibrations: list) -> float:
    """How much the calibrations of one validation moved: serving.study.bracketing.drift over their speeds."""
    from inferlab.study.bracketing import drift
    return drift([c["speed"] for c in calibrations])


def record_engine(record: dict) -> str:
    """The engine a record validated: summary.engine; 'inferlab' for records made before engines."""
    return record.get("summary", {}).get("engine", "inferlab")


def record_step_model(record: dict) -> str:
    """What a record's simulation stepped on: 'fitted' (calibrations of the engine) or 'profile'."""
    return "fitted" if str(record.get("profile", {}).get("kind", "")).endswith("-fitted") else "profile"


def recorded(directory=None, engine: str | None = "inferlab", step_model: str | None = None) -> list:
    """The recorded validation runs (data/measurements/serving/*.json) of `engine` (None: all) whose
    simulation stepped on `step_model` ('profile', 'fitted'; None: either), oldest first."""
    import json

    from inferlab.measure.result import recorded_dir
    d = directory or recorded_dir() / "serving"
    runs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.exists() else []
    runs = [r for r in runs if r.get("schema") == "inferlab.serving.validate/1"]
    if engine is not None:
        from inferlab.study.engines import check_engine
        check_engine(engine)
        runs = [r for r in runs if record_engine(r) == engine]
    if step_model is not None:
        if step_model not in STEP_MODELS:
            raise ValueError(f"step_model must be one of {', '.join(STEP_MODELS)}; got {step_model!r}")
        runs = [r for r in runs if record_step_model(r) == step_model]
    return sorted(runs, key=lambda r: r["created"])


METRIC_NAMES = {"ttft_s": "TTFT", "itl_s": "ITL"}


ERROR_KEYS = (("ttft_s", "p50", "ttft_p50"), ("ttft_s", "p99", "ttft_p99"), ("itl_s", "p50", "itl_p50"),
              ("itl_s", "p99", "itl_p99"))
