"""vLLM's step log: the plugin that writes it inside vLLM's engine core (benchmarks/vllm_steplog.py), its
reading (serving.study.engines.vllm_steps), and what the vLLM validation builds on it
(serving.study.served: the front end's delays, the steps' spread). Everything runs without vLLM: the
plugin is loaded against stand-in classes with vLLM's names. Expected values are worked by hand."""
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from inferlab.serving.steptime import StepShape
from inferlab.study.engines.vllm_steps import (HANDOVER_MAX_S, EngineStep, StepLog, frontend_delays,
                                                       read_step_log, request_index)
from inferlab.study.served import Frontend, JitteredStepTime, SampledFrontend, mean_summary, spread_ratios
from inferlab.serving.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


# -- a step as the simulator names it -----------------------------------------------------------------------
def test_a_logged_step_becomes_the_simulators_step_shape():
    # a: decoding (prompt 100 computed, 1 token); b: middle chunk (36 after 64 of a 100-token prompt, ends it:
    # samples); c: first chunk of 20 of a 40-token prompt (does not sample); d: a 1-token prompt's only chunk
    step = EngineStep(0.0, 0.01, True, (("a", 1, 100, 100), ("b", 36, 64, 100), ("c", 20, 0, 40), ("d", 1, 0, 1)))
    s = step.shape
    assert s.decode_seqs == 1 and s.decode_kv_tokens == 101          # its 100 cached keys + its own
    assert s.chunks == ((36, 64), (20, 0), (1, 0))
    assert s.sampled == 3                                              # a, b (its prompt ends), d
    assert s.tokens == 1 + 36 + 20 + 1


def test_periods_run_start_to_start_and_an_idle_step_gets_the_median_handover():
    h = 0.2e-3
    steps = (EngineStep(0.0, 0.010, True, ()),            # followed at once: 0.0102
             EngineStep(0.0102, 0.0152, True, ()),        # followed at once: 0.0052
             EngineStep(0.0154, 0.0194, True, ()),        # "requests left" but the next starts 1.3 s later: idle
             EngineStep(1.3, 1.304, False, ()))           # the last
    p = StepLog(steps, ()).periods_s()
    assert p[0] == pytest.approx(0.010 + h) and p[1] == pytest.approx(0.005 + h)
    assert p[2] == pytest.approx(0.004 + h)               # its duration + the median hand-over (both 0.2 ms)
    assert p[3] == pytest.approx(0.004 + h)
    assert 1.3 - 0.0194 > HANDOVER_MAX_S


def test_request_index_reads_the_clients_index():
    assert request_index("cmpl-bench-69acbaea-17-0-bd0c5392") == 17
    assert request_index("cmpl-somebody-else") is None


def _write_log(path: Path, events, pid=4242):
    path.with_name(f"{path.name}.{pid}").write_text("\n".join(json.dumps(e) for e in events) + "\n{\"step\": [1")


def test_read_step_log_sorts_the_engines_lines_and_skips_a_cut_one(tmp_path):
    _write_log(tmp_path / "steps.jsonl", [
        {"step": [2.0, 2.01, True], "reqs": [["r", 1, 8, 8]]},
        {"add": [0.9, "r", 8]},
        {"step": [1.0, 1.02, True], "reqs": [["r", 8, 0, 8]]}])
    log = read_step_log(tmp_path / "steps.jsonl")
    assert [s.t0_s for s in log.steps] == [1.0, 2.0] and log.adds == ((0.9, "r", 8),)
    assert log.between(1.5, 3.0).steps == log.steps[1:]


def test_a_missing_step_log_names_the_plugin(tmp_path):
    with pytest.raises(RuntimeError, match="step-log plugin"):
        read_step_log(tmp_path / "steps.jsonl")


def _result(starts, ttfts, lens):
    return {"start_times": starts, "ttfts": ttfts, "input_lens": lens, "itls": [[] for _ in starts]}


