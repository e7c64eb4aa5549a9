"""Set a real vLLM run beside the simulator's prediction for the same workload.

Reads the JSON that `vllm bench serve --save-result --save-detailed` writes (the per-request
fields are only saved with --save-detailed): `input_lens`, `output_lens`, `ttfts` (s), `itls`
(per request, the gaps between its tokens, s), `errors`, and the traffic it was run with,
`request_rate` (requests/s or "inf") and `burstiness` (gamma shape; cv = 1/sqrt(burstiness)).
Results saved since vLLM kept `start_times` (each request's send time, s, on the client's clock)
are simulated with those arrivals (less the first); older files have no arrival times, so the
simulated workload draws arrivals with the same rate and burstiness (seeded) and pairs them with the
recorded lengths in order; percentiles compare, not request-by-request times. Failed requests (a
non-empty error or no output) are left out.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferlab.base.atomicio import atomic_write
from inferlab.serving.metrics import SimResult
from inferlab.serving.simulate import simulate
from inferlab.serving.workload import MAX_CV, MAX_REQUESTS, MAX_TOKENS, MIN_CV, Workload, arrival_times_s

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
    start_s: np.ndarray | None = field(default=None, hash=False)  # send times (s), where the file has them

    @property
    def tpot_s(self) -> np.ndarray:
        sums = np.array([float(np.sum(x)) for x in self.itls_s])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_tokens > 1, sums / (self.output_tokens - 1), np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.ttft_s + np.array([float(np.sum(x)) for x in self.itls_s])


def read_vllm_result(path, name: str = "--vllm-result") -> VllmRun:
    """Parse a `vllm bench serve --save-result --save-detailed` JSON file; errors name the file and
    the field (see parse_vllm_result for what each field must hold)."""
    path = Path(path)
    where = f"{name} {str(path)!r}"
    try:
        text = path.read_bytes().decode("utf-8")
        data = json.loads(text)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not a UTF-8 text file (expected the JSON of vllm bench serve)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to be a vllm bench serve result") from None
    except OSError as err:
        raise ValueError(f"{where}: cannot be read ({err.strerror or err})") from None
    return parse_vllm_result(data, where)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(name: str, key: str, values, *, whole: bool, minimum: float, index: str = "") -> np.ndarray:
    """A list of JSON numbers, each finite, >= minimum and (whole) integral; ValueError naming the
    field and the first bad entry otherwise."""
    what = (f"whole numbers >= {minimum:g}" if whole else f"finite numbers >= {minimum:g}")
    if not isinstance(values, list):
        raise ValueError(f"{name}: {key}{index} must be a list of {what}; got {type(values).__name__} {_brief(values)}")
    for i, v in enumerate(values):
        ok = _is_number(v) and math.isfinite(v) and v >= minimum and (not whole or float(v).is_integer())
        if ok and whole and abs(v) > MAX_TOKENS:
            ok = False
        if not ok:
            raise ValueError(f"{name}: {key}{index}[{i}] must be one of {what}"
                             + (f" and <= {MAX_TOKENS}" if whole else "") + f"; got {_brief(v)}")
    return np.array(values, dtype=np.int64 if whole else float)


def _brief(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_vllm_result(data: dict, name: str = "result") -> VllmRun:
    """The successful requests of a vLLM result, every field checked: input_lens (whole >= 1),
    output_lens (whole >= 0), ttfts (s, finite >= 0), itls (per request a list of s, finite >= 0),
    all four of one length n (1 <= n <= MAX_REQUESTS); errors (optional: n strings or nulls);
    request_rate (> 0 requests/s, or "inf"/null: all at once); burstiness (null: 1; else the gamma
    shape, within what the workload draws: 1/MAX_CV^2 <= burstiness <= 1/MIN_CV^2); max_concurrency
    (null or whole >= 1); request_throughput (null or finite >= 0). ValueError naming the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a JSON object from vllm bench serve; got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"{name}: no per-request field(s) {', '.join(missing)}; run `vllm bench serve` "
                         "with --save-result --save-detailed")
    for k in REQUIRED:
        if not isinstance(data[k], list):
            raise ValueError(f"{name}: {k} must be a list with one entry per request; got "
                             f"{type(data[k]).__name__} {_brief(data[k])}")
    n = len(data["ttfts"])
    if not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"{name}: ttfts must hold 1 to {MAX_REQUESTS:,} requests; got {n}")
    for k in REQUIRED:
        if len(data[k]) != n:
            raise ValueError(f"{name}: {k} must be a list of {n} entries (one per request, as ttfts); "
                             f"got {len(data[k])}")
    in_lens = _numbers(name, "input_lens", data["input_lens"], whole=True, minimum=1)
    out_lens = _numbers(name, "output_lens", data["output_lens"], whole=True, minimum=0)
    ttfts = _numbers(name, "ttfts", data["ttfts"], whole=False, minimum=0)
    itls = [_numbers(name, "itls", x, whole=False, minimum=0, index=f"[{i}]") for i, x in enumerate(data["itls"])]
    errors = data.get("errors")
    if errors is None:
        errors = [""] * n
    if not isinstance(errors, list) or len(errors) != n or not all(e is None or isinstance(e, str) for e in errors):
        raise ValueError(f"{name}: errors must be a list of {n} strings (empty: success) or nulls; got {_brief(errors)}")
    ok = np.array([not e for e in errors]) & (out_lens > 0)
    if not ok.any():
        raise ValueError(f"{name}: no successful request (all have an error or no output)")
    rate = data.get("request_rate", "inf")
    if rate in ("inf", None) or (_is_number(rate) and rate == float("inf")):
        rate = float("inf")
    elif not (_is_number(rate) and math.isfinite(rate) and rate > 0):
        raise ValueError(f"{name}: request_rate must be a number > 0 (requests/s) or \"inf\"; got {_brief(rate)}")
    burstiness = data.get("burstiness")
    if burstiness is None:
        burstiness = 1.0
    low, high = 1 / MAX_CV ** 2, 1 / MIN_CV ** 2
    if not (_is_number(burstiness) and math.isfinite(burstiness) and low <= burstiness <= high):
        raise ValueError(f"{name}: burstiness must be a number >= {low:g} and <= {high:g} (the gamma shape; "
                         f"cv = 1/sqrt(burstiness)); got {_brief(burstiness)}")
    conc = data.get("max_concurrency")
    if conc is not None and not (_is_number(conc) and float(conc).is_integer() and 1 <= conc <= 2**63 - 1):
        raise ValueError(f"{name}: max_concurrency must be null or a whole number >= 1; got {_brief(conc)}")
    thr = data.get("request_throughput")
    if thr is not None and not (_is_number(thr) and math.isfinite(thr) and thr >= 0):
        raise ValueError(f"{name}: request_throughput must be null or a finite number >= 0; got {_brief(thr)}")
    starts = data.get("start_times")
    if starts is not None:
        if not isinstance(starts, list) or len(starts) != n:
            raise ValueError(f"{name}: start_times must be a list of {n} entries (one per request, as ttfts); "
                             f"got {_brief(starts)}")
        starts = _numbers(name, "start_times", starts, whole=False, minimum=0)
    idx = np.flatnonzero(ok)
    return VllmRun(
        prompt_tokens=in_lens[idx], output_tokens=out_lens[idx], ttft_s=ttfts[idx],
        itls_s=[itls[i] for i in idx], request_rate=float(rate), burstiness=float(burstiness),
        max_concurrency=None if conc is None else int(conc),
        request_throughput=None if thr is None else float(thr), n_failed=int(n - ok.sum()),
        start_s=None if starts is None else starts[idx])


