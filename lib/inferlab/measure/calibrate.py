"""From roofline to prediction: the library's per-operator costs, each divided by the efficiency
the operator profile measured for it, plus what the library does not count, measured.

    roofline_s(op)   = max(flops / peak, bytes / bandwidth)          (inferlab.core.roofline, MFU = MBU = 1)
    efficiency(op)   = roofline_s / measured_s  at the profiled shapes, interpolated in log(size)
    calibrated_s     = sum over counted ops of roofline_s(op) / efficiency(op)
                       + elementwise_s(tokens) * n_layers + head_elementwise_s(tokens) + overhead_s
                       + residual_s   (full passes at probe shapes less their operators: profile.pass_residual;
                                       with residual_scope 'decode', added to decode passes only,
                                       that of the B = 1 probes at B = 1, of the others at B > 1)

Interpolation: log(efficiency) is linear in log(size) between profiled sizes and constant
beyond the end points (an operator keeps the efficiency of its nearest profiled shape). The
uncounted elementwise time is interpolated in log-log, extrapolated with the slope of the last
segment. Sizes: rows M for a linear layer; the query length S for prefill attention; cached
positions summed over the batch (B x context) for decode attention.

Pure functions over the profile's JSON (numpy only): a recorded run predicts again without torch.
"""
from __future__ import annotations

import numpy as np

from inferlab.core.costs import ATTENTION_OPS, forward_costs
from inferlab.core.roofline import roofline_time_s
from inferlab.core.specs import ModelConfig, Precision

LINEAR_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "mlp_gate", "mlp_up", "mlp_down", "lm_head")


def linear_shapes(cfg: ModelConfig) -> dict:
    """{operator: (K, N)}: each linear layer's input and output width (nn.Linear's in, out)."""
    d = cfg.d_model
    shapes = {"q_proj": (d, cfg.q_dim), "k_proj": (d, cfg.kv_dim), "v_proj": (d, cfg.kv_dim),
              "o_proj": (cfg.q_dim, d), "mlp_up": (d, cfg.d_ff), "mlp_down": (cfg.d_ff, d),
              "lm_head": (d, cfg.vocab_size)}
    if cfg.gated_mlp:
        shapes["mlp_gate"] = (d, cfg.d_ff)
    return shapes


def shape_key(k: int, n: int) -> str:
    return f"{int(k)}x{int(n)}"