def test_frontend_delays_time_the_way_in_at_an_idle_engine_and_the_way_out_of_every_request():
    # request 0: sent at 10.000, added at 10.004 to an idle engine, its prefill step 10.004-10.020, the
    # client gets its first token at 10.022: in 4 ms, out 2 ms. Request 1: sent at 10.010, during that step:
    # its wait is the engine's, not the front end's (no in); its one-step prefill ends at 10.030, seen at
    # 10.0315: out 1.5 ms.
    p0, p1 = "cmpl-bench-ab-0-0-x", "cmpl-bench-ab-1-0-y"
    log = StepLog((EngineStep(10.004, 10.020, True, ((p0, 16, 0, 16),)),
                   EngineStep(10.0202, 10.030, True, ((p0, 1, 16, 16), (p1, 8, 0, 8)))),
                  ((10.004, p0, 16), (10.0201, p1, 8)))
    d = frontend_delays(log, _result([10.000, 10.010], [0.022, 0.0215], [16, 8]))
    assert d["in_s"] == pytest.approx([0.004])
    assert d["out_s"] == pytest.approx([0.002, 0.0015])


def test_in_any_times_every_requests_way_in_less_its_wait_for_the_running_step():
    # request 0 finds the engine idle: in_any 4 ms, as in_s. Request 1 is sent at 10.010 during step 1
    # (10.004-10.020) and added at 10.0201, 0.1 ms after its end: its wait for the step (10.010 to 10.020)
    # is the engine's, so its in_any is 10.1 ms - 10 ms = 0.1 ms. Request 2 is sent at 10.040, while the
    # engine is idle, but added only at 10.140, during no step: a front-end stall of 100 ms, in both
    # in_s and in_any_s.
    p0, p1, p2 = "cmpl-bench-ab-0-0-x", "cmpl-bench-ab-1-0-y", "cmpl-bench-ab-2-0-z"
    log = StepLog((EngineStep(10.004, 10.020, True, ((p0, 16, 0, 16),)),
                   EngineStep(10.0202, 10.030, False, ((p0, 1, 16, 16), (p1, 8, 0, 8))),
                   EngineStep(10.1402, 10.150, False, ((p2, 8, 0, 8),))),
                  ((10.004, p0, 16), (10.0201, p1, 8), (10.140, p2, 8)))
    d = frontend_delays(log, _result([10.000, 10.010, 10.040], [0.022, 0.0215, 0.112], [16, 8, 8]))
    assert d["in_s"] == pytest.approx([0.004, 0.100])
    assert d["in_any_s"] == pytest.approx([0.004, 0.0001, 0.100])


def test_frontend_delays_refuse_a_log_of_another_run():
    log = StepLog((EngineStep(1.0, 1.01, True, (("cmpl-bench-ab-0-0-x", 16, 0, 16),)),), ((1.0, "cmpl-bench-ab-0-0-x", 16),))
    with pytest.raises(RuntimeError, match="different runs"):
        frontend_delays(log, _result([0.99], [0.02], [32]))


