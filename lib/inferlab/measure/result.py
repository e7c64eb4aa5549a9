"""A measurement run as data: one JSON document per run, and the object notebooks read it through.

Schema "inferlab.measure/1" (all values in SI units: seconds, bytes, FLOPs):
  schema, created (UTC ISO 8601), elapsed_s, label
  device      kind, name, memory, cache, threads, BLAS, datasheet entry, load average
  versions    python, torch, cuda, numpy, inferlab, platform
  config      model (every ModelConfig field), dtype and why, decode mode, plan (every sweep)
  ceilings    copy_bytes_per_s, matmul_flops_per_s {dtype: FLOP/s}, memory_bytes, timings;
              ceilings_after: the same re-measured at the end (drift check)
  measurements  roofline, ttft, itl, batch: lists of points, each with its Timing
              (median, quartiles, min, max, every sample) and the FLOPs and bytes the library
              counts; generation: one request's TTFT, every ITL and TPOT
  predictions accelerator (the measured ceilings), method, and per point the library's time
  summary     MBU at B = 1, MFU at the largest prefill, the targets; checks; notes
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferlab.measure.ceilings import Ceilings
from inferlab.measure.timing import Timing
from inferlab.core.specs import Accelerator, ModelConfig, Precision, data_dir
from inferlab.base.text_tables import text_table
from inferlab.base.units import GB

SCHEMA = "inferlab.measure/1"
REQUIRED = ("schema", "created", "device", "versions", "config", "ceilings", "measurements",
            "predictions", "summary")
MEASUREMENT_KINDS = ("roofline", "ttft", "itl", "batch", "generation")
# Efficiency targets of issue #5, per device kind: MBU at B = 1 and MFU at the largest prefill.
TARGETS = {"cpu": {"mbu": 0.8, "mfu": 0.7}, "cuda": {"mbu": 0.85, "mfu": 0.7}}


def validate(data: dict) -> dict:
    """Check the top-level shape of a result document; raise ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"a measurement result must be a JSON object; got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"measurement result lacks {', '.join(missing)} (schema {SCHEMA})")
    if data["schema"] != SCHEMA:
        raise ValueError(f"unknown measurement schema {data['schema']!r} (allowed: {SCHEMA})")
    for kind in MEASUREMENT_KINDS:
        if kind not in data["measurements"]:
            raise ValueError(f"measurement result lacks measurements.{kind}")
    for kind in ("roofline", "ttft", "itl", "batch"):
        for point in data["measurements"][kind]:
            Timing.from_dict(point["timing"])
    return data


@dataclass
class SuiteResult:
    """One run: `data` is the JSON document; `source` is 'live' or the file it was read from."""

    data: dict
    source: str = "live"

    # Reading ------------------------------------------------------------------------------------
    @property
    def recorded(self) -> bool:
        return self.source != "live"

    @property
    def device(self) -> dict:
        return self.data["device"]

    @property
    def label(self) -> str:
        """Who measured what: 'live: cpu-0.5b bf16 on Intel ...' or 'recorded 2026-..: ...'."""
        d, c = self.device, self.data["config"]
        what = f"{c['model']['name']} {c['dtype']} on {d['name']}"
        if self.recorded:
            return f"recorded {self.data['created'][:10]}: {what}"
        return f"live: {what}"

    def model(self) -> ModelConfig:
        return ModelConfig(**self.data["config"]["model"])

    @property
    def dtype(self) -> str:
        return self.data["config"]["dtype"]

    def precision(self) -> Precision:
        return Precision(self.dtype, self.dtype, self.dtype)

    def ceilings(self) -> Ceilings:
        return Ceilings.from_dict(self.data["ceilings"])

    def accelerator(self) -> Accelerator:
        """The measured ceilings as an Accelerator, for the library's predictions."""
        return self.ceilings().accelerator(self.data["predictions"]["accelerator"]["name"])

    def points(self, kind: str) -> list[dict]:
        """Measured points of one sweep (roofline, ttft, itl, batch), each joined with the
        library's prediction for it (`predicted_s`) when there is one."""
        if kind not in ("roofline", "ttft", "itl", "batch"):
            raise ValueError(f"unknown sweep {kind!r} (allowed: roofline, ttft, itl, batch)")
        preds = self.data["predictions"].get(kind, [])
        out = []
        for i, p in enumerate(self.data["measurements"][kind]):
            row = dict(p)
            row["median_s"] = p["timing"]["median_s"]
            row["q1_s"], row["q3_s"] = p["timing"]["q1_s"], p["timing"]["q3_s"]
            if i < len(preds):
                row.update({k: v for k, v in preds[i].items() if k not in row})
            out.append(row)
        return out

    def series(self, kind: str, x: str, y: str = "median_s") -> tuple[np.ndarray, np.ndarray]:
        """Two arrays from one sweep, e.g. series('ttft', 'prompt_len') -> (S, TTFT seconds)."""
        pts = self.points(kind)
        return (np.array([p[x] for p in pts], dtype=float), np.array([p[y] for p in pts], dtype=float))

    @property
    def summary(self) -> dict:
        return self.data["summary"]

    def checks(self) -> dict:
        """The qualitative checks, recomputed from the data: {name: Check}."""
        from inferlab.measure.checks import all_checks
        return all_checks(self)

    # Writing ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return self.data

    def to_json(self) -> str:
        return json.dumps(self.data, indent=1, sort_keys=False)

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def from_dict(cls, data: dict, source: str = "live") -> "SuiteResult":
        return cls(validate(data), source)

    @classmethod
    def load(cls, path) -> "SuiteResult":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
        return cls.from_dict(data, source=str(path))

    # Text ---------------------------------------------------------------------------------------
    def table(self) -> str:
        """Everything measured, beside the library's predictions, as plain text."""
        return format_result(self)


