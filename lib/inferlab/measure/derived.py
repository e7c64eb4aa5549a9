"""What a run's document derives from its measurements: every ceiling estimate of the run, MBU, MFU
and the roofline's predictions at the run's final ceilings, the calibrated (drift-corrected)
predictions and their errors, and whether the run is valid (no point faster than its roofline).
`measure.suite` measures; this module only computes from what was measured, so a recorded run can
be finished again (`finish`) without a device.
"""
from __future__ import annotations

from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.measure.ceilings import Ceilings
from inferlab.measure.drift import PROBE_NOISE, correction, drift_summary


def ceiling_estimates(start: Ceilings, end: Ceilings, phases, dtype: str) -> dict:
    """{'copy', 'read', 'matmul'}: every estimate of each ceiling a run took, in order (start,
    each phase's before and after, end). A missing read stream (older runs) is left out."""
    copy = [start.copy_bytes_per_s] + [p["copy_bytes_per_s"] for p in phases] + [end.copy_bytes_per_s]
    read = ([start.read_bytes_per_s] + [p.get("read_bytes_per_s") for p in phases]
            + [end.read_bytes_per_s])
    matmul = ([start.matmul_flops_per_s[dtype]] + [p["matmul_flops_per_s"] for p in phases]
              + [end.matmul_flops_per_s[dtype]])
    read = [r for r in read if r] or copy  # no read stream measured: fall back to the copy
    return {"copy": copy, "read": read, "matmul": matmul}


def _repredict(cfg, prec, acc, dtype, ttft, itl, batch, read_bytes_per_s=None):
    """MBU, MFU and the roofline predictions of every point, at the run's final ceilings.
    Decode MBU divides by the read-only stream (`read_bytes_per_s`; the copy when None): a decode
    step reads weights and KV cache and writes next to nothing. `mbu_copy`: the same against
    the copy bandwidth (bytes read + written), the roofline's memory ceiling."""
    read = read_bytes_per_s or acc.hbm_bytes_per_s
    for p in ttft:
        p["mfu"] = p["flops"] / p["timing"]["median_s"] / acc.peak(dtype)
    ttft_pred = [{"prompt_len": p["prompt_len"],
                  "predicted_s": float(prefill_time_s(cfg, acc, p["prompt_len"], 1, prec))} for p in ttft]
    out = []
    for sweep in (itl, batch):
        preds = []
        for p in sweep:
            for q in (p, p.get("eager")):
                if not q:
                    continue
                q["mbu"] = p["bytes"] / q["timing"]["median_s"] / read
                q["mbu_copy"] = p["bytes"] / q["timing"]["median_s"] / acc.hbm_bytes_per_s
                q["mfu"] = p["flops"] / q["timing"]["median_s"] / acc.peak(dtype)
            pred = _decode_pred(cfg, prec, acc, p["batch"], p["context_len"])
            if "throughput_tokens_per_s" in p:
                pred["predicted_tokens_per_s"] = p["batch"] / pred["predicted_s"]
            preds.append(pred)
        out.append(preds)
    return ttft_pred, out[0], out[1]


def validity_reasons(meas: dict, ceilings_max: dict | None) -> list:
    """Why a run is invalid: every point whose MBU or MFU exceeds 1 against the HIGHEST estimate
    of its ceiling in the run (`ceilings_max`: {'read', 'matmul'}; decode MBU against the read
    stream). Without ceilings_max (older runs), the points' own mbu and mfu are checked."""
    reasons = []
    for kind, key in (("ttft", "mfu"), ("itl", "mbu"), ("itl", "mfu"), ("batch", "mbu"), ("batch", "mfu")):
        for p in meas[kind]:
            if ceilings_max:
                amount = p["bytes"] if key == "mbu" else p["flops"]
                value = amount / p["timing"]["median_s"] / ceilings_max["read" if key == "mbu" else "matmul"]
            else:
                value = p.get(key, 0.0)
            if value > 1.0:
                where = f"S = {p['prompt_len']}" if kind == "ttft" else f"B = {p['batch']}, context {p['context_len']}"
                reasons.append(f"{key.upper()} {value:.2f} > 1 at {kind} {where}: faster than the roofline "
                               "of the highest ceilings measured in the run, so a ceiling was measured "
                               "while the machine was busier (or the weights sat in a cache)")
    return reasons