# -- the plugin, loaded against stand-ins with vLLM's names ------------------------------------------------------
def _load_plugin(monkeypatch, tmp_path):
    class Req:
        def __init__(self, rid, prompt):
            self.request_id, self.num_prompt_tokens, self.num_computed_tokens = rid, prompt, 0

    class Out:
        def __init__(self, n):
            self.num_scheduled_tokens = n

    class Scheduler:                               # vLLM's: advances num_computed_tokens as it schedules
        def __init__(self):
            self.requests, self.waiting = {}, []

        def schedule(self, *a):
            n = {}
            for rid, r in self.requests.items():
                take = min(64, r.num_prompt_tokens - r.num_computed_tokens) or 1
                r.num_computed_tokens += take
                n[rid] = take
            return Out(n)

        def has_requests(self):
            return bool(self.requests)

    class EngineCore:
        def __init__(self):
            self.scheduler = Scheduler()

        def add_request(self, request, wave=0):
            self.scheduler.requests[request.request_id] = request

        def step(self):
            self.scheduler.schedule()
            return {}, True

    mods = {"vllm": types.ModuleType("vllm"), "vllm.v1": types.ModuleType("vllm.v1"),
            "vllm.v1.core": types.ModuleType("vllm.v1.core"), "vllm.v1.core.sched": types.ModuleType("vllm.v1.core.sched"),
            "vllm.v1.core.sched.scheduler": types.ModuleType("vllm.v1.core.sched.scheduler"),
            "vllm.v1.engine": types.ModuleType("vllm.v1.engine"), "vllm.v1.engine.core": types.ModuleType("vllm.v1.engine.core")}
    mods["vllm.v1.core.sched.scheduler"].Scheduler = Scheduler
    mods["vllm.v1.engine.core"].EngineCore = EngineCore
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("steplog_under_test", ROOT / "benchmarks" / "vllm_steplog.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin, EngineCore, Req


def _three_logged_steps(monkeypatch, tmp_path):
    """The plugin on, one 100-token request, three steps (a chunk of 64, a chunk of 36 that ends the
    prompt, a decode); the log it wrote."""
    plugin, EngineCore, Req = _load_plugin(monkeypatch, tmp_path)
    monkeypatch.setenv(plugin.ENV_VAR, str(tmp_path / "steps.jsonl"))
    plugin.register()
    core = EngineCore()
    core.add_request(Req("cmpl-bench-ab-0-0-x", 100))
    for _ in range(3):
        core.step()
    plugin._state["file"].close()
    return read_step_log(tmp_path / "steps.jsonl")


def test_the_plugin_logs_each_steps_requests_as_vllm_scheduled_them(monkeypatch, tmp_path):
    log = _three_logged_steps(monkeypatch, tmp_path)
    assert [s.shape for s in log.steps] == [StepShape(0, 0.0, ((64, 0),), 0), StepShape(0, 0.0, ((36, 64),), 1),
                                            StepShape(1, 101.0, (), 1)]
    assert log.adds[0][1:] == ("cmpl-bench-ab-0-0-x", 100)
    assert all(s.t0_s <= s.t1_s for s in log.steps)


def test_the_plugin_times_its_probe_inside_each_step_and_the_log_reads_it(monkeypatch, tmp_path):
    log = _three_logged_steps(monkeypatch, tmp_path)
    assert all(len(s.probe_s) == 1 and 0 < s.probe_s[0] <= s.t1_s - s.t0_s for s in log.steps)
    probe = log.probe_log("python", log.steps[0].t0_s)
    assert probe.times_s[0] == 0.0 and list(probe.times_s[1:]) == [s.t0_s - log.steps[0].t0_s for s in log.steps[1:]]
    assert list(probe.probe_s) == [s.probe_s[0] for s in log.steps]
    with pytest.raises(ValueError, match="probe must be one of python"):
        log.probe_log("torch", 0.0)


def test_a_step_log_without_probes_says_which_plugin_writes_them():
    log = StepLog((EngineStep(1.0, 1.01, True, (("r", 1, 8, 8),)),), ())
    with pytest.raises(RuntimeError, match="version 2"):
        log.probe_log("python", 0.0)


def test_the_plugin_does_nothing_without_its_switch(monkeypatch, tmp_path):
    plugin, EngineCore, Req = _load_plugin(monkeypatch, tmp_path)
    monkeypatch.delenv(plugin.ENV_VAR, raising=False)
    step = EngineCore.step
    plugin.register()
    assert EngineCore.step is step


def test_the_plugin_installs_itself_as_a_vllm_entry_point(monkeypatch, tmp_path):
    import sysconfig
    from importlib.metadata import entry_points
    plugin, _, _ = _load_plugin(monkeypatch, tmp_path)
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"purelib": str(tmp_path)})
    plugin.install()
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [e for e in entry_points(group="vllm.general_plugins") if e.name == plugin.MODULE]
    assert found and found[0].value == f"{plugin.MODULE}:register"
    assert (tmp_path / f"{plugin.MODULE}.py").read_text() == (ROOT / "benchmarks" / "vllm_steplog.py").read_text()


