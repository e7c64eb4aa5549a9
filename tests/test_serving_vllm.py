"""The vLLM engine (serving.engines.vllm, validate's engine 'vllm', `serving compare` on a real vLLM
result). Everything here runs without vLLM: the settings, the trace, the parsing, the calibration's
steps, and the server's lifecycle on a stand-in server; the tests that need `make vllm`'s venv skip
with their reason where it is absent. Expected values by hand or from the raw JSON by another route."""
import json
import signal
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from inferlab.study.engines import vllm as V
from inferlab.serving.policies import VllmV1
from inferlab.serving.steptime import StepShape
from inferlab.serving.workload import Workload


class _OneSecond:
    def step_time_s(self, step, t_s):
        return 1.0

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "data" / "measurements" / "serving" / "vllm" / "bench-serve-random-4rps-20.json"


# -- settings and the simulator's side ---------------------------------------------------------------------
def test_settings_map_to_server_flags_and_to_the_simulator_policy():
    s = V.VllmSettings(max_num_seqs=4, max_num_batched_tokens=32, block_size=16, max_model_len=512)
    args = s.server_args()
    flag = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert flag["--max-num-seqs"] == "4" and flag["--max-num-batched-tokens"] == "32"
    assert flag["--block-size"] == "16" and flag["--max-model-len"] == "512"
    assert "--enable-chunked-prefill" in args and "--no-enable-prefix-caching" in args
    assert s.policy() == VllmV1(token_budget=32, max_num_seqs=4, block_size=16, chunked_prefill=True)
    assert s.env() == {"VLLM_CPU_KVCACHE_SPACE": "1", V.ENGINE_NICE_ENV: str(V.ENGINE_NICE)}
    assert s.kv_blocks(262_144) == 262_144 // 16
    off = V.VllmSettings(enable_chunked_prefill=False, max_num_batched_tokens=1024, max_model_len=1024)
    assert "--no-enable-chunked-prefill" in off.server_args() and off.policy().whole_prompts


@pytest.mark.parametrize("kwargs, match", [
    ({"max_num_seqs": 0}, "max_num_seqs"),
    ({"enable_chunked_prefill": False}, "max_num_batched_tokens must be >= max_model_len=1024"),
    ({"max_num_seqs": 128, "max_num_batched_tokens": 64}, "token_budget must be >= max_num_seqs=128"),
    ({"enable_chunked_prefill": "yes"}, "enable_chunked_prefill must be True or False"),
])
def test_bad_settings_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        V.VllmSettings(**kwargs)


def test_model_config_reads_a_saved_llama(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "intermediate_size": 688, "vocab_size": 4096, "tie_word_embeddings": False}))
    m = V.model_config(tmp_path)
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff, m.vocab_size) == (256, 4, 4, 2, 64, 688, 4096)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 256}))
    with pytest.raises(ValueError, match="config.json lacks num_hidden_layers"):
        V.model_config(tmp_path)


def test_kv_pool_is_read_from_the_server_log():
    line = ("(EngineCore pid=9419) INFO 12-03 18:09:30 [kv_cache_utils.py:2327] CPU KV cache size: 262,144 tokens, "
            "Maximum concurrency for 1,024 tokens per request: 256.00x")
    assert V.kv_tokens_from_log("start\n" + line + "\nmore") == 262_144
    assert V.kv_tokens_from_log("no such line") is None


METRICS = """# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny"} %s
vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="tiny"} %s
vllm:iteration_tokens_total_bucket{engine="0",le="64.0",model_name="tiny"} %s
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny"} %s
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} %s
"""


def test_steps_by_tokens_from_two_metrics_snapshots_beside_the_simulated_steps():
    before = V.iteration_tokens(METRICS % (2.0, 5.0, 6.0, 6.0, 6.0))
    after = V.iteration_tokens(METRICS % (12.0, 20.0, 26.0, 26.0, 26.0))
    assert before == {1.0: 2.0, 8.0: 5.0, 64.0: 6.0, float("inf"): 6.0}
    # during the run (cumulative deltas 10, 15, 20, 20): 10 steps of 1 token, 5 of 2-8, 5 of 9-64, none above;
    # simulated steps of 1, 1, 3, 64, 65 tokens: 2, 1, 1, 1
    out = V.steps_by_tokens(before, after, [1, 1, 3, 64, 65])
    assert out == {"le": [1.0, 8.0, 64.0, "inf"], "live": [10, 5, 5, 0], "simulated": [2, 1, 1, 1]}
    assert V.iteration_tokens("no histogram") == {}


def test_timed_trace_holds_the_workload_with_fresh_prompt_blocks():
    w = Workload(np.array([0.0, 0.25, 1.5]), np.array([16, 17, 40]), np.array([4, 1, 9]))
    rows = [json.loads(x) for x in V.trace_lines(w, base_id=100)]
    assert [r["timestamp"] for r in rows] == [0.0, 0.25, 1.5]
    assert [r["input_length"] for r in rows] == [16, 17, 40]
    assert [r["output_length"] for r in rows] == [4, 1, 9]
    # one id per 16 tokens (ceil): 1, 2, 3 ids, numbered on from base_id, none shared
    assert [r["hash_ids"] for r in rows] == [[100], [101, 102], [103, 104, 105]]


def test_check_served_names_the_first_difference():
    w = Workload(np.zeros(2), np.array([10, 20]), np.array([3, 4]))
    V.check_served({"input_lens": [10, 20], "output_lens": [3, 4], "errors": ["", ""]}, w, "run")
    with pytest.raises(RuntimeError, match="output_lens differ from the workload's at request 1"):
        V.check_served({"input_lens": [10, 20], "output_lens": [3, 2], "errors": ["", ""]}, w, "run")
    with pytest.raises(RuntimeError, match="1 of 2 requests failed in vLLM \\(Bad Request\\)"):
        V.check_served({"input_lens": [10, 20], "output_lens": [3, 4], "errors": ["", "Bad Request"]}, w, "run")


# -- a real result of vLLM's benchmark client against this server ----------------------------------------------
def real():
    return json.loads(REAL.read_text())


