"""`inferlab serve` and `inferlab serving compare` (with a fixture in vLLM's result schema)."""
import json

import numpy as np
import pytest

from inferlab.cli import main
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.serving import ChunkedPrefill, Workload, simulate
from inferlab.serving.compare import compare, parse_vllm_result, read_vllm_result, workload_of
from inferlab.core.specs import get_accelerator, get_model

M, G = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")


def test_serve_prints_percentiles_of_a_light_load(capsys):
    # 0.2 requests/s of 256 + 4 tokens, constant gaps: each alone, TTFT = prefill, ITL = decode step
    assert main(["serve", "--rate", "0.2", "--duration", "20", "--cv", "0", "--prompt", "256",
                 "--output", "4", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 3  # arrivals every 1/0.2 = 5 s, before 20 s: at 5, 10 and 15 s
    assert s["ttft_s"]["p50"] == pytest.approx(prefill_time_s(M, G, 256), rel=1e-9)
    # ITLs at contexts 257, 258, 259 (three per request): the median is the middle one
    assert s["itl_s"]["p50"] == pytest.approx(decode_step_time_s(M, G, 258), rel=1e-9)
    assert s["queue_s"]["p99"] == 0.0


def test_serve_text_output(capsys, tmp_path):
    assert main(["serve", "--rate", "5", "--duration", "5", "--policy", "static", "--batch-size", "4",
                 "--timeout-ms", "100", "--timeseries", str(tmp_path / "ts.csv")]) == 0
    out = capsys.readouterr().out
    rows = (tmp_path / "ts.csv").read_text().splitlines()
    assert rows[0] == "replica,start_s,step_s,batch,tokens,kv_blocks_used,kv_blocks_total" and len(rows) > 10
    assert "simulated (not served)" in out
    for word in ("TTFT", "ITL", "TPOT", "E2E", "queueing", "goodput"):
        assert word in out


@pytest.mark.parametrize("argv, words", [
    (["serve", "--rate", "0"], ["--rate", "0", "> 0"]),
    (["serve", "--policy", "fifo"], ["--policy", "fifo", "continuous"]),
    (["serve", "--router", "random"], ["--router", "random", "least-loaded"]),
    (["serve", "--tp", "3"], ["tp", "3"]),
    (["serve", "--mfu", "1.5"], ["--mfu", "1.5", "<= 1"]),
    (["serve", "--policy", "chunked", "--token-budget", "64"], ["--token-budget", "64", "--max-num-seqs"]),
    (["serve", "--model", "llama-9"], ["model", "llama-9"]),
    (["serving", "compare", "--vllm-result", "/nonexistent.json"], ["--vllm-result", "no such file"]),
    (["serve", "--disaggregate", "0:3"], ["--disaggregate", "prefill pool", ">= 1", "got 0"]),
    (["serve", "--disaggregate", "1:0"], ["--disaggregate", "decode pool", ">= 1", "got 0"]),
    (["serve", "--disaggregate", "two"], ["--disaggregate", "P:D", "'two'"]),
    (["serve", "--disaggregate", "1:3", "--kv-link-gbps", "0"], ["--kv-link-gbps", "> 0", "got 0.0"]),
    (["serve", "--kv-link-gbps", "100"], ["--kv-link-gbps", "--disaggregate"]),
    (["serve", "--speculative", "0"], ["speculative k", ">= 1", "got 0"]),
    (["serve", "--speculative", "3", "--acceptance", "1"], ["acceptance", ">= 0 and < 1", "got 1.0"]),
    (["serve", "--speculative", "3", "--acceptance", "-0.2"], ["acceptance", ">= 0 and < 1", "got -0.2"]),
    (["serve", "--speculative", "3", "--draft", "llama-9"], ["model", "llama-9"]),
    (["serve", "--priority-mix", "urgent=1"], ["priority", "'urgent'", "high, normal, low"]),
    (["serve", "--priority-mix", "high=0.5"], ["--priority-mix", "sum to 1"]),
])
def test_bad_input_is_one_line_naming_the_parameter(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_serve_disaggregated_one_request_by_hand(capsys):
    # One request (0.1/s with constant gaps for 15 s: it arrives at 10 s). Its TTFT (first token after the
    # cache arrived at the decode pool) is the prefill plus the transfer of 256 tokens x 819,200 bytes
    # (Llama-2 13B BF16: 2 x 40 layers x 5,120 x 2 bytes) over 400 Gbit/s (50e9 bytes/s) + 10 us.
    argv = ["serve", "--rate", "0.1", "--duration", "15", "--cv", "0", "--prompt", "256", "--output", "4",
            "--json", "--kv-link-gbps", "400", "--kv-link-latency-us", "10"]
    assert main(argv + ["--disaggregate", "1:1"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 1
    transfer = 10e-6 + 256 * 2 * 40 * 5120 * 2 / 50e9
    assert s["ttft_s"]["p50"] == pytest.approx(prefill_time_s(M, G, 256) + transfer, rel=1e-9)
    assert s["itl_s"]["p50"] == pytest.approx(decode_step_time_s(M, G, 258), rel=1e-9)
    assert set(s) >= {"ttft_s", "itl_s", "tpot_s", "e2e_s", "queue_s", "slo_attainment", "goodput_requests_per_s"}


def test_serve_speculative_and_priorities_run(capsys):
    assert main(["serve", "--rate", "0.1", "--duration", "15", "--cv", "0", "--prompt", "256", "--output", "11",
                 "--json", "--speculative", "3", "--acceptance", "0.5"]) == 0
    s = json.loads(capsys.readouterr().out)
    # E = 1.875: 10 tokens after the first in ceil(10 / 1.875) = 6 verifications; TPOT = 6 v / 10 < v
    assert s["tpot_s"]["p50"] < s["itl_s"]["p99"]
    assert main(["serve", "--rate", "20", "--duration", "5", "--policy", "priority",
                 "--priority-mix", "high=0.3,low=0.7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["completed"] > 0


# -- vLLM interop -------------------------------------------------------------------------------------
def vllm_fixture(ttft_scale=1.25, itl_scale=0.8):
    """A `vllm bench serve --save-result --save-detailed` result (keys as vLLM writes them) for 12
    requests sent at once (request_rate inf), whose TTFTs are 1.25x and ITLs 0.8x what the simulator
    predicts for the same lengths, plus one failed request."""
    prompts, outputs = [200 + 40 * i for i in range(12)], [5 + 3 * i for i in range(12)]
    sim = simulate(Workload(np.zeros(12), np.array(prompts), np.array(outputs)), M, G,
                   ChunkedPrefill(token_budget=2048))
    return {
        "date": "20260101-000000", "endpoint_type": "vllm", "model_id": "meta-llama/Llama-2-13b-hf",
        "num_prompts": 13, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
        "duration": 3.0, "completed": 12, "total_input_tokens": sum(prompts),
        "total_output_tokens": sum(outputs), "request_throughput": 4.0,
        "output_throughput": 100.0, "total_token_throughput": 1000.0,
        "mean_ttft_ms": 1.0, "median_ttft_ms": 1.0, "std_ttft_ms": 0.0, "p99_ttft_ms": 1.0,
        "input_lens": prompts + [300], "output_lens": outputs + [0],
        "ttfts": [float(x) * ttft_scale for x in sim.ttft_s] + [0.0],
        "itls": [[float(v) * itl_scale for v in x] for x in sim.itls_s] + [[]],
        "generated_texts": [""] * 13, "errors": [""] * 12 + ["Bad Request"],
    }, sim


def test_compare_reads_vllm_schema_and_reports_the_ratios(tmp_path):
    data, sim = vllm_fixture()
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(data))
    run = read_vllm_result(path)
    assert run.n_failed == 1 and len(run.ttft_s) == 12
    assert np.all(workload_of(run).arrival_s == 0.0)
    cmp = compare(run, M, G, ChunkedPrefill(token_budget=2048))
    rows = cmp.rows()
    # the fixture is the simulation with TTFT x 1.25 and ITL x 0.8: sim/vLLM = 0.8 and 1.25
    for k in ("p50", "p90", "p99", "mean"):
        assert rows["TTFT"][k][2] == pytest.approx(1 / 1.25, rel=1e-9)
        assert rows["ITL"][k][2] == pytest.approx(1 / 0.8, rel=1e-9)
        assert rows["TPOT"][k][2] == pytest.approx(1 / 0.8, rel=1e-9)
    fig = cmp.figure(tmp_path / "overlay.png")
    assert fig.stat().st_size > 10_000


def test_compare_cli_table_json_and_figure(tmp_path, capsys):
    data, _ = vllm_fixture()
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(data))
    assert main(["serving", "compare", "--vllm-result", str(path), "--token-budget", "2048",
                 "--figure", str(tmp_path / "f.svg")]) == 0
    out = capsys.readouterr().out
    assert "sim/vLLM" in out and "TTFT" in out and "1 failed" in out
    assert (tmp_path / "f.svg").exists()
    assert main(["serving", "compare", "--vllm-result", str(path), "--token-budget", "2048", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["TTFT"]["p50"]["ratio"] == pytest.approx(0.8, rel=1e-9)


def test_compare_uses_rate_and_burstiness_for_arrivals():
    data, _ = vllm_fixture()
    data["request_rate"], data["burstiness"] = 4.0, 4.0  # gamma shape 4: cv = 1/sqrt(4) = 0.5
    w = workload_of(parse_vllm_result(data))
    assert w.arrival_s[0] > 0 and np.all(np.diff(w.arrival_s) > 0)
    # without per-request fields (no --save-detailed) the error says what to do
    del data["itls"]
    with pytest.raises(ValueError, match="--save-detailed"):
        parse_vllm_result(data)


def test_serve_reads_a_trace(tmp_path, capsys):
    # two requests far apart, unchunked: each alone, TTFT = its own prefill time in one step
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,128,3\n10.0,2048,3\n")
    assert main(["serve", "--trace", str(path), "--policy", "continuous", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 2
    assert s["ttft_s"]["p50"] == pytest.approx((prefill_time_s(M, G, 128) + prefill_time_s(M, G, 2048)) / 2)
    path.write_text("arrival,prompt\n0,1\n")
    assert main(["serve", "--trace", str(path)]) == 2
    assert "arrival_s" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["serve", "--duration", "5", "--timeseries", "/proc/inferlab-ts.csv"],
    ["serve", "--duration", "5", "--timeseries", "/"],
])
def test_an_unwritable_output_is_refused_before_the_simulation(capsys, argv):
    """Nothing is simulated (no summary on stdout) when the output cannot be written: one line, exit 2."""
    from inferlab.cli import main
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--timeseries" in err