def test_installing_the_plugin_removes_an_earlier_versions_entry_point(monkeypatch, tmp_path):
    import sysconfig
    plugin, _, _ = _load_plugin(monkeypatch, tmp_path)
    old = tmp_path / f"{plugin.MODULE}-1.dist-info"
    old.mkdir()
    (old / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{plugin.MODULE} = {plugin.MODULE}:register\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"purelib": str(tmp_path)})
    plugin.install()
    assert sorted(p.name for p in tmp_path.glob("*.dist-info")) == [f"{plugin.MODULE}-{plugin.VERSION}.dist-info"]


# -- the front end and the spread (serving.study.served) ----------------------------------------------------
class _Steps:
    def __init__(self, prefill_s, decode_s):
        self.prefill_s, self.decode_s = prefill_s, decode_s

    def step_time_s(self, step, t_s):
        return self.prefill_s if step.chunks else self.decode_s


def _setup():
    from inferlab.serving.policies import VllmV1
    from inferlab.study.checks import SimSetup
    from inferlab.core.specs import Precision, get_accelerator, get_model
    return SimSetup(get_model("llama-2-7b"), get_accelerator("h100-sxm"), VllmV1(token_budget=512, max_num_seqs=8),
                    Precision("bf16", "bf16", "bf16"), kv_blocks=1000, block_tokens=16, watermark=0.0)


def test_the_front_end_adds_its_delays_to_ttft_and_leaves_the_gaps():
    # one request, a 20 ms prefill then 5 ms decodes: engine TTFT 20 ms, client TTFT 4 + 20 + 2 = 26 ms
    w = Workload(np.array([0.5]), np.array([100]), np.array([4]))
    res = Frontend(0.004, 0.002).simulate(_setup(), w, _Steps(0.020, 0.005))
    assert res.arrival_s[0] == 0.5
    assert res.ttft_s[0] == pytest.approx(0.026)
    assert np.allclose(res.itls_s[0], 0.005)
    assert res.finish_s[0] == pytest.approx(0.5 + 0.026 + 3 * 0.005)


@pytest.mark.parametrize("kwargs, match", [({"in_s": -0.001}, "in_s"), ({"out_s": float("nan")}, "out_s"),
                                           ({"in_s": 11.0}, r"in_s must be a number of seconds in \[0, 10\]")])
def test_bad_front_end_delays_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Frontend(**kwargs)


def test_jittered_steps_draw_the_measured_ratios_reproducibly():
    base = _Steps(0.020, 0.005)
    decode = StepShape(1, 10.0, (), 1)
    always_double = JitteredStepTime(base, np.full(10, 2.0))
    assert always_double.step_time_s(decode, 0.0) == pytest.approx(0.010)
    ratios = np.array([0.5] * 5 + [3.0] * 5)
    a = [JitteredStepTime(base, ratios, seed=7).step_time_s(decode, 0.0) for _ in range(1)]
    draws = JitteredStepTime(base, ratios, seed=7)
    again = JitteredStepTime(base, ratios, seed=7)
    xs = [draws.step_time_s(decode, 0.0) for _ in range(50)]
    assert xs == [again.step_time_s(decode, 0.0) for _ in range(50)]
    assert set(np.round(xs, 6)) == {0.0025, 0.015} and a[0] in (0.0025, 0.015)


@pytest.mark.parametrize("ratios, match", [(np.ones(5), "at least 10"), (np.r_[np.ones(10), 0.0], "positive"),
                                           (np.r_[np.ones(10), np.nan], "finite")])
def test_bad_ratios_are_refused(ratios, match):
    with pytest.raises(ValueError, match=match):
        JitteredStepTime(_Steps(0.02, 0.005), ratios)


def test_spread_ratios_are_measured_over_fitted():
    steps = [StepShape(1, 10.0, (), 1), StepShape(0, 0.0, ((8, 0),), 1)]
    assert spread_ratios(_Steps(0.020, 0.005), steps, [0.010, 0.030]) == pytest.approx([2.0, 1.5])