def recorded_dir() -> Path:
    return data_dir() / "measurements"


def recorded_runs(kind: str | None = None) -> list[SuiteResult]:
    """The runs kept in data/measurements/ (oldest first), optionally of one device kind."""
    runs = [SuiteResult.load(p) for p in sorted(recorded_dir().glob("*.json"))]
    runs = [r for r in runs if kind is None or r.device["kind"] == kind]
    return sorted(runs, key=lambda r: r.data["created"])


def load(path) -> SuiteResult:
    return SuiteResult.load(path)


# Formatting -------------------------------------------------------------------------------------

def _ms(s):
    return None if s is None else s * 1e3


def _busy(p):
    """Share of the CPUs other processes used while a point was timed (None off Linux/GPU)."""
    c = p["timing"].get("contention")
    return None if c is None else c * 100


def _ratio(p):
    c = p.get("calibrated_s")
    return None if not c else p["median_s"] / c


def format_result(r: SuiteResult) -> str:
    """Everything measured, beside the library's predictions, as plain text (SuiteResult.table)."""
    return "\n".join(_head_lines(r) + _sweep_lines(r) + _efficiency_lines(r) + _tail_lines(r))


def _head_lines(r: SuiteResult) -> list:
    """The device, software, model, dtype and decode step, the ceilings and the datasheet."""
    d, c, ce, s = r.device, r.data["config"], r.data["ceilings"], r.summary
    m = c["model"]
    cfg = r.model()
    from inferlab.core.memory import weight_bytes
    wb = weight_bytes(cfg, r.precision())
    cache = d.get("cache_bytes") or 0
    cache_txt = f", {'last-level cache' if d['kind'] == 'cpu' else 'L2'} {cache / 2**20:.0f} MiB" if cache else ""
    lines = [f"inferlab measure: {r.label}",
             f"  created {r.data['created']}, took {r.data.get('elapsed_s', 0):.0f} s",
             f"device    {d['kind']}: {d['name']}; {d['threads']} {'threads' if d['kind'] == 'cpu' else 'SMs'}, "
             f"{d['blas']}{cache_txt}; {d['free_memory_bytes'] / GB:.1f} GB free of "
             f"{d['total_memory_bytes'] / GB:.1f} GB",
             f"software  torch {r.data['versions']['torch']}, python {r.data['versions']['python']}",
             f"model     {m['name']}: d={m['d_model']} L={m['n_layers']} heads={m['n_heads']}/{m['n_kv_heads']} "
             f"d_ff={m['d_ff']} vocab={m['vocab_size']}; {cfg.n_params / 1e9:.3f} B params, "
             f"{wb / GB:.2f} GB of weights" + (f" ({wb / cache:.1f}x the cache)" if cache else ""),
             f"dtype     {c['dtype']} ({c['dtype_reason']}); decode step: "
             + ((c.get("decode_step") or {}).get("timed") or c['decode_mode'])]
    rates = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in ce["matmul_flops_per_s"].items())
    bw = ce["copy_bytes_per_s"]
    peak = ce["matmul_flops_per_s"][c["dtype"]]
    lines.append(f"ceilings  copy {bw / GB:.1f} GB/s ({ce['copy_buffer_bytes'] / 2**20:.0f} MiB buffer); "
                 f"matmul {rates} (n={ce['matmul_n']}); ridge point {peak / bw:.0f} FLOP/byte ({c['dtype']})")
    spread = s.get("ceilings")
    if spread:  # median of the run's estimates: what every ratio divides by; max: the validity bound
        names = {"copy": ("copy", GB, "GB/s"), "read": ("read-only stream", GB, "GB/s"),
                 "matmul": (f"matmul {c['dtype']}", 1e12, "TFLOP/s")}
        lines.append("          median of the run's estimates (MBU, MFU and predictions divide by it; "
                     "the max bounds validity):")
        for k, (label, unit, uname) in names.items():
            e = spread.get(k)
            if e:
                lines.append(f"            {label}: {e['median'] / unit:.3g} {uname} (min {e['min'] / unit:.3g}, "
                             f"max {e['max'] / unit:.3g}, {e['n']} estimates, spread {e['rel_spread']:.0%})")
    if ce.get("read_bytes_per_s"):
        by = ce.get("read_by_kernel") or {}
        fastest = f"fastest of {', '.join(by)}: {max(by, key=by.get)}" if by else "a sum"
        lines.append(f"          read-only stream ({fastest}): {ce['read_bytes_per_s'] / GB:.1f} GB/s = "
                     f"{ce['read_bytes_per_s'] / bw:.2f} of the copy's read + write traffic "
                     + ("(decode MBU divides by it; the roofline uses the copy)" if spread else
                        "(informational: the roofline uses the copy)"))
    after = r.data.get("ceilings_after")
    if after:
        lines.append(f"          re-measured at the end: copy {after['copy_bytes_per_s'] / GB:.1f} GB/s, "
                     f"matmul {c['dtype']} {after['matmul_flops_per_s'][c['dtype']] / 1e12:.3g} TFLOP/s")
    ds = r.data["predictions"].get("datasheet")
    if ds:
        lines.append(f"datasheet {ds['name']}: {ds['hbm_bytes_per_s'] / 1e12:.2f} TB/s, "
                     f"{ds['peak_flops_per_s'][c['dtype']] / 1e12:.0f} TFLOP/s {c['dtype']} "
                     f"(measured: {bw / ds['hbm_bytes_per_s']:.0%} and "
                     f"{peak / ds['peak_flops_per_s'][c['dtype']]:.0%})")
    lines.append("predictions: inferlab.core.latency (per-operator roofline) at the measured ceilings, MFU = MBU = 1;"
                 " 'calib.': calibrated from the operator profile (inferlab.measure.calibrate)")
    if s.get("valid") is False:
        lines.insert(0, "INVALID RUN: " + "; ".join(s.get("invalid_reasons") or []))
    if d["kind"] == "cpu":
        lines.append("'others %': share of the CPUs other processes used while a point was timed")
    return lines