def finish(data: dict, breakdown=None) -> dict:
    """Add what follows from the measurements and the profile to a run's document: the calibrated
    prediction of every point (corrected by its drift probe where the run's config asks for it,
    `drift_correction`, and drift.correction says 'applied': a trusted probe whose ratio departs from 1 by more
    than drift.PROBE_NOISE; each prediction's `correction` says which, 'off' where it would have applied),
    summary.prediction_error, summary.drift (with `applied`: how many points were corrected), the per-operator
    breakdown's predicted columns, memory capacity, and the validity check (MBU, MFU <= 1 against the highest
    ceilings: validity_reasons)."""
    from inferlab.measure.breakdown import predicted_columns
    from inferlab.measure.calibrate import calibrated_time_s, prediction_error
    from inferlab.core.specs import ModelConfig, Precision

    cfg = ModelConfig(**data["config"]["model"])
    dt = data["config"]["dtype"]
    prec = Precision(dt, dt, dt)
    acc = Ceilings.from_dict(data["ceilings"]).accelerator(data["predictions"]["accelerator"]["name"])
    meas, pred = data["measurements"], data["predictions"]
    prof = data.get("profile")
    # runs recorded before the option existed were corrected; a run records whether it asked for the correction
    correct = data["config"].get("drift_correction", True)
    points = []
    ratios, untrusted, applied = [], 0, 0
    for kind, shape in (("ttft", lambda p: (1, p["prompt_len"], 0)),
                        ("itl", lambda p: (1, 1, p["context_len"] - 1)),
                        ("batch", lambda p: (p["batch"], 1, p["context_len"] - 1))):
        for m, pr in zip(meas[kind], pred[kind]):
            if prof:
                pr["calibrated_s"] = calibrated_time_s(prof, cfg, prec, acc, *shape(m))
                pr.pop("calibrated_uncorrected_s", None)
                pr.pop("correction", None)
                if m.get("drift"):  # the prediction at the host's speed of the moment (drift.py)
                    pr["calibrated_uncorrected_s"] = pr["calibrated_s"]
                    how = correction(m["drift"])
                    pr["correction"] = how if correct or how != "applied" else "off"
                    if how == "applied" and correct:
                        pr["calibrated_s"] = pr["calibrated_s"] * m["drift"]["ratio"]
                    if how == "untrusted":
                        untrusted += 1
                    else:
                        ratios.append(m["drift"]["ratio"])
                        applied += how == "applied" and correct
            points.append({"kind": kind, "median_s": m["timing"]["median_s"], **pr})
    summary = data["summary"]
    summary["prediction_error"] = prediction_error(points)
    if ratios or untrusted:
        summary["drift"] = ({**drift_summary(ratios), "untrusted": untrusted, "applied": applied,
                             "noise": PROBE_NOISE} if ratios else
                            {"n": 0, "untrusted": untrusted, "applied": 0, "noise": PROBE_NOISE, "drift": None,
                             "drifting": False})
        summary["drift"]["correction"] = "on" if correct else "off"
        summary["drifting"] = summary["drift"]["drifting"]
    if breakdown is not None:
        data["breakdown"] = breakdown
    if prof:
        for e in data.get("breakdown") or []:
            e.update(predicted_columns(prof, cfg, prec, acc, e))
    reasons = validity_reasons(meas, data.get("ceilings_max"))
    summary["valid"] = not reasons
    summary["invalid_reasons"] = reasons
    dev = data["device"]
    ds = pred.get("datasheet")
    summary["memory_capacity"] = {
        "device_total_bytes": dev.get("total_memory_bytes"),
        "source": "torch.cuda.get_device_properties().total_memory" if dev["kind"] == "cuda"
        else "/proc/meminfo MemTotal" if dev["kind"] == "cpu" else "torch.mps.recommended_max_memory()",
        "datasheet_bytes": ds.get("memory_bytes") if ds else None,
        # what this device type is known to report (data/accelerators.toml, with its source)
        "reported_bytes": ds.get("reported_memory_bytes") if ds else None}
    return data


def _decode_pred(cfg, prec, acc, b, ctx) -> dict:
    return {"batch": b, "context_len": ctx,
            "predicted_s": float(decode_step_time_s(cfg, acc, ctx, b, prec))}