def test_mean_summary_averages_each_percentile_over_the_replicas():
    w = Workload(np.array([0.0, 0.05, 0.1]), np.array([100, 50, 80]), np.array([6, 4, 5]))
    setup, base, fe = _setup(), _Steps(0.020, 0.005), Frontend(0.004, 0.002)
    ratios = np.array([0.8] * 5 + [1.6] * 5)
    out = mean_summary(setup, w, base, ratios, fe, replicas=4)
    singles = [fe.simulate(setup, w, JitteredStepTime(base, ratios, seed)).summary(setup.slo) for seed in range(4)]
    for m in ("ttft_s", "itl_s"):
        for p in ("p50", "p99"):
            values = [s[m][p] for s in singles]
            assert out[m][p] == pytest.approx(np.mean(values))
            assert out["replica_spread"][m][p] == pytest.approx([min(values), max(values)])
    assert out["replicas"] == 4
    assert len({s["itl_s"]["p99"] for s in singles}) > 1      # the draws differ: the mean is not one replica's


def test_a_sampled_front_end_draws_each_requests_delays_from_the_samples_reproducibly():
    fe = SampledFrontend([0.004] * 9 + [0.300], [0.002] * 10)
    ins, outs = fe.delays(200, seed=3)
    again = fe.delays(200, seed=3)
    assert np.array_equal(ins, again[0]) and np.array_equal(outs, again[1])
    assert set(ins) == {0.004, 0.300} and set(outs) == {0.002}
    assert 0.03 < np.mean(ins == 0.300) < 0.2                     # about one draw in ten is the stall
    assert not np.array_equal(ins, fe.delays(200, seed=4)[0])
    # through the simulator: one request, 20 ms prefill, 5 ms decodes; its TTFT = its in + 20 ms + its out
    w = Workload(np.array([0.5, 2.0]), np.array([100, 100]), np.array([4, 4]))
    res = fe.simulate(_setup(), w, _Steps(0.020, 0.005), seed=3)
    d_in, d_out = fe.delays(2, seed=3)
    assert res.ttft_s == pytest.approx(d_in + 0.020 + d_out)
    assert np.allclose(res.itls_s[0], 0.005) and res.arrival_s[1] == 2.0


@pytest.mark.parametrize("ins, match", [([0.004] * 9, "at least 10"), ([0.004] * 9 + [-0.001], r"in \[0, 10\]"),
                                        ([0.004] * 9 + [float("nan")], "in_samples_s")])
def test_bad_front_end_samples_are_refused_by_name(ins, match):
    with pytest.raises(ValueError, match=match):
        SampledFrontend(ins, [0.002] * 10)


def test_mean_summary_redraws_a_sampled_front_end_per_replica():
    w = Workload(np.linspace(0.0, 1.0, 12), np.full(12, 64), np.full(12, 4))
    setup, base = _setup(), _Steps(0.020, 0.005)
    fe = SampledFrontend([0.004] * 9 + [0.300], [0.002] * 10)
    out = mean_summary(setup, w, base, np.ones(10), fe, replicas=6)
    singles = [fe.simulate(setup, w, base, seed).summary(setup.slo)["ttft_s"]["p99"] for seed in range(6)]
    assert out["ttft_s"]["p99"] == pytest.approx(np.mean(singles))
    assert len(set(np.round(singles, 6))) > 1                  # stalls drawn differently in each replica


def test_the_benchmark_client_runs_with_its_heap_frozen(tmp_path):
    # CLIENT against stand-in vllm modules whose main() reports the gc freeze count: frozen before main
    import subprocess
    from inferlab.study.engines.vllm import CLIENT
    pkg = tmp_path / "vllm"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "benchmarks").mkdir()
    for d in (pkg, pkg / "utils", pkg / "benchmarks"):
        (d / "__init__.py").write_text("")
    (pkg / "utils" / "argparse_utils.py").write_text("import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n")
    (pkg / "benchmarks" / "serve.py").write_text(
        "import gc\ndef add_cli_args(p):\n    p.add_argument('--x')\n"
        "def main(args):\n    print('frozen', gc.get_freeze_count() > 0, args.x)\n")
    out = subprocess.run([sys.executable, "-c", CLIENT, "--x", "7"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path)}, timeout=60)
    assert out.stdout.strip() == "frozen True 7", out.stderr