def test_a_real_vllm_result_becomes_a_simresult_with_its_own_percentiles():
    data = real()
    r = V.result_of(data, "real")
    start = np.array(data["start_times"])
    np.testing.assert_allclose(r.arrival_s, start - start.min())
    np.testing.assert_allclose(r.ttft_s, data["ttfts"])
    s = r.summary()
    # the percentiles from the raw lists, by numpy directly (the definitions vLLM's client uses too)
    assert s["ttft_s"]["p50"] == pytest.approx(np.percentile(data["ttfts"], 50))
    gaps = [g for x in data["itls"] for g in x]
    assert s["itl_s"]["p99"] == pytest.approx(np.percentile(gaps, 99))
    assert s["ttft_s"]["p50"] * 1e3 == pytest.approx(data["median_ttft_ms"], rel=1e-9)
    assert s["itl_s"]["p50"] * 1e3 == pytest.approx(data["median_itl_ms"], rel=1e-9)


def test_serving_compare_simulates_a_real_result_at_its_own_arrivals(capsys):
    from inferlab.cli import main
    from inferlab.serving.compare import parse_vllm_result, workload_of
    data = real()
    run = parse_vllm_result(data)
    w = workload_of(run, seed=123)  # the seed draws nothing: the file has the send times
    start = np.array(data["start_times"])
    np.testing.assert_allclose(w.arrival_s, start - start.min())
    assert w.prompt_tokens.tolist() == data["input_lens"] and w.output_tokens.tolist() == data["output_lens"]
    assert main(["serving", "compare", "--vllm-result", str(REAL), "--model", "llama-2-7b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["TTFT"]["p50"]["vllm_s"] == pytest.approx(np.percentile(data["ttfts"], 50))
    assert rows["TTFT"]["p50"]["sim_s"] > 0 and rows["ITL"]["p99"]["sim_s"] > 0
    assert main(["serving", "compare", "--vllm-result", str(REAL), "--seed", "3"]) == 2
    assert "start_times" in capsys.readouterr().err


# -- the calibration ------------------------------------------------------------------------------------------
def test_calibration_workload_and_its_steps_by_hand():
    from inferlab.study import validate as v
    s = V.VllmSettings(max_num_seqs=2, max_num_batched_tokens=16)
    w, groups = v.vllm_calibration_workload(s)
    lone = [n for n in v.VLLM_CAL_LONE if n <= 16]                      # 8 and 16 tokens
    bursts = [b for b in v.VLLM_CAL_BURSTS if b <= 2 and b * v.VLLM_CAL_BURST_PROMPT <= 16]  # 1 and 2
    assert lone == [8, 16] and bursts == [1, 2]
    n_lone = len(lone) * v.VLLM_CAL_REPEATS
    assert len(w) == n_lone + sum(bursts) * v.VLLM_CAL_BURST_REPEATS
    assert w.output_tokens[:n_lone].tolist() == [1] * n_lone
    # a stand-in result: a lone prompt of L tokens: TTFT 10 ms x L / 8 (8 tokens 10 ms, 16 tokens 20 ms);
    # a burst's member m (0, 1, ...) of a burst of b: its last token (2 b + m) ms x (N - 1) after the lone
    # TTFT of its b P-token prefill, its gaps uneven (every other one 0, tokens delivered in bunches)
    from inferlab.serving.metrics import ReplicaTrace, SimResult
    out, p = v.VLLM_CAL_BURST_OUTPUT, v.VLLM_CAL_BURST_PROMPT
    member, ttft, itls = {}, [], []
    for g in groups:
        if g[0] == "lone":
            ttft.append(0.01 * g[1] / 8)
            itls.append(np.zeros(0))
            continue
        m = member[g[2]] = member.get(g[2], -1) + 1
        ttft.append(0.01 * g[1] * p / 8 + 0.004)  # a slower first token: moved into the gaps' sum below
        gaps = np.zeros(out - 1)
        gaps[::2] = ((2 * g[1] + m) * 1e-3 * (out - 1) - 0.004) / len(gaps[::2])
        itls.append(gaps)
    n, ttft = len(w), np.array(ttft)
    finish = w.arrival_s + ttft + np.array([x.sum() for x in itls])
    res = SimResult(w.arrival_s, w.prompt_tokens, w.output_tokens, np.full(n, np.nan), w.arrival_s + ttft,
                    finish, np.zeros(n, int), np.zeros(n, int), itls, (ReplicaTrace(*(np.zeros(0),) * 5, 1),))
    steps, dur = v.vllm_calibration_steps(res, groups)
    assert steps[0] == StepShape(0, 0.0, ((8, 0),), 1) and dur[0] == pytest.approx(0.01)
    assert steps[1] == StepShape(0, 0.0, ((16, 0),), 1) and dur[1] == pytest.approx(0.02)
    dec = [(s_, d) for s_, d in zip(steps, dur) if s_.decode_seqs > 0]
    assert len(dec) == len(bursts) * v.VLLM_CAL_BURST_REPEATS  # one mean step per burst
    # burst of 2 prompts of P: N - 1 decode steps reading P + 1 .. P + N - 1 keys each: mean P + N / 2;
    # its members' last tokens 4 and 5 ms x (N - 1) after the 16-token lone TTFT: median 4.5 ms per step.
    # Alone (b = 1): 2 ms per step.
    assert [x for x in dec if x[0].decode_seqs == 2][0][0] == StepShape(2, 2 * (p + out / 2), (), 2)
    assert [x for x in dec if x[0].decode_seqs == 2][0][1] == pytest.approx(4.5e-3)
    assert [x for x in dec if x[0].decode_seqs == 1][0][1] == pytest.approx(2e-3)


# -- the server's lifecycle, on a stand-in server (no vLLM needed) --------------------------------------------
FAKE = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    print("CPU KV cache size: 4,096 tokens", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


class FakeServer(V.VllmServer):
    def __init__(self, script, *a, settings=V.VllmSettings(), **k):
        super().__init__(sys.executable, "unused", settings, *a, **k)
        self.script = script

    def command(self):
        return [sys.executable, str(self.script), str(self.port)]


def gone(pid):
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_server_is_health_checked_and_stopped_on_exit_and_on_error(tmp_path):
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    with FakeServer(script, tmp_path / "s.log", log=None) as srv:
        assert srv.healthy() and srv.proc.poll() is None
        assert V.kv_tokens_from_log(srv.log_text()) == 4096
        pid = srv.proc.pid
    assert srv.proc.poll() is not None and gone(pid) and not srv.healthy()
    with pytest.raises(KeyboardInterrupt):
        with FakeServer(script, tmp_path / "s2.log", log=None) as srv2:
            pid = srv2.proc.pid
            raise KeyboardInterrupt  # Ctrl-C inside the run
    assert srv2.proc.poll() is not None and gone(pid)
    assert signal.getsignal(signal.SIGTERM) is not V._raise_exit  # the handler is given back


def test_a_server_that_dies_at_start_up_is_reported_with_its_log(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('no such model', flush=True)\nsys.exit(3)\n")
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"exited with status 3 during start-up(.|\n)*no such model"):
        with FakeServer(script, tmp_path / "d.log", log=None):
            pass
    assert time.perf_counter() - t0 < 60


def test_validate_without_make_vllm_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    from inferlab.cli import main
    with pytest.raises(RuntimeError, match="run `make vllm`"):
        V.require_vllm(tmp_path)
    assert V.venv_python(tmp_path) is None
    monkeypatch.setattr(V, "ROOT", tmp_path)  # a checkout without .venv-vllm
    assert main(["serving", "validate", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "run `make vllm`" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, match", [
    (["--model", "tiny"], "leave out --model"),
    (["--device", "cuda"], "cpu only"),
    (["--duration", "10"], "leave out --duration"),
    (["--repeat-disturbed", "-1"], "--repeat-disturbed must be an integer >= 0 and <= 5"),
    (["--repeat-disturbed", "6"], "--repeat-disturbed must be an integer >= 0 and <= 5"),
    (["--engine", "inferlab", "--repeat-disturbed", "1"], "applies to --engine vllm only"),
])
def test_validate_cli_refuses_what_vllm_does_not_take(argv, match, capsys):
    from inferlab.cli import main
    rc = main(["serving", "validate", "--engine", "vllm", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1


# -- with `make vllm`'s venv ------------------------------------------------------------------------------------
needs_vllm = pytest.mark.skipif(V.venv_python(ROOT) is None or not (ROOT / V.MODEL_DIR / "config.json").exists(),
                                reason="needs .venv-vllm and build/vllm-model: run `make vllm`")


@needs_vllm
def test_the_installed_vllm_is_the_pinned_one_and_the_model_is_the_scripts():
    py, model = V.require_vllm(ROOT)
    assert V.installed_version(py) == V.VLLM_VERSION
    m = V.model_config(model)
    meta = json.loads((model / "inferlab.json").read_text())
    assert (m.d_model, m.n_layers, m.d_ff, m.vocab_size) == (meta["hidden_size"], meta["num_hidden_layers"],
                                                             meta["intermediate_size"], meta["vocab_size"])
    tok = json.loads((model / "tokenizer.json").read_text())
    assert len(tok["model"]["vocab"]) + len(tok.get("added_tokens", [])) >= m.vocab_size - 2


live_vllm = pytest.mark.skipif(V.venv_python(ROOT) is None or not (ROOT / V.MODEL_DIR / "config.json").exists()
                               or __import__("os").environ.get("INFERLAB_VLLM_LIVE") != "1",
                               reason="starts vLLM's server (2-3 minutes on 2 cores): needs `make vllm` and "
                                      "INFERLAB_VLLM_LIVE=1")


@live_vllm
def test_the_real_server_serves_a_timed_trace_exactly_and_is_stopped(tmp_path):
    py, model = V.require_vllm(ROOT)
    w = Workload(np.array([0.0, 0.2, 0.4]), np.array([20, 70, 5]), np.array([3, 1, 6]))
    with V.VllmServer(py, model, V.VllmSettings(), tmp_path / "server.log", log=None) as srv:
        assert V.kv_tokens_from_log(srv.log_text()) > 0
        data = V.bench_serve(py, srv, model, w, tmp_path, "three")
        pid = srv.proc.pid
    V.check_served(data, w, "three")  # every request, with the trace's prompt and output lengths
    r = V.result_of(data, "three")
    assert r.completed.all() and r.output_tokens.tolist() == [3, 1, 6]
    assert gone(pid) and not srv.healthy()


# -- the recorded development run ---------------------------------------------------------------------------------
DEV = ROOT / "data" / "measurements" / "serving" / "vllm" / "development"


@pytest.mark.parametrize("name", ["vllm-tiny-dev.json", "vllm-tiny-dev-2.json"])
def test_the_development_record_is_in_the_validation_schema_with_vllms_settings(name):
    from inferlab.study import validate as v
    rec = json.loads((DEV / name).read_text())
    assert rec["schema"] == "inferlab.serving.validate/1" and v.record_engine(rec) == "vllm"
    assert rec["summary"]["engine_version"] == V.VLLM_VERSION == rec["versions"]["vllm"]
    assert rec["config"]["vllm"]["max_num_batched_tokens"] == 64 and rec["config"]["vllm"]["preemption_mode"] == "recompute"
    assert rec["config"]["kv_blocks"] == V.VllmSettings().kv_blocks(V.kv_tokens_from_log(
        "CPU KV cache size: 116,480 tokens"))  # the pool the record's server logged
    for run, row in zip(rec["runs"], rec["summary"]["rates"]):
        # each error again from the run's own live and simulated percentiles
        for m, short in (("ttft_s", "ttft"), ("itl_s", "itl")):
            for p in ("p50", "p99"):
                assert row[f"{short}_{p}_error"] == pytest.approx(run["simulated"][m][p] / run["live"][m][p] - 1)
        # the live percentiles again from the vLLM result the run keeps
        res = run["vllm_result"]
        assert run["live"]["ttft_s"]["p50"] == pytest.approx(np.percentile(res["ttfts"], 50))
        assert run["live"]["itl_s"]["p99"] == pytest.approx(np.percentile([g for x in res["itls"] for g in x], 99))
    within = all(abs(r[f"{k}_error"]) <= rec["bounds"][k[-3:]] for r in rec["summary"]["rates"] if r["bounded"]
                 for k in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99"))
    assert rec["within_bounds"] == within
    s = v.engines_summary([rec])["vllm"]
    assert s["repeats"] == 1 and s["fractions"][0.3]["error"]["itl_p99"] == [rec["runs"][0]["comparison"]["itl_s"]["p99"]["error"]]


def test_emitted_tokens_count_as_vllms_histogram_does_by_hand():
    from inferlab.serving.simulate import simulate
    from inferlab.measure.plan import TINY_MODEL
    from inferlab.core.specs import get_accelerator
    # A (10, 3) and B (5, 2) at 0, budget 8 (tests/test_serving_vllm_policy.py, first test): step 1 A's first 8
    # (nothing emitted: 0); step 2 A's last 2 and B's 5, both first tokens: 10 + 1 + 5 + 1 = 17; step 3 both
    # decode: 2; step 4 A decodes: 1
    ab = Workload(np.zeros(2), np.array([10, 5]), np.array([3, 2]))
    r = simulate(ab, TINY_MODEL, get_accelerator("h100-sxm"), VllmV1(token_budget=8, max_num_seqs=4),
                 kv_blocks=64, block_tokens=16, watermark=0.0, step_time=_OneSecond())
    assert V.emitted_tokens(r).tolist() == [0, 17, 2, 1]


def _record(created, runs, bounds=None):
    return {"created": created, "summary": {"engine": "vllm"}, "bounds": bounds or {"p50": 0.15, "p99": 0.25},
            "runs": runs}


def _run(errors, bounded=True, live_s=0.01, steps=None, bunched=0.0):
    keys = (("ttft_s", "p50"), ("ttft_s", "p99"), ("itl_s", "p50"), ("itl_s", "p99"))
    cmp = {m: {} for m, _ in keys}
    for (m, p), e in zip(keys, errors):
        cmp[m][p] = {"error": e, "live_s": live_s}
    cmp["within_bounds"] = all(abs(e) <= (0.15 if p == "p50" else 0.25) for (_, p), e in zip(keys, errors))
    return {"rate_per_s": 2.0, "load": "light", "bounded": bounded, "comparison": cmp,
            "bunched_fraction": bunched, "steps_by_tokens": steps}


def test_the_vllm_runs_table_marks_and_counts_the_bounds_by_hand():
    rec = _record("2026-12-04T00:00:00", [
        _run([0.10, -0.20, -0.16, 0.30], steps={"live": [3, 4], "simulated": [5, 6]}),  # TTFT ok; ITL p50 and p99 out
        _run([0.05, 0.05, 0.05, 0.05], bunched=0.25),                                   # all within
        _run([0.50, 0.50, 0.50, 0.50], bounded=False)])                                 # overloaded: never bold
    lines = V.runs_markdown([rec]).splitlines()
    assert lines[2] == "| 1 | light | 2.00 | +10% | \u221220% | **\u221216%** | **+30%** | 0% | 7 / 11 |"
    assert lines[3] == "| 1 | light | 2.00 | +5% | +5% | +5% | +5% | 25% | n/a |"
    assert lines[4] == "| 1 | light (not bounded) | 2.00 | +50% | +50% | +50% | +50% | 0% | n/a |"
    assert lines[-1] == ("Bounded (run, rate) pairs within all four bounds: 1 of 2. Within each bound: "
                         "TTFT p50 2 of 2, TTFT p99 2 of 2, ITL p50 1 of 2, ITL p99 1 of 2.")


def test_the_vllm_runs_table_reads_a_live_percentile_shorter_than_any_step_as_zero_and_refuses_other_engines():
    lines = V.runs_markdown([_record("t", [_run([0.0, 0.0, 1153.0, 0.0], live_s=1e-5)])]).splitlines()
    assert "**(live \u2248 0)**" in lines[2] and "+115300%" not in lines[2]
    with pytest.raises(ValueError, match="not a vLLM validation"):
        V.runs_markdown([{"summary": {"engine": "transformers"}, "runs": []}])
    with pytest.raises(ValueError, match="at least one"):
        V.runs_markdown([])


def test_the_engines_root_is_the_repository_the_cli_looks_in():
    # `serving validate --engine vllm` looks for .venv-vllm/ and build/vllm-model/ under V.ROOT
    assert V.ROOT == ROOT and (V.ROOT / "pyproject.toml").is_file()


def _steplog_record(runs):
    rec = _record("2026-12-05T00:00:00", runs)
    rec["profile"] = {"kind": "vllm-steplog-fitted"}
    rec["summary"]["frontend"] = {"in_s": 0.004, "out_s": 0.0015}
    return rec


def _pieces_run(judged, deterministic, engine_only, bounded=True):
    run = _run(judged, bounded=bounded)
    run["deterministic"] = _run(deterministic)["comparison"]
    run["engine_only"] = _run(engine_only)["comparison"]
    run["engine_steps"] = {"live": 300, "simulated": 310}
    run["step_time_error"] = {"median_ratio": 1.0 + judged[0]}
    return run


def test_the_pieces_table_and_the_conclusion_count_each_prediction_by_hand():
    rec = _steplog_record([
        _pieces_run([0.05, 0.10, 0.08, -0.12], [0.02, -0.05, 0.03, -0.30], [-0.20, -0.10, 0.03, -0.30]),
        _pieces_run([-0.18, 0.20, 0.10, 0.10], [-0.10, 0.10, 0.05, -0.20], [-0.25, 0.0, 0.05, -0.20]),
        _pieces_run([0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9], bounded=False)])
    lines = V.pieces_markdown([rec]).splitlines()
    assert len(lines) == 2 + 2 * 3 + 2                                   # the unbounded rate is left out
    assert lines[2] == "| 1 | light | judged: fit, spreads, front end | +5% | +10% | +8% | \u221212% |"
    assert lines[3] == "| 1 | light | without the spreads | +2% | \u22125% | +3% | **\u221230%** |"
    assert lines[5] == "| 1 | light | judged: fit, spreads, front end | **\u221218%** | +20% | +10% | +10% |"
    assert lines[-1] == ("Bounded (run, rate) pairs within all four bounds: judged: fit, spreads, front end 1 of 2; "
                         "without the spreads 1 of 2; without the front end either 0 of 2.")
    text = V.steplog_conclusion([rec])
    assert "1 of 2 bounded (run, rate) pairs had all four errors within" in text
    assert "largest p50 error was -18% (TTFT, run 1, light" in text
    assert "largest p99 error was +20% (TTFT" in text
    assert "4.0 to 4.0 ms on the way in and 1.5 to 1.5 ms on the way out" in text
    # the bounded runs' fit ratios are 1.05 and 0.82 (set from their TTFT p50 errors above): up to 18 %
    assert "ranged from 0.82 to 1.05" in text and "up to 18% faster or slower" in text
    assert "Of the 0 bounded runs" not in text           # no ITL p50 missed its bound (8 % and 10 %)
    rec["runs"][1]["comparison"]["itl_s"]["p50"]["error"] = -0.30  # a miss, short, with the fit 18 % short too
    assert "Of the 1 bounded runs whose ITL p50 missed its bound, 1 had the fit off" in V.steplog_conclusion([rec])
    rec["runs"][1]["comparison"]["itl_s"]["p50"]["error"] = +0.30  # a miss the other way: not the fit's direction
    assert "Of the 1 bounded runs whose ITL p50 missed its bound, 0 had the fit off" in V.steplog_conclusion([rec])
    # without the front end either: TTFT p50 errors -20 % and -25 %: median -22 %
    assert "Without the front end either, 0 of 2 pairs were within all bounds, with median errors TTFT p50 -22%" in text
    with pytest.raises(ValueError, match="step log"):
        V.pieces_markdown([_record("t", [])])


def test_the_pieces_table_adds_the_front_ends_medians_where_a_run_has_them_and_counts_only_those():
    # run 1 keeps the prediction with the front end at its medians (+3 % +30 % ...: its TTFT p99 out of bound),
    # run 2 was made before it: that variant is counted over 1 pair, the others over 2
    first = _pieces_run([0.05, 0.10, 0.08, -0.12], [0.02, -0.05, 0.03, -0.10], [-0.20, -0.10, 0.03, -0.10])
    first["frontend_medians"] = _run([0.03, 0.30, 0.08, -0.12])["comparison"]
    rec = _steplog_record([first, _pieces_run([0.01] * 4, [0.01] * 4, [0.01] * 4)])
    rec["summary"]["frontend"] |= {"in_p99_s": 0.012, "out_p99_s": 0.0042}
    lines = V.pieces_markdown([rec]).splitlines()
    assert lines[3] == "| 1 | light | front end at its medians | +3% | **+30%** | +8% | \u221212% |"
    assert len(lines) == 2 + 4 + 3 + 2
    assert lines[-1] == ("Bounded (run, rate) pairs within all four bounds: judged: fit, spreads, front end 2 of 2; "
                         "front end at its medians 0 of 1; without the spreads 2 of 2; without the front end either 1 of 2.")
    text = V.steplog_conclusion([rec])
    assert "Front end at its medians, 0 of 1 pairs were within all bounds" in text
    assert "Their p99 over the calibrations' requests: 12 to 12 ms in, 4 to 4 ms out" in text


def test_disturbances_name_an_engine_wait_a_slow_way_and_a_slow_start_by_hand():
    from inferlab.study.fitted import FEATURES, FittedStepTime
    from inferlab.study.validate import step_log
    fit = FittedStepTime([0.004] + [0.0] * (len(FEATURES) - 1))            # every step 4 ms
    dec = StepShape(1, 20.0, (), 1)
    quiet = {"waits": {"engine_wait_max_s": 0.049, "in_max_s": 0.01, "out_max_s": 0.002},
             "step_log": step_log([dec] * 20, [0.004] * 20)}
    assert V.disturbances(quiet, fit) == []
    loud = {"waits": {"engine_wait_max_s": 0.364, "in_max_s": 0.091, "out_max_s": 0.0499},
            "step_log": step_log([dec] * 20, [0.008] * 14 + [0.004] * 6)}      # first 15: median 2.0x
    assert V.disturbances(loud, fit) == ["the engine waited 364 ms between two steps with work in hand",
                                         "a request's way in took 91 ms", "its first 15 steps took 2.0 times the fit's time"]
    # in the conclusion: a miss disturbed, a run within its bounds quiet; records without waits say nothing
    from inferlab.study.fitted import FittedStepTime as F
    rec = _steplog_record([_pieces_run([0.40, 0.0, 0.0, 0.0], [0.0] * 4, [0.0] * 4),
                           _pieces_run([0.01] * 4, [0.0] * 4, [0.0] * 4)])
    rec["profile"] = {"kind": "vllm-steplog-fitted", **F.to_dict(fit)}
    for run, extra in zip(rec["runs"], (loud, quiet)):
        run.update(extra)
    text = V.steplog_conclusion([rec])
    assert ("Of the 1 bounded runs that missed a bound, 1 were disturbed (run 1, light: the engine waited 364 ms "
            "between two steps with work in hand, and a request's way in took 91 ms, and its first 15 steps took "
            "2.0 times the fit's time).") in text
    assert "Of the 1 bounded runs within their bounds, 0 were disturbed so" in text
    for run in rec["runs"]:
        del run["waits"]
    assert "disturbed" not in V.steplog_conclusion([rec])


def test_the_conclusion_says_when_the_engines_speed_held():
    rec = _steplog_record([_pieces_run([0.04, 0.0, 0.0, 0.0], [0.0] * 4, [0.0] * 4)])   # fit ratio 1.04
    assert "up to 4% faster or slower than the fit of its calibrations, a few minutes away, too little" in \
        V.steplog_conclusion([rec])


def test_the_probe_timeline_reads_each_parts_median_probe_against_the_whole_by_hand():
    from inferlab.study.fitted import FEATURES, FittedStepTime
    from inferlab.study.validate import step_log
    fit = FittedStepTime([0.004] + [0.0] * (len(FEATURES) - 1))
    dec = StepShape(1, 20.0, (), 1)
    probe = lambda *xs: {"probe": "python", "t_s": [0.01 * i for i in range(len(xs))], "probe_s": list(xs)}
    rec = {"profile": {"kind": "vllm-steplog-fitted", **fit.to_dict()},
           "calibrations": [{"step_log": step_log([dec] * 3, [0.004] * 3), "part_steps": [2, 1],
                             "step_probe": probe(10e-6, 10e-6, 20e-6)}],
           "runs": [{"rate_per_s": 3.0, "load": "light", "step_log": step_log([dec] * 2, [0.004] * 2),
                     "step_probe": probe(5e-6, 5e-6)}]}
    # all five probes: median 10 us; parts: 10, 20 and 5 us
    assert V.probe_timeline(rec) == pytest.approx([1.0, 0.5, 2.0])
    assert V.speed_markdown([rec]).splitlines()[3] == "| 1, probe | 1.00 | 0.50 | 2.00 |"
    rec["runs"][0]["step_probe"] = None                                       # a run logged before the probe
    assert V.probe_timeline(rec) is None and len(V.speed_markdown([rec]).splitlines()) == 3


def test_the_runs_table_counts_steps_from_the_step_log_when_the_record_has_it():
    rec = _steplog_record([_pieces_run([0.0] * 4, [0.0] * 4, [0.0] * 4)])
    assert V.runs_markdown([rec]).splitlines()[2].endswith("| 300 / 310 |")


@pytest.mark.parametrize("series, sampled", [("steplog-2026-12-05", False), ("reniced-2026-12-05", True),
                                             ("repeat-rule-2026-12-05", True), ("pinned-2026-12-05", True)])
def test_vllm_repredict_remakes_every_recorded_step_log_prediction_from_the_record_alone(series, sampled):
    """The step-log repeats (docs/vllm.md): the fit over their calibrations' logged steps, the steps' spread
    and the front end (its medians in the first series, its sampled delays in the reniced one), re-made
    from what each record keeps, give its recorded errors."""
    import json as _json

    from inferlab.study import validate as v
    records = [_json.loads(p.read_text()) for p in sorted((V.RECORDS / series).glob("*.json"))]
    assert len(records) == 3
    assert all(bool(r["summary"]["frontend"].get("sampled")) == sampled for r in records)
    for rec in records:
        again = v.vllm_repredict(rec)
        assert len(again) == len(rec["runs"]) > 0
        for got, run in zip(again, rec["runs"]):
            for m in ("ttft_s", "itl_s"):
                for p in ("p50", "p99"):
                    assert got["comparison"][m][p]["error"] == pytest.approx(run["comparison"][m][p]["error"], abs=1e-12)
    with pytest.raises(ValueError, match="step log"):
        v.vllm_repredict({"summary": {"engine": "vllm"}, "profile": {"kind": "vllm-fitted"}})


def test_the_speed_timeline_reads_each_parts_decodes_against_the_fit_by_hand():
    from inferlab.study.fitted import FEATURES, FittedStepTime
    from inferlab.study.validate import step_log
    fit = FittedStepTime([0.004] + [0.0] * (len(FEATURES) - 1))            # every step 4 ms
    dec, chunk = StepShape(2, 40.0, (), 2), StepShape(1, 20.0, ((16, 0),), 1)
    cal0 = step_log([dec, dec, dec, chunk], [0.004, 0.004, 0.002, 0.050])  # timed: 1.0, 1.0; Poisson: 2.0 (chunk ignored)
    cal1 = step_log([dec], [0.008])                                        # 0.5
    run = step_log([dec, dec, dec], [0.005, 0.005, 0.004])                 # median of 0.8, 0.8, 1.0
    rec = {"profile": {"kind": "vllm-steplog-fitted", **fit.to_dict()},
           "calibrations": [{"step_log": cal0, "part_steps": [2, 2]}, {"step_log": cal1, "part_steps": [1]}],
           "runs": [{"rate_per_s": 3.0, "load": "light", "step_log": run}]}
    t = V.speed_timeline(rec)
    assert [(label, round(r, 6), n) for label, r, n in t] == [
        ("calibration 0, timed requests", 1.0, 2), ("calibration 0, Poisson run 1", 2.0, 1),
        ("rate 3.00/s (light)", 0.8, 3), ("calibration 1, timed requests", 0.5, 1)]
    assert V.speed_markdown([rec]).splitlines()[2] == "| 1 | 1.00 | 2.00 | 0.80 | 0.50 |"
    assert "| light |" in V.speed_markdown([rec]).splitlines()[0]
    with pytest.raises(ValueError, match="step logs"):
        V.speed_timeline({"profile": {"kind": "vllm-fitted"}, "runs": []})


# -- the repeat rule (validate.VLLM_REPEAT_DISTURBED) ------------------------------------------------------------
class _FakeLog:
    """A step log's part: 20 decode steps of 4 ms, or 8 ms for the first 15 (a slow start)."""

    def __init__(self, slow_start):
        self.slow_start = slow_start

    def shapes(self):
        return [StepShape(1, 20.0, (), 1)] * 20

    def periods_s(self):
        return np.array([0.008 if (self.slow_start and i < 15) else 0.004 for i in range(20)])


def test_the_repeat_rule_serves_a_disturbed_rate_again_keeps_it_and_judges_the_first_quiet_run(monkeypatch):
    from inferlab.study.engines import vllm_validate as val   # the pipeline whose steps are replaced
    from inferlab.study.fitted import FEATURES, FittedStepTime
    fit = FittedStepTime([0.004] + [0.0] * (len(FEATURES) - 1))   # every step 4 ms
    # what each served run measured, by its label: rate 0 stalls on the way out once, then is quiet; rate 1
    # starts slow every time; rate 2 is quiet (a 49 ms engine wait is under the 50 ms of the rule)
    quiet = {"engine_wait_max_s": 0.049, "in_max_s": 0.01, "out_max_s": 0.002}
    waits = {"rate-0": {**quiet, "out_max_s": 0.198}, "rate-0-again-1": quiet,
             "rate-1": quiet, "rate-1-again-1": quiet, "rate-1-again-2": quiet, "rate-2": quiet}
    served = []

    def bench_serve(python, server, model_dir, w, work, label, base_id):
        served.append((label, base_id, len(w)))
        return {"label": label}

    monkeypatch.setattr(V, "bench_serve", bench_serve)
    monkeypatch.setattr(V, "check_served", lambda data, w, label: None)
    monkeypatch.setattr(val, "_logged", lambda steplog, data: _FakeLog(data["label"].startswith("rate-1")))
    monkeypatch.setattr(val, "run_waits", lambda logged, data: waits[data["label"]])
    ctx = val._VllmRun(None, None, None, None, Path("."), Path("steps.jsonl"),
                       v=val.VllmValidation(requests_per_rate=4, repeat_disturbed=2))
    lines = []
    lives = val._vllm_serve_rates(ctx, [1.0, 2.0, 3.0], ["light", "moderate", "near saturation"], fit, lines.append)
    assert [x[0] for x in served] == ["rate-0", "rate-0-again-1", "rate-1", "rate-1-again-1", "rate-1-again-2", "rate-2"]
    assert len({x[1] for x in served}) == 6 and {x[2] for x in served} == {4}   # fresh request ids, the same workload
    assert [x[3]["label"] for x in lives] == ["rate-0-again-1", "rate-1-again-2", "rate-2"]   # the judged runs
    assert [x[5]["disturbances"] for x in lives] == [[], ["its first 15 steps took 2.0 times the fit's time"], []]
    assert [[d[0]["label"] for d in x[5]["disturbed"]] for x in lives] == [["rate-0"], ["rate-1", "rate-1-again-1"], []]
    assert lives[0][5]["disturbed"][0][2] == ["a request's way out took 198 ms"]
    assert any("no repeat left: judged as it is" in line for line in lines)
    # with no repeats, each first run is judged as it is
    served.clear()
    ctx.v = val.VllmValidation(requests_per_rate=4, repeat_disturbed=0)
    lives = val._vllm_serve_rates(ctx, [1.0], ["light"], fit, lines.append)
    assert [x[0] for x in served] == ["rate-0"] and lives[0][5] == {
        "disturbances": ["a request's way out took 198 ms"], "disturbed": []}


def test_the_repeats_summary_and_every_runs_bounds_count_the_disturbed_runs_by_hand():
    from inferlab.study import validate as val
    inside, outside = _run([0.05, 0.10, 0.08, -0.12]), _run([0.05, 0.40, 0.08, -0.12])
    judged = [dict(inside, disturbed_attempts=[{"comparison": outside["comparison"]}], disturbances=[]),
              dict(inside, disturbed_attempts=[], disturbances=["a request's way in took 91 ms"]),
              dict(outside, bounded=False, disturbed_attempts=[{"comparison": None}], disturbances=[])]
    assert val.repeats_summary(judged, 2) == {"max_repeats": 2, "rates_served_again": 2, "disturbed_runs_kept": 2,
                                              "judged_disturbed": 1}
    assert not val.within_bounds_every_run(judged)              # run 1's disturbed run missed TTFT p99
    judged[0]["disturbed_attempts"] = [{"comparison": inside["comparison"]}]
    assert val.within_bounds_every_run(judged)                  # the unbounded run's unusable one does not count
    judged[1]["disturbed_attempts"] = [{"comparison": None}]
    assert not val.within_bounds_every_run(judged)              # a bounded disturbed run with a live 0 does


def test_the_runs_table_and_the_conclusion_show_the_disturbed_runs_the_repeat_rule_kept_by_hand():
    quiet = {"engine_wait_max_s": 0.002, "in_max_s": 0.005, "out_max_s": 0.002}
    served_again = _pieces_run([0.05, 0.10, 0.08, -0.12], [0.0] * 4, [0.0] * 4)
    served_again.update(waits=quiet, disturbances=[], disturbed_attempts=[
        {"disturbances": ["a request's way out took 198 ms"], "comparison": _run([-0.29, -0.82, 0.07, -0.22])["comparison"]},
        {"disturbances": ["its first 15 steps took 2.2 times the fit's time"],
         "comparison": _run([0.01, -0.10, 0.04, -0.20])["comparison"]}])
    first_time = _pieces_run([0.01] * 4, [0.0] * 4, [0.0] * 4)
    first_time.update(waits=quiet, disturbances=[], disturbed_attempts=[])
    rec = _steplog_record([served_again, first_time])
    lines = V.runs_markdown([rec]).splitlines()
    assert lines[2].startswith("| 1 | light, served again after 2 disturbed runs | 2.00 | +5% |")
    assert lines[3].startswith("| 1 | light | 2.00 | +1% |")
    assert lines[-1] == ("Counting the 2 disturbed bounded runs the repeat rule served again and kept, 3 of 4 bounded "
                         "runs were within all four bounds.")
    text = V.steplog_conclusion([rec])
    assert ("Under the repeat rule (a run its own measurements show disturbed is served again and kept), 1 of 2 "
            "bounded rates were served again (run 1, light: a request's way out took 198 ms, and its first 15 steps "
            "took 2.2 times the fit's time); 1 of the 2 disturbed runs kept would have been within all bounds.") in text
    assert "Of the 2 bounded runs within their bounds, 0 were disturbed so" in text


def test_the_disturbed_runs_table_lists_each_kept_run_then_the_judged_one_by_hand():
    run = _run([0.05, 0.10, 0.08, -0.12])
    run.update(disturbances=[], disturbed_attempts=[
        {"disturbances": ["a request's way out took 198 ms"], "comparison": _run([-0.29, -0.82, 0.07, -0.22])["comparison"]},
        {"disturbances": ["its first 15 steps took 2.2 times the fit's time", "a request's way in took 60 ms"],
         "comparison": None}])
    quiet = dict(_run([0.01] * 4), disturbances=[], disturbed_attempts=[])
    lines = V.disturbed_markdown([_record("t", [run, quiet])]).splitlines()
    assert lines[2:] == [
        "| 1 | light | 1 | a request's way out took 198 ms | **\u221229%** | **\u221282%** | +7% | \u221222% |",
        "| 1 | light | 2 | its first 15 steps took 2.2 times the fit's time; a request's way in took 60 ms | n/a | n/a | n/a | n/a |",
        "| 1 | light | 3 | nothing (judged) | +5% | +10% | +8% | \u221212% |"]
    assert V.disturbed_markdown([_record("t", [quiet])]) == ""


# -- the front end kept off the worker's cores (VllmSettings.pin_front) -------------------------------------------
def test_reserved_cpus_are_read_from_the_servers_log():
    assert V.reserved_cpus_from_log("x\n(EngineCore pid=1) INFO [omp.py:185] \treserved_cpus=[1]\n") == {1}
    assert V.reserved_cpus_from_log("reserved_cpus=[0]\n... reserved_cpus=[2, 3]\n") == {2, 3}   # the last line
    assert V.reserved_cpus_from_log("reserved_cpus=[]") is None
    assert V.reserved_cpus_from_log("no such line") is None


PINNED = textwrap.dedent("""
    import http.server, os, subprocess, sys, threading, time
    # a stand-in vLLM server: a worker child named as vLLM names it, bound to cpu 0, with a thread of its own;
    # the server itself with two threads; its log names the reserved cpus (argv[2])
    worker = subprocess.Popen([sys.executable, "-c", "import os, threading, time\\n"
                               "open('/proc/self/comm', 'w').write('VLLM::Worker')\\n"
                               "os.sched_setaffinity(0, {0})\\n"
                               "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\\n"
                               "print(os.getpid(), flush=True)\\ntime.sleep(600)\\n"], stdout=subprocess.PIPE)
    worker_pid = int(worker.stdout.readline())
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    print(f"worker {worker_pid}", flush=True)
    print(f"INFO reserved_cpus=[{sys.argv[2]}]", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _allowed(pid):
    import os
    return {tid: os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_the_front_end_is_pinned_to_the_reserved_cpus_and_the_worker_is_left_alone(tmp_path):
    import os
    script = tmp_path / "pinned.py"
    script.write_text(PINNED)
    front = max(os.sched_getaffinity(0))   # a core this test may use (on 1 core: the worker's own)

    class Pinned(FakeServer):
        def command(self):
            return [sys.executable, str(script), str(self.port), str(front)]

    with Pinned(script, tmp_path / "p0.log", log=None) as srv:   # pin_front off (the default): nothing pinned
        assert srv.front_cpus is None and all(c == os.sched_getaffinity(0) for c in _allowed(srv.proc.pid).values())
    with Pinned(script, tmp_path / "p.log", log=None, settings=V.VllmSettings(pin_front=True)) as srv:
        worker = int(next(line for line in srv.log_text().splitlines() if line.startswith("worker")).split()[1])
        server_threads = _allowed(srv.proc.pid)
        assert len(server_threads) >= 2 and all(c == {front} for c in server_threads.values())
        assert all(c == {0} for c in _allowed(worker).values())    # vLLM's own binding of its worker, untouched
        assert srv.front_cpus == [front]
        assert dict(V.session_processes(srv.proc.pid))[worker] == V.WORKER_COMM
    # a server whose log names no reserved cpus is left as it is
    (tmp_path / "fake.py").write_text(FAKE)
    with FakeServer(tmp_path / "fake.py", tmp_path / "f.log", log=None, settings=V.VllmSettings(pin_front=True)) as srv:
        assert srv.front_cpus is None
    assert not V.VllmSettings().pin_front and V.VllmSettings(pin_front=True).to_dict()["pin_front"] is True
    with pytest.raises(ValueError, match="pin_front must be True or False"):
        V.VllmSettings(pin_front=1)


def test_the_client_runs_on_the_front_ends_cpus_before_its_imports(tmp_path, monkeypatch):
    import os
    import subprocess
    front = max(os.sched_getaffinity(0))
    head = V.CLIENT.split("from vllm")[0]          # what runs before vLLM's client is imported
    code = head + "print(sorted(os.sched_getaffinity(0)))\n"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, V.CLIENT_CPUS_ENV: str(front)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[{front}]"
    # bench_serve hands the server's front cpus to the client, and none where the server pinned nothing
    seen = []

    def run(cmd, **kw):
        seen.append(kw["env"].get(V.CLIENT_CPUS_ENV))
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(V.subprocess, "run", run)
    monkeypatch.setenv(V.CLIENT_CPUS_ENV, "7")      # a stale value from the caller's environment is not passed on
    w = Workload(np.array([0.0]), np.array([8]), np.array([2]))
    for cpus in ([1], None):
        srv = type("S", (), {"port": 1, "front_cpus": cpus})()
        with pytest.raises(RuntimeError, match="client failed"):
            V.bench_serve("python", srv, "model", w, tmp_path, "x")
    assert seen == ["1", None]


@pytest.mark.parametrize("options, match", [
    ({"engine": "inferlab", "repeat_disturbed": 1}, "repeat_disturbed applies to engine 'vllm' only"),
    ({"engine": "vllm", "repeat_disturbed": -1}, "repeat_disturbed must be an integer >= 0 and <= 5"),
])
def test_validate_refuses_a_repeat_count_it_cannot_use_before_anything_runs(options, match):
    from inferlab.study import validate as val
    with pytest.raises(ValueError, match=match):
        val.validate(log=None, **options)


def test_the_figures_typed_into_the_vllm_pages_prose_follow_from_the_records():
    """docs/vllm.md's prose about the 2026-12-05 series quotes figures outside its generated tables;
    each is recomputed here from the records, so a changed record fails this test."""
    import json as _json
    page = (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8")
    load = lambda series: sorted((_json.loads(p.read_text()) for p in (V.RECORDS / series).glob("*.json")),
                                 key=lambda r: r["created"])
    rule, pinned, dev = load("repeat-rule-2026-12-05"), load("pinned-2026-12-05"), load("development-pinned-2026-12-05")

    def rates_speed(records):   # the rates' columns of speed_timeline
        return [r for rec in records for label, r, _ in V.speed_timeline(rec) if label.startswith("rate")]

    def span(xs, fmt):
        return f"{min(xs):{fmt}} to {max(xs):{fmt}}"

    assert f"ran at {span(rates_speed(dev), '.2f')} times the fit's speed" in page
    assert f"they ran at {span(rates_speed(rule), '.2f')}" in page
    assert f"own decode steps ranged from {span(rates_speed(pinned), '.2f')} of the fit ({span(rates_speed(rule), '.2f')} unpinned)" in page
    missed = [run for rec in rule for run in rec["runs"] if run["bounded"] and not run["comparison"]["within_bounds"]
              and abs(run["comparison"]["itl_s"]["p50"]["error"]) > 0.15]
    ratios = [run["step_time_error"]["median_ratio"] for run in missed]
    assert f"step time was {ratios[0]:.2f} and {ratios[1]:.2f}" in page
    slow = sorted(r for r in rates_speed(rule) if r < 0.9)
    assert f"took {1 / slow[0]:.2f} and {1 / slow[1]:.2f} times the fit's" in page
    way_in = lambda rec: float(np.median([x for c in rec["calibrations"] for x in c["frontend"]["in_any_s"]])) * 1e3
    unpinned = rule + load("poisson-spread-2026-12-05")
    assert (f"median {span([way_in(r) for r in pinned], '.1f')} ms per repeat, from "
            f"{span([way_in(r) for r in unpinned], '.1f')}") in page
    ttft = [100 * run["comparison"]["ttft_s"]["p50"]["error"] for rec in pinned for run in rec["runs"] if run["bounded"]]
    assert f"by {min(ttft):.0f} % to {max(ttft):.0f} %" in page
