"""What users and operators see: per-request latencies, their percentiles, throughput, goodput.

Definitions (vLLM's serving benchmark): TTFT = first token - arrival; ITL = every gap between
consecutive tokens of a request; TPOT = (E2E - TTFT) / (output tokens - 1); E2E = last token -
arrival; queueing delay = start of the first step that works on the request - arrival.
Goodput = requests that meet the SLO per second of the run (DistServe's definition).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inferlab.base.input_checks import positive_float

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    """Latency targets in seconds; None skips one. itl_s applies to every ITL of a request,
    tpot_s to its mean. Defaults: the chapter's TTFT < 500 ms and ITL < 50 ms (as a TPOT)."""

    ttft_s: float | None = 0.5
    tpot_s: float | None = 0.05
    itl_s: float | None = None

    def __post_init__(self):
        for name in ("ttft_s", "tpot_s", "itl_s"):
            if getattr(self, name) is not None:
                positive_float(f"SLO {name}", getattr(self, name))


@dataclass(frozen=True)
class ReplicaTrace:
    """Per-step time series of one replica: start time, step time, sequences in the step,
    tokens fed, KV blocks in use (after the step's allocations), and the pool size."""

    start_s: np.ndarray = field(hash=False)
    step_s: np.ndarray = field(hash=False)
    batch: np.ndarray = field(hash=False)
    tokens: np.ndarray = field(hash=False)
    kv_blocks_used: np.ndarray = field(hash=False)
    kv_blocks_total: int = 0