_RENICE_CHILD = """
import importlib.util, os, sys, types
sched, core = types.ModuleType("s"), types.ModuleType("c")
class Scheduler:
    def schedule(self):
        return None
class EngineCore:
    def step(self):
        return None
    def add_request(self, request):
        return None
sched.Scheduler, core.EngineCore = Scheduler, EngineCore
for name in ("vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched", "vllm.v1.engine"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["vllm.v1.core.sched.scheduler"], sys.modules["vllm.v1.engine.core"] = sched, core
spec = importlib.util.spec_from_file_location("plugin", sys.argv[1])
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
before = os.getpriority(os.PRIO_PROCESS, 0)
plugin.register()
EngineCore().step()
print(before, os.getpriority(os.PRIO_PROCESS, 0))
"""


@pytest.mark.parametrize("nice", ["7", None])
def test_the_plugin_renices_the_engine_core_at_its_first_step(tmp_path, nice):
    # in a child process (a niceness cannot be taken back): NICE_VAR's niceness is set at the first step
    import os
    import subprocess
    env = {"INFERLAB_VLLM_STEPLOG": str(tmp_path / "steps.jsonl")}
    if nice is not None:
        env["INFERLAB_VLLM_ENGINE_NICE"] = nice
    out = subprocess.run([sys.executable, "-c", _RENICE_CHILD, str(ROOT / "benchmarks" / "vllm_steplog.py")],
                         capture_output=True, text=True, env=env, timeout=60)
    before, after = (int(x) for x in out.stdout.split())
    assert before == os.getpriority(os.PRIO_PROCESS, 0), out.stderr
    if nice is None:
        assert after == before
    else:   # raising a niceness is always allowed; lowering one (a child of a niced run) only to root
        assert after == 7 if before <= 7 else after in (before, 7)


def test_the_validation_renices_vllms_engine_core_by_default_and_checks_the_niceness():
    from inferlab.study.engines.vllm import ENGINE_NICE, ENGINE_NICE_ENV, VllmSettings
    assert VllmSettings().env()[ENGINE_NICE_ENV] == str(ENGINE_NICE)
    assert ENGINE_NICE_ENV not in VllmSettings(engine_nice=None).env()
    assert VllmSettings().to_dict()["engine_nice"] == ENGINE_NICE           # recorded with the settings
    for bad in (-1, 20, 2.5, True):
        with pytest.raises(ValueError, match=r"engine_nice must be None \(not reniced\) or a niceness in \[0, 19\]"):
            VllmSettings(engine_nice=bad)


def test_the_longest_wait_counts_only_gaps_between_steps_sharing_a_request():
    # steps 1-2 share "a" (it was decoding): a 30 ms gap with work in hand; steps 2-3 share nothing (a
    # finished, b new): their 500 ms gap is the engine waiting for a request, not a stall
    log = StepLog((EngineStep(0.000, 0.004, True, (("a", 8, 0, 8),)),
                   EngineStep(0.034, 0.038, True, (("a", 1, 8, 8),)),
                   EngineStep(0.538, 0.542, True, (("b", 8, 0, 8),))), ())
    assert log.longest_wait_s() == pytest.approx(0.030)
    assert StepLog(log.steps[1:], ()).longest_wait_s() == 0.0


def test_run_waits_read_the_engines_wait_and_the_front_ends_longest_ways():
    from inferlab.study.validate import run_waits
    p0, p1 = "cmpl-bench-ab-0-0-x", "cmpl-bench-ab-1-0-y"
    log = StepLog((EngineStep(10.004, 10.020, True, ((p0, 16, 0, 16),)),
                   EngineStep(10.080, 10.090, False, ((p0, 1, 16, 16),)),
                   EngineStep(10.2, 10.21, False, ((p1, 8, 0, 8),))),
                  ((10.004, p0, 16), (10.2, p1, 8)))
    w = run_waits(log, _result([10.000, 10.100], [0.022, 0.1105], [16, 8]))
    assert w == pytest.approx({"engine_wait_max_s": 0.060, "in_max_s": 0.100, "out_max_s": 0.002})