def interp_log(x, xs, ys, *, extrapolate: bool = False) -> float:
    """y at x from points (xs, ys), linear in (log x, log y). Beyond the ends: constant
    (extrapolate=False) or the slope of the end segment (extrapolate=True)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(xs) == 0 or len(xs) != len(ys):
        raise ValueError(f"interpolation needs matching, non-empty points; got {len(xs)} x and {len(ys)} y")
    if np.any(xs <= 0) or np.any(ys <= 0) or x <= 0:
        raise ValueError("interpolation in log space needs positive sizes and values")
    order = np.argsort(xs)
    lx, ly, l0 = np.log(xs[order]), np.log(ys[order]), np.log(float(x))
    if len(lx) == 1:
        return float(ys[0])
    if extrapolate and (l0 < lx[0] or l0 > lx[-1]):
        i = 0 if l0 < lx[0] else len(lx) - 2
        slope = (ly[i + 1] - ly[i]) / (lx[i + 1] - lx[i])
        return float(np.exp(ly[i] + slope * (l0 - lx[i])))
    return float(np.exp(np.interp(l0, lx, ly)))


def _efficiency(points, size, accelerator, dtype) -> float:
    """Interpolated roofline_s / measured_s of profile points [{size, flops, bytes, time_s}],
    the roofline at `accelerator` (the same ceilings the prediction divides by)."""
    xs = [p["size"] for p in points]
    eff = [float(roofline_time_s(p["flops"], p["bytes"], accelerator, dtype)) / p["time_s"] for p in points]
    return interp_log(size, xs, eff)


def pass_breakdown(profile: dict, cfg: ModelConfig, precision: Precision, accelerator, batch: int,
                   q_len: int, past_len: int) -> dict:
    """Seconds per operator class of one forward pass ({'roofline': {...}, 'calibrated': {...}}),
    the LM head on the last position only (as a server samples). Classes: each linear layer
    (summed over layers), 'attention' (QK^T and PV), 'elementwise' (norms, rotary, activation,
    residual adds, cache write, embedding: uncounted by the library, so 0 in the roofline) and
    'overhead' (the fixed per-step cost, likewise 0 in the roofline)."""
    costs = forward_costs(cfg, batch, q_len, past_len, precision)
    dtype = precision.compute_dtype
    tokens = int(batch) * int(q_len)
    roof, cal = {}, {}
    shapes = linear_shapes(cfg)
    for name, (k, n) in shapes.items():
        c = costs.head[name] if name == "lm_head" else costs.per_layer[name] * cfg.n_layers
        r = float(roofline_time_s(c.flops, c.bytes, accelerator, dtype))
        m = int(batch) if name == "lm_head" else tokens
        pts = profile["linear"][shape_key(k, n)]
        roof[name] = r
        cal[name] = r / _efficiency(pts, m, accelerator, dtype)
    roof["attention"], cal["attention"] = attention_time_s(profile, cfg, precision, accelerator,
                                                           batch, q_len, past_len, costs=costs)
    el = profile["elementwise"]
    roof["elementwise"] = 0.0
    cal["elementwise"] = (cfg.n_layers * interp_log(tokens, [p["tokens"] for p in el["layer"]],
                                                    [p["time_s"] for p in el["layer"]], extrapolate=True)
                          + interp_log(tokens, [p["tokens"] for p in el["head"]],
                                       [p["time_s"] for p in el["head"]], extrapolate=True))
    roof["overhead"] = 0.0
    residual = float(profile.get("residual_s", 0.0))
    if profile.get("residual_scope") == "decode":  # a compiled decode step's (profile.pass_residual)
        split = profile.get("residual") or {}
        residual = float(split.get("b1_s" if int(batch) == 1 else "batched_s", residual))
        if int(q_len) != 1:
            residual = 0.0  # prefill passes run eager
    cal["overhead"] = float(profile["overhead_s"]) + residual
    return {"roofline": roof, "calibrated": cal}


def attention_time_s(profile: dict, cfg: ModelConfig, precision: Precision, accelerator, batch: int,
                     q_len: int, past_len: int, *, costs=None) -> tuple[float, float]:
    """(roofline_s, calibrated_s) of all layers' attention (QK^T and PV) of `batch` sequences of
    `q_len` new tokens after `past_len` cached ones, as one call. Efficiency: the prefill profile
    at S_eq, the causal length with as many query-key pairs (S_eq(S_eq+1)/2 = q*p + q(q+1)/2; S_eq
    = q when p = 0), for q > 1; the decode profile at the keys read, batch x (p + 1), for q = 1."""
    costs = costs if costs is not None else forward_costs(cfg, batch, q_len, past_len, precision)
    dtype = precision.compute_dtype
    attn = [costs.per_layer[n] * cfg.n_layers for n in ATTENTION_OPS]
    r = float(sum(roofline_time_s(c.flops, c.bytes, accelerator, dtype) for c in attn))
    q, p = int(q_len), int(past_len)
    if q > 1:
        pairs = q * p + q * (q + 1) / 2
        s_eq = q if p == 0 else (np.sqrt(1 + 8 * pairs) - 1) / 2
        eff = _efficiency(profile["attention"]["prefill"], s_eq, accelerator, dtype)
    else:
        eff = _efficiency(profile["attention"]["decode"], int(batch) * (p + 1), accelerator, dtype)
    return r, r / eff


def calibrated_time_s(profile, cfg, precision, accelerator, batch, q_len, past_len) -> float:
    """The calibrated prediction of one pass: the sum of pass_breakdown's 'calibrated' column."""
    return float(sum(pass_breakdown(profile, cfg, precision, accelerator, batch, q_len, past_len)
                     ["calibrated"].values()))


def relative_errors(measured_s, predicted_s) -> np.ndarray:
    """|measured / predicted - 1| per point."""
    m, p = np.asarray(measured_s, dtype=float), np.asarray(predicted_s, dtype=float)
    if m.shape != p.shape:
        raise ValueError(f"measured and predicted must pair up; got {m.shape} and {p.shape}")
    if np.any(p <= 0) or np.any(m <= 0):
        raise ValueError("measured and predicted times must be positive")
    return np.abs(m / p - 1.0)


def error_summary(measured_s, predicted_s) -> dict:
    """{'median', 'p90', 'max', 'n'} of the relative errors (p90: numpy's linear percentile)."""
    e = relative_errors(measured_s, predicted_s)
    if e.size == 0:
        return {"median": None, "p90": None, "max": None, "n": 0}
    return {"median": float(np.median(e)), "p90": float(np.percentile(e, 90)),
            "max": float(e.max()), "n": int(e.size)}


def prediction_error(points) -> dict:
    """summary.prediction_error of a run: the error summary of the roofline and the calibrated
    prediction over points [{'median_s', 'predicted_s', 'calibrated_s'}] (TTFT, ITL, batch), and
    of the calibrated prediction before its drift correction ('calibrated_uncorrected_s', drift.py)
    where every point has one."""
    meas = [p["median_s"] for p in points]
    out = {"roofline": error_summary(meas, [p["predicted_s"] for p in points])}
    if points and all(p.get("calibrated_s") for p in points):
        out["calibrated"] = error_summary(meas, [p["calibrated_s"] for p in points])
    if points and all(p.get("calibrated_uncorrected_s") for p in points):
        out["calibrated_uncorrected"] = error_summary(meas, [p["calibrated_uncorrected_s"] for p in points])
    return out
