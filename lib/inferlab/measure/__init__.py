"""inferlab.measure: the chapter's effects measured live, each beside the library's prediction.

    from inferlab import measure
    run = measure.quick_suite()          # or measure.run_suite(); device/dtype/model chosen for you
    run = measure.live_run()             # the same, measured once and shared by every notebook
    print(run.table())                   # ceilings, TTFT, ITL, throughput, MBU, MFU, checks
    measure.plots.ttft_plot([run, *measure.recorded_runs()])

Definitions follow vLLM's serving benchmark (benchmarks/benchmark_serving.py):
  TTFT  time to first token: request sent -> first output token received. Here: the prefill
        pass that yields it (no queue, network or tokenizer).
  ITL   inter-token latency: each gap between consecutive output tokens of one request. Here:
        one decode step (every sequence of the batch gets one token per step).
  TPOT  time per output token: (end-to-end latency - TTFT) / (output tokens - 1), the mean ITL.
  MBU   library bytes of one decode step / step time / measured copy bandwidth.
  MFU   library FLOPs of a pass / its time / measured matmul FLOP/s.
Predictions come from inferlab.core.latency with an Accelerator built from the ceilings measured in
the same run. Every run is data (SuiteResult.save -> JSON); recorded GPU runs live in
data/measurements/ and load with recorded_runs().
"""
from inferlab.measure.checks import (Check, all_checks, decode_slower_than_prefill,
                                     itl_flat_with_context, throughput_grows_with_batch,
                                     ttft_grows_with_prompt)
from inferlab.measure.plan import CPU_MODEL, PRESETS, TINY_MODEL, Plan, check_fits, make_plan, memory_needed
from inferlab.measure.result import SCHEMA, TARGETS, SuiteResult, load, recorded_runs, recorded_summary
from inferlab.measure.timing import Timing, time_fn, time_interleaved


def run_suite(config=None, /, **kwargs) -> SuiteResult:
    """See inferlab.measure.suite.run_suite and SuiteConfig (imports torch on first use)."""
    from inferlab.measure.suite import run_suite as _run
    return _run(config, **kwargs)


def measure_efficiency(config=None, /, **kwargs) -> dict:
    """See inferlab.measure.efficiency.measure_efficiency and EfficiencyConfig: MBU at B = 1, MFU at the largest
    prefill, ratios to ceilings measured around each kernel."""
    from inferlab.measure.efficiency import measure_efficiency as _eff
    return _eff(config, **kwargs)


def quick_suite(**kwargs) -> SuiteResult:
    """run_suite(quick=True, ...): fewer points, each stage within its budget (docs/measuring.md)."""
    return run_suite(quick=True, **kwargs)


def live_run(*, quick: bool = True, path=None, max_age_s: float = 6 * 3600, **kwargs) -> SuiteResult:
    """This machine's run, measured once and shared by every notebook: read from `path`
    (default build/measurements/live-quick.json, or live-full.json) when it was measured on
    this device, with this torch and these arguments, less than `max_age_s` ago; otherwise
    measured now (run_suite(quick=quick, **kwargs)) and saved there."""
    import time
    from datetime import datetime
    from pathlib import Path

    from inferlab.measure import device as _device
    from inferlab.core.specs import data_dir

    path = Path(path) if path else data_dir().parent / "build" / "measurements" / (
        f"live-{'quick' if quick else 'full'}.json")
    request = {"quick": quick, **{k: v for k, v in sorted(kwargs.items()) if k != "progress"}}
    if path.exists():
        try:
            old = SuiteResult.load(path)
            age = time.time() - datetime.fromisoformat(old.data["created"]).timestamp()
            import torch
            same = (old.data.get("request") == request and old.data["versions"]["torch"] == torch.__version__
                    and old.device["name"] == _device.describe(kwargs.get("device", "auto")).name)
            if same and age < max_age_s:
                return SuiteResult(old.data, source="live")
        except (ValueError, KeyError, OSError):
            pass
    run = run_suite(quick=quick, **kwargs)
    run.data["request"] = request
    run.save(path)
    return run


def __getattr__(name):
    if name == "plots":  # matplotlib only when a plot is asked for
        import importlib
        return importlib.import_module("inferlab.notebook.measurement_plots")
    raise AttributeError(f"module 'inferlab.measure' has no attribute {name!r}")


__all__ = ["run_suite", "quick_suite", "live_run", "measure_efficiency", "SuiteResult", "load",
           "recorded_runs", "Timing", "time_fn", "time_interleaved",
           "Plan", "make_plan", "check_fits", "memory_needed", "CPU_MODEL", "TINY_MODEL", "PRESETS",
           "Check", "all_checks", "decode_slower_than_prefill", "throughput_grows_with_batch",
           "itl_flat_with_context", "ttft_grows_with_prompt", "SCHEMA", "TARGETS"]
