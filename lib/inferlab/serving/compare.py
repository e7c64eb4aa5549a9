"""Set a real vLLM run beside the simulator's prediction for the same workload.

Reads the JSON that `vllm bench serve --save-result --save-detailed` writes (the per-request
fields are only saved with --save-detailed): `input_lens`, `output_lens`, `ttfts` (s), `itls`
(per request, the gaps between its tokens, s), `errors`, and the traffic it was run with,
`request_rate` (requests/s or "inf") and `burstiness` (gamma shape; cv = 1/sqrt(burstiness)).
The file has no arrival times, so the simulated workload draws arrivals with the same rate and
burstiness (seeded) and pairs them with the recorded lengths in order; percentiles compare, not
request-by-request times. Failed requests (a non-empty error or no output) are left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferlab.serving.metrics import SimResult
from inferlab.serving.simulate import simulate
from inferlab.serving.workload import Workload, arrival_times_s

REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")
STATS = ("p50", "p90", "p99", "mean")


@dataclass(frozen=True)
class VllmRun:
    """The successful requests of a `vllm bench serve` result, in seconds."""

    prompt_tokens: np.ndarray = field(hash=False)
    output_tokens: np.ndarray = field(hash=False)
    ttft_s: np.ndarray = field(hash=False)
    itls_s: list = field(hash=False)
    request_rate: float = float("inf")
    burstiness: float = 1.0
    max_concurrency: int | None = None
    request_throughput: float | None = None
    n_failed: int = 0

    @property
    def tpot_s(self) -> np.ndarray:
        sums = np.array([float(np.sum(x)) for x in self.itls_s])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_tokens > 1, sums / (self.output_tokens - 1), np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.ttft_s + np.array([float(np.sum(x)) for x in self.itls_s])


def read_vllm_result(path) -> VllmRun:
    """Parse a `vllm bench serve --save-result --save-detailed` JSON file; errors name the key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"--vllm-result {str(path)!r}: no such file") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"--vllm-result {str(path)!r}: not JSON ({err})") from None
    return parse_vllm_result(data, str(path))


def parse_vllm_result(data: dict, name: str = "result") -> VllmRun:
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a JSON object from vllm bench serve; got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"{name}: no per-request field(s) {', '.join(missing)}; run `vllm bench serve` "
                         "with --save-result --save-detailed")
    n = len(data["ttfts"])
    for k in REQUIRED:
        if not isinstance(data[k], list) or len(data[k]) != n:
            raise ValueError(f"{name}: {k} must be a list of {n} entries (one per request); "
                             f"got {type(data[k]).__name__} of length {len(data[k]) if isinstance(data[k], list) else '-'}")
    errors = data.get("errors") or [""] * n
    out_lens = np.array(data["output_lens"], dtype=float)
    ok = np.array([not e for e in errors]) & (out_lens > 0)
    if not ok.any():
        raise ValueError(f"{name}: no successful request (all have an error or no output)")
    rate = data.get("request_rate", "inf")
    rate = float("inf") if rate in ("inf", None) else float(rate)
    if not rate > 0:
        raise ValueError(f"{name}: request_rate must be > 0 or 'inf'; got {data.get('request_rate')!r}")
    burstiness = float(data.get("burstiness") or 1.0)
    if not burstiness > 0:
        raise ValueError(f"{name}: burstiness must be > 0; got {data.get('burstiness')!r}")
    idx = np.flatnonzero(ok)
    return VllmRun(
        prompt_tokens=np.array(data["input_lens"], dtype=np.int64)[idx],
        output_tokens=out_lens.astype(np.int64)[idx],
        ttft_s=np.array(data["ttfts"], dtype=float)[idx],
        itls_s=[np.asarray(data["itls"][i], dtype=float) for i in idx],
        request_rate=rate, burstiness=burstiness, max_concurrency=data.get("max_concurrency"),
        request_throughput=data.get("request_throughput"), n_failed=int(n - ok.sum()))