def _sweep_lines(r: SuiteResult) -> list:
    """The measured roofline, TTFT, ITL, the one request and the batch sweep, each as a table."""
    c = r.data["config"]
    lines = []
    roof = r.points("roofline")
    if roof:
        lines += ["", f"measured roofline: M rows x ({roof[0]['d']} x {roof[0]['f']}) weight, {c['dtype']}",
                  text_table(("M", "FLOP/byte", "achieved TFLOP/s", "roofline TFLOP/s", "fraction"),
                             [(p["m"], p["intensity"], p["achieved_flops_per_s"] / 1e12,
                               p["attainable_flops_per_s"] / 1e12,
                               p["achieved_flops_per_s"] / p["attainable_flops_per_s"]) for p in roof],
                             ("d", ".3g", ".3g", ".3g", ".2f"))]
    ttft = r.points("ttft")
    if ttft:
        lines += ["", "TTFT (prefill, B = 1) against prompt length",
                  text_table(("prompt", "measured ms", "IQR ms", "predicted ms", "meas/pred", "calib. ms",
                              "meas/calib.", "MFU", "others %"),
                             [(p["prompt_len"], _ms(p["median_s"]), _ms(p["q3_s"] - p["q1_s"]),
                               _ms(p["predicted_s"]), p["median_s"] / p["predicted_s"], _ms(p.get("calibrated_s")),
                               _ratio(p), p["mfu"], _busy(p))
                              for p in ttft], ("d", ".4g", ".2g", ".4g", ".2f", ".4g", ".2f", ".2f", ".0f"))]
    itl = r.points("itl")
    if itl:
        eager = any(p.get("eager") for p in itl)  # compiled steps: the eager one timed beside each
        heads = ["context", "measured ms", "IQR ms", "predicted ms", "meas/pred", "calib. ms", "meas/calib.", "MBU"]
        fmts = ["d", ".4g", ".2g", ".4g", ".2f", ".4g", ".2f", ".2f"]
        rows = [[p["context_len"], _ms(p["median_s"]), _ms(p["q3_s"] - p["q1_s"]), _ms(p["predicted_s"]),
                 p["median_s"] / p["predicted_s"], _ms(p.get("calibrated_s")), _ratio(p), p["mbu"]] for p in itl]
        if eager:
            heads.append("eager ms")
            fmts.append(".4g")
            for row, p in zip(rows, itl):
                row.append(_ms(p["eager"]["timing"]["median_s"]) if p.get("eager") else None)
        for row, p in zip(rows, itl):
            row.append(_busy(p))
        lines += ["", "ITL (one decode step, B = 1) against context length"
                  + (f" ({c['decode_mode']}; 'eager ms': the same step eager, timed right after)" if eager else ""),
                  text_table(tuple(heads) + ("others %",), [tuple(row) for row in rows], tuple(fmts) + (".0f",))]
    gen = r.data["measurements"]["generation"]
    if gen:
        itls = np.array(gen["itl_s"])
        lines += ["", f"one request ({gen['decode_mode']} loop): prompt {gen['prompt_len']}, "
                      f"{gen['output_tokens']} output tokens",
                  f"  TTFT {gen['ttft_s'] * 1e3:.4g} ms, ITL median {np.median(itls) * 1e3:.4g} ms "
                  f"(p90 {np.percentile(itls, 90) * 1e3:.4g} ms), TPOT {gen['tpot_s'] * 1e3:.4g} ms, "
                  f"end-to-end {gen['e2e_s'] * 1e3:.4g} ms"]
    batch = r.points("batch")
    if batch:
        lim = r.data["measurements"].get("batch_memory_limit")
        lines += ["", f"decode step against batch size (context {batch[0]['context_len']}; memory allows "
                      f"B <= {lim})",
                  text_table(("B", "step ms", "tokens/s", "pred. ms", "pred. tokens/s", "meas/pred",
                              "calib. ms", "meas/calib.", "MBU", "MFU", "others %"),
                             [(p["batch"], _ms(p["median_s"]), p["throughput_tokens_per_s"],
                               _ms(p["predicted_s"]), p["predicted_tokens_per_s"],
                               p["median_s"] / p["predicted_s"], _ms(p.get("calibrated_s")), _ratio(p),
                               p["mbu"], p["mfu"], _busy(p)) for p in batch],
                             ("d", ".4g", ",.0f", ".4g", ",.0f", ".2f", ".4g", ".2f", ".2f", ".2f", ".0f"))]
    return lines