@dataclass(frozen=True)
class SimResult:
    """Per-request outcomes (NaN for requests rejected as too long to ever fit) and per-replica
    time series. Times in seconds from the start of the workload."""

    arrival_s: np.ndarray = field(hash=False)
    prompt_tokens: np.ndarray = field(hash=False)
    output_tokens: np.ndarray = field(hash=False)
    first_scheduled_s: np.ndarray = field(hash=False)
    first_token_s: np.ndarray = field(hash=False)
    finish_s: np.ndarray = field(hash=False)
    preemptions: np.ndarray = field(hash=False)
    replica: np.ndarray = field(hash=False)
    itls_s: list = field(hash=False)
    traces: tuple = field(hash=False)
    description: str = ""
    # prompt tokens served from the prefix cache at each request's (last) admission; zeros without caching
    cached_prompt_tokens: np.ndarray | None = field(default=None, hash=False)
    # each request's priority level (workload.PRIORITY_CLASSES index); None: the workload had none
    priority: np.ndarray | None = field(default=None, hash=False)
    # disaggregated serving: when each request's KV cache reached the decode pool (NaN: not sent); else None
    kv_arrival_s: np.ndarray | None = field(default=None, hash=False)

    @property
    def completed(self) -> np.ndarray:
        return np.isfinite(self.finish_s)

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        return self.first_scheduled_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_tokens > 1,
                            (self.finish_s - self.first_token_s) / (self.output_tokens - 1), np.nan)

    @property
    def all_itls_s(self) -> np.ndarray:
        parts = [x for x in self.itls_s if len(x)]
        return np.concatenate(parts) if parts else np.zeros(0)

    @property
    def span_s(self) -> float:
        """First arrival to last token."""
        done = self.completed
        return float(np.max(self.finish_s[done]) - np.min(self.arrival_s)) if done.any() else float("nan")

    def meets(self, slo: SLO) -> np.ndarray:
        """Per request: completed and within every target of `slo`."""
        ok = self.completed.copy()
        if slo.ttft_s is not None:
            ok &= self.ttft_s <= slo.ttft_s
        if slo.tpot_s is not None:
            ok &= ~(self.tpot_s > slo.tpot_s)  # a one-token request has no TPOT to miss
        if slo.itl_s is not None:
            ok &= np.array([len(x) == 0 or float(np.max(x)) <= slo.itl_s for x in self.itls_s])
        return ok

    def summary(self, slo: SLO = SLO()) -> dict:
        """Percentiles (p50/p90/p99 and mean) of TTFT, ITL, TPOT, E2E and queueing delay, in
        seconds; throughput (requests/s, output tokens/s) and goodput over the span; sequences
        per step (max, time-weighted mean) and the fraction of KV blocks in use (peak, mean).
        A run that served nothing (every request rejected) is a result too: its percentiles are
        None, its span, rates, batch and KV use 0; never NaN."""
        done = self.completed
        out = {"requests": int(len(self.arrival_s)), "completed": int(done.sum()),
               "rejected": int((~done).sum()), "preemptions": int(self.preemptions.sum())}
        metrics = {"ttft_s": self.ttft_s[done], "itl_s": self.all_itls_s, "tpot_s": self.tpot_s[done],
                   "e2e_s": self.e2e_s[done], "queue_s": self.queue_s[done]}
        for name, x in metrics.items():
            x = x[np.isfinite(x)]
            out[name] = ({f"p{p}": float(np.percentile(x, p)) for p in PERCENTILES}
                         | {"mean": float(np.mean(x))}) if len(x) else None
        span = self.span_s
        if not done.any():  # nothing served (every request too long for the KV pool): no span, no rates
            span = 0.0
        out["span_s"] = span
        rate = (lambda count: float(count / span)) if span > 0 else (lambda count: 0.0)
        out["throughput_requests_per_s"] = rate(done.sum())
        out["throughput_output_tokens_per_s"] = rate(self.output_tokens[done].sum())
        steps = np.concatenate([t.step_s for t in self.traces])
        batch = np.concatenate([t.batch for t in self.traces])
        kv = np.concatenate([t.kv_blocks_used / t.kv_blocks_total for t in self.traces])
        busy = float(np.sum(steps))
        out["batch"] = {"max": int(batch.max()) if len(batch) else 0,
                        "mean": float(np.sum(batch * steps) / busy) if busy > 0 else 0.0}
        out["kv_use"] = {"peak_fraction": float(kv.max()) if len(kv) else 0.0,
                         "mean_fraction": float(np.sum(kv * steps) / busy) if busy > 0 else 0.0}
        good = self.meets(slo)
        out["slo"] = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "itl_s": slo.itl_s}
        out["slo_attainment"] = float(good.sum() / len(good))
        out["goodput_requests_per_s"] = rate(good.sum())
        return out

    def timeseries_csv(self) -> str:
        """Every step of every replica: replica, start_s, step_s, batch, tokens, kv_blocks_used, kv_blocks_total."""
        lines = ["replica,start_s,step_s,batch,tokens,kv_blocks_used,kv_blocks_total"]
        for i, t in enumerate(self.traces):
            lines += [f"{i},{a!r},{b!r},{c},{d},{e},{t.kv_blocks_total}"
                      for a, b, c, d, e in zip(t.start_s.tolist(), t.step_s.tolist(), t.batch.tolist(),
                                               t.tokens.tolist(), t.kv_blocks_used.tolist())]
        return "\n".join(lines) + "\n"

    def table(self, slo: SLO = SLO()) -> str:
        """The summary as text, times in ms."""
        s = self.summary(slo)
        lines = [f"{'metric':10s} {'p50':>10s} {'p90':>10s} {'p99':>10s} {'mean':>10s}   (ms)"]
        for name, label in (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("tpot_s", "TPOT"),
                            ("e2e_s", "E2E"), ("queue_s", "queueing")):
            v = s[name]
            if v is None:
                lines.append(f"{label:10s} {'-':>10s}")
                continue
            lines.append(f"{label:10s} " + " ".join(f"{v[k] * 1e3:10.2f}" for k in ("p50", "p90", "p99", "mean")))
        if s["completed"] == 0:
            pools = sorted({t.kv_blocks_total for t in self.traces})
            longest = int((self.prompt_tokens + self.output_tokens).max())
            lines.append(f"0 served, {s['rejected']} rejected (too long to fit: each request's prompt + output "
                         f"needs more KV blocks than a pool of {', '.join(map(str, pools))} blocks admits, "
                         f"less its watermark; the longest request is {longest:,} tokens)")
            return "\n".join(lines)
        lines.append(f"completed {s['completed']} of {s['requests']} requests in {s['span_s']:.2f} s "
                     f"({s['rejected']} too long to fit, {s['preemptions']} preemptions)")
        lines.append(f"batch per step: mean {s['batch']['mean']:.1f} (time-weighted), max {s['batch']['max']}; "
                     f"KV blocks in use: mean {s['kv_use']['mean_fraction'] * 100:.1f} %, "
                     f"peak {s['kv_use']['peak_fraction'] * 100:.1f} %")
        lines.append(f"throughput {s['throughput_requests_per_s']:.2f} requests/s, "
                     f"{s['throughput_output_tokens_per_s']:.0f} output tokens/s")
        targets = ", ".join(f"{k[:-2].upper()} <= {v * 1e3:g} ms" for k, v in s["slo"].items() if v is not None)
        lines.append(f"goodput {s['goodput_requests_per_s']:.2f} requests/s meet the SLO ({targets}): "
                     f"{s['slo_attainment'] * 100:.1f} % of requests")
        return "\n".join(lines)