def workload_of(run: VllmRun, seed: int = 0) -> Workload:
    """The same prompts and outputs, arriving as vLLM sent them: at its start_times (less the first)
    where the file has them; else all at 0 for rate 'inf', or gamma gaps of mean 1/rate and
    cv = 1/sqrt(burstiness) (vLLM draws the same distribution; `seed` draws ours)."""
    n = len(run.ttft_s)
    if run.start_s is not None:
        arrivals = run.start_s - run.start_s.min()
    elif np.isinf(run.request_rate):
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
        """{metric: {stat: (vLLM, simulated, simulated / vLLM)}}; NaN where a side has no value
        (no request of that kind, or a ratio over 0)."""
        out = {}
        for name, (real, sim) in self.distributions().items():
            a, b = _stats(real), _stats(sim)
            out[name] = {k: (a[k], b[k], b[k] / a[k] if a[k] > 0 else float("nan")) for k in STATS}
        return out

    def table(self) -> str:
        lines = [f"{'metric':6s} {'stat':5s} {'vLLM ms':>10s} {'sim ms':>10s} {'sim/vLLM':>9s}"]
        for name, stats in self.rows().items():
            for k, (a, b, ratio) in stats.items():
                cells = [f"{v:{w}.2f}" if math.isfinite(v) else f"{'-':>{w}s}"
                         for v, w in ((a * 1e3, 10), (b * 1e3, 10), (ratio, 9))]
                lines.append(f"{name:6s} {k:5s} {' '.join(cells)}")
        r = self.run
        sim_thr = self.sim.summary()["throughput_requests_per_s"]
        if r.request_throughput:
            lines.append(f"request throughput: vLLM {r.request_throughput:.2f}/s, sim {sim_thr:.2f}/s")
        rate = ("arrivals at its start_times" if r.start_s is not None else
                "all sent at once" if np.isinf(r.request_rate) else f"rate {r.request_rate:g}/s")
        lines.append(f"{len(r.ttft_s)} requests compared ({r.n_failed} failed in the vLLM run left out); "
                     f"{rate}, burstiness {r.burstiness:g}")
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
        try:
            with atomic_write(path) as tmp:  # an interrupted save leaves no partial image
                fig.savefig(tmp)
        finally:
            plt.close(fig)
        return path


def compare(run: VllmRun, model, accelerator, policy, *, seed: int = 0, **simulate_kwargs) -> Comparison:
    """Simulate the run's workload on `model`/`accelerator` under `policy` (see `simulate`)."""
    return Comparison(run, simulate(workload_of(run, seed), model, accelerator, policy, **simulate_kwargs))