def _efficiency_lines(r: SuiteResult) -> list:
    """MBU, MFU, the drift probes and the prediction errors."""
    c, s = r.data["config"], r.summary
    lines = []
    lines += ["", "efficiency (ratios to the ceilings measured in this run)"]
    tgt = s.get("targets") or {}
    if s.get("mbu_b1") is not None:
        paired = s.get("mbu_b1_run_median") is not None and s["mbu_b1_run_median"] != s["mbu_b1"]
        lines.append(f"  MBU at B = 1, context {s['mbu_context']}: {s['mbu_b1']:.2f}"
                     + (" against the read-only stream timed in the same rounds" if paired
                        else " against the read-only stream")
                     + (f"   (target >= {tgt['mbu']})" if tgt else ""))
        if paired or s.get("mbu_b1_copy") is not None:
            lines.append("    against the run's median estimates: "
                         + ", ".join(([f"read stream {s['mbu_b1_run_median']:.2f}"] if paired else [])
                                     + ([f"copy {s['mbu_b1_copy']:.2f}"] if s.get("mbu_b1_copy") is not None
                                        else [])))
        if s.get("mbu_b1_eager") is not None:
            lines.append(f"  the same step eager: MBU {s['mbu_b1_eager']:.2f} (decode step {c['decode_mode']} "
                         f"by default; both timed at every B = 1 point)")
    if s.get("mfu_prefill") is not None:
        lines.append(f"  MFU at prefill S = {s['mfu_prompt_len']}: {s['mfu_prefill']:.2f}"
                     + (f"   (target >= {tgt['mfu']})" if tgt else ""))
    dr = s.get("drift")
    if dr and dr.get("n"):
        lines.append(f"  drift probes: the host ran at {dr['min']:.2f}-{dr['max']:.2f}x the profile's time "
                     f"over {dr['n']} points, drift {dr['drift']:.0%} (tolerance {dr['tolerance']:.0%})"
                     + (": DRIFTING, the calibrated errors carry it" if dr["drifting"] else ""))
    if dr and dr.get("untrusted"):
        lines.append(f"  drift probes: {dr['untrusted']} too unsteady to correct their points (samples' IQR / "
                     "median > 0.25): those predictions are left uncorrected")
    pe = s.get("prediction_error")
    if pe:
        lines += ["", "prediction error |measured / predicted - 1| over every TTFT, ITL and batch point"]
        for k, v in pe.items():
            if v.get("n"):
                lines.append(f"  {k:<10} median {v['median']:.1%}, p90 {v['p90']:.1%}, max {v['max']:.1%} "
                             f"({v['n']} points)")
        prof = r.data.get("profile") or {}
        if prof:
            shared = prof.get("shared_sizes") or []
            lines.append(f"  profile shapes disjoint from these points: {prof.get('disjoint')}"
                         + (f" (linear rows {', '.join(map(str, shared))} shared: kernels switch there)"
                            if shared else ""))
    return lines