def workload_of(run: VllmRun, seed: int = 0) -> Workload:
    """The same prompts and outputs, arriving as vLLM sent them: all at 0 for rate 'inf', else gamma
    gaps of mean 1/rate and cv = 1/sqrt(burstiness) (vLLM draws the same distribution)."""
    n = len(run.ttft_s)
    if np.isinf(run.request_rate):
        arrivals = np.zeros(n)
    else:
        arrivals = arrival_times_s(run.request_rate, n, 1.0 / np.sqrt(run.burstiness), seed)
    return Workload(arrivals, run.prompt_tokens, np.maximum(run.output_tokens, 1))


def _stats(x) -> dict:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if not len(x):
        return {k: float("nan") for k in STATS}
    return {"p50": float(np.percentile(x, 50)), "p90": float(np.percentile(x, 90)),
            "p99": float(np.percentile(x, 99)), "mean": float(np.mean(x))}


@dataclass(frozen=True)
class Comparison:
    run: VllmRun
    sim: SimResult

    def distributions(self) -> dict:
        """{metric: (vLLM values, simulated values)} in seconds."""
        s, r = self.sim, self.run
        done = s.completed
        return {"TTFT": (r.ttft_s, s.ttft_s[done]),
                "ITL": (np.concatenate([x for x in r.itls_s] or [np.zeros(0)]), s.all_itls_s),
                "TPOT": (r.tpot_s, s.tpot_s[done]),
                "E2E": (r.e2e_s, s.e2e_s[done])}

    def rows(self) -> dict:
        """{metric: {stat: (vLLM, simulated, simulated / vLLM)}}."""
        out = {}
        for name, (real, sim) in self.distributions().items():
            a, b = _stats(real), _stats(sim)
            out[name] = {k: (a[k], b[k], b[k] / a[k] if a[k] > 0 else float("nan")) for k in STATS}
        return out

    def table(self) -> str:
        lines = [f"{'metric':6s} {'stat':5s} {'vLLM ms':>10s} {'sim ms':>10s} {'sim/vLLM':>9s}"]
        for name, stats in self.rows().items():
            for k, (a, b, ratio) in stats.items():
                lines.append(f"{name:6s} {k:5s} {a * 1e3:10.2f} {b * 1e3:10.2f} {ratio:9.2f}")
        r = self.run
        sim_thr = self.sim.summary()["throughput_requests_per_s"]
        if r.request_throughput:
            lines.append(f"request throughput: vLLM {r.request_throughput:.2f}/s, sim {sim_thr:.2f}/s")
        lines.append(f"{len(r.ttft_s)} requests compared ({r.n_failed} failed in the vLLM run left out); "
                     f"rate {r.request_rate:g}/s, burstiness {r.burstiness:g}")
        if r.max_concurrency:
            lines.append(f"note: the vLLM client capped concurrency at {r.max_concurrency}; "
                         "the simulation does not model that cap")
        return "\n".join(lines)

    def figure(self, path) -> Path:
        """CDFs of TTFT, ITL, TPOT and E2E, vLLM beside the simulation, saved to `path`."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        dists = self.distributions()
        fig, axes = plt.subplots(1, len(dists), figsize=(4 * len(dists), 3.4))
        for ax, (name, (real, sim)) in zip(axes, dists.items()):
            for values, label, style in ((real, "vLLM (measured)", "-"), (sim, "simulator", "--")):
                v = np.sort(np.asarray(values)[np.isfinite(values)]) * 1e3
                if len(v):
                    ax.plot(v, np.arange(1, len(v) + 1) / len(v), style, label=label)
            ax.set_xlabel(f"{name} (ms)")
            ax.set_ylabel("fraction of requests" if name != "ITL" else "fraction of gaps")
            ax.grid(alpha=0.3)
        axes[0].legend(loc="lower right")
        fig.suptitle("vLLM bench serve vs the simulator, same prompts and outputs")
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        return path


def compare(run: VllmRun, model, accelerator, policy, *, seed: int = 0, **simulate_kwargs) -> Comparison:
    """Simulate the run's workload on `model`/`accelerator` under `policy` (see `simulate`)."""
    return Comparison(run, simulate(workload_of(run, seed), model, accelerator, policy, **simulate_kwargs))