def _tail_lines(r: SuiteResult) -> list:
    """Memory capacity, the checks and the run's notes."""
    s = r.summary
    lines = []
    mc = s.get("memory_capacity")
    if mc and mc.get("device_total_bytes"):
        lines.append(f"memory capacity: {mc['device_total_bytes'] / GB:.2f} GB ({mc['source']})"
                     + (f"; datasheet {mc['datasheet_bytes'] / GB:.0f} GB" if mc.get("datasheet_bytes") else "")
                     + (f"; this GPU type reports {mc['reported_bytes'] / GB:.2f} GB"
                        f" ({mc['reported_bytes'] / 2**30:.2f} GiB)" if mc.get("reported_bytes") else ""))
    checks = r.checks()
    if checks:
        lines += ["", "checks"]
        lines += [f"  [{'ok' if ch.passed else 'FAIL'}] {ch.text}" for ch in checks.values()]
    notes = r.data.get("notes") or []
    if notes:
        lines += ["", "notes"] + [f"  - {n}" for n in notes]
    return lines


def recorded_summary(runs) -> str:
    """One row per run (recorded ones, typically): the measured ceilings, the largest prefill and
    the B = 1 decode step beside the library's prediction, and MBU / MFU against their targets."""
    rows = []
    for r in runs:
        c, ce, s = r.data["config"], r.data["ceilings"], r.summary
        ttft, itl = r.points("ttft"), r.points("itl")
        big, first = ttft[-1], itl[0]
        rows.append((
            r.label, f"{ce['copy_bytes_per_s'] / GB:.1f}",
            f"{ce['matmul_flops_per_s'][c['dtype']] / 1e12:.3g}",
            f"{big['prompt_len']}: {big['timing']['median_s'] * 1e3:.0f} / {big['predicted_s'] * 1e3:.0f}",
            f"{first['timing']['median_s'] * 1e3:.1f} / {first['predicted_s'] * 1e3:.1f}",
            f"{s['mbu_b1']:.2f} (>= {s['targets']['mbu']})", f"{s['mfu_prefill']:.2f} (>= {s['targets']['mfu']})"))
    if not rows:
        return "no recorded runs in data/measurements/"
    return text_table(("run", "copy GB/s", "matmul TFLOP/s", "TTFT at S (ms, meas / pred)",
                       "ITL B=1 (ms, meas / pred)", "MBU B=1", "MFU prefill"), rows)
