"""The efficiency and step-overhead options of `inferlab estimate` and `inferlab serve` (issue 50):
--efficiency {ideal,measured}, --step-overhead-ms, --step-overhead vidur-a100, estimate --context and --json.
Sizes are typed out from the architecture (Llama-2 13B: d 5120, 40 layers, 40 KV heads of 128, f 13824,
vocabulary 32000); times are the library's own functions on the deployment the options describe."""
import json

import pytest

from inferlab.core import kernels
from inferlab.cli import main
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import get_accelerator, get_model

M, BOOK, G = get_model("llama-2-13b"), get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
MEASURED = Deployment(G, efficiency=MeasuredKernels())
d, L, f, V = 5120, 40, 13824, 32000
PARAMS = L * (4 * d * d + 3 * d * f + 2 * d) + 2 * V * d + d  # 13,015,864,320
KV_TOKEN = 2 * L * 40 * 128 * 2  # K and V, 40 heads of 128, bf16: 819,200 bytes


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's own refusal (a choice it does not know): one line, status 2
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_issue_example_prints_one_json_object(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b", "--gpu", "h100-sxm", "--efficiency", "measured",
                       "--json", "--prompt", "2048", "--batch", "1", "--context", "1024")
    assert code == 0
    r = json.loads(out)
    assert (r["model"], r["accelerator"], r["tp"]) == ("llama-2-13b", "h100-sxm", 1)
    assert r["efficiency"] == {"name": "measured", "label": "measured kernels (Vidur's published h100-sxm profiles; "
                                                            "attention on the ideal roofline)"}
    assert r["step_overhead"] is None and r["step_overhead_s"] is None
    assert r["params_total"] == r["params_active"] == PARAMS == 13_015_864_320
    assert r["weights_bytes"] == 2 * PARAMS
    assert r["kv_cache_bytes_per_sequence"] == KV_TOKEN * 2048  # the cache holds the 2048-token prompt
    assert r["max_batch"] == (80e9 - 2 * PARAMS) // (KV_TOKEN * 2048) == 32 and r["fits"] is True
    # TTFT: one 2048-token prompt; ITL: one sequence at context 1024 (--context), both on the measured kernels
    assert r["ttft_s"] == pytest.approx(prefill_time_s(M, MEASURED, 2048), rel=1e-12)
    assert r["itl_s"] == pytest.approx(decode_step_time_s(M, MEASURED, 1024), rel=1e-12)
    assert r["itl_s"] != pytest.approx(decode_step_time_s(M, MEASURED, 2048), rel=1e-6)
    assert r["throughput_tokens_per_s"] == pytest.approx(1 / r["itl_s"], rel=1e-12)
    assert r["ttft_s"] > prefill_time_s(M, G, 2048)  # slower than the ideal roofline


def test_json_ttft_is_one_prompt_and_the_batch_pass_is_beside_it(capsys):
    code, out, _ = run(capsys, "estimate", "--json", "--batch", "4", "--prompt", "512")
    assert code == 0
    r = json.loads(out)
    assert r["efficiency"]["name"] == "ideal" and r["context"] == 512
    assert r["ttft_s"] == pytest.approx(prefill_time_s(BOOK, G, 512), rel=1e-12)
    assert r["prefill_batch_s"] == pytest.approx(prefill_time_s(BOOK, G, 512, 4), rel=1e-12)
    assert r["itl_s"] == pytest.approx(decode_step_time_s(BOOK, G, 512, 4), rel=1e-12)


@pytest.mark.parametrize("argv, words", [
    ([], "efficiency: ideal roofline (MFU = MBU = 1); step overhead: none"),
    (["--mfu", "0.6", "--mbu", "0.8"], "efficiency: fixed MFU 0.6, MBU 0.8; step overhead: none"),
    (["--efficiency", "measured", "--step-overhead-ms", "1.5"],
     "efficiency: measured kernels (Vidur's published h100-sxm profiles; attention on the ideal roofline); "
     "step overhead: 1.5 ms per step (given)"),
])
def test_the_header_says_which_efficiency_and_overhead(capsys, argv, words):
    code, out, _ = run(capsys, "estimate", *argv)
    assert code == 0
    assert words in out.splitlines()[0]


def test_a_given_step_overhead_adds_to_every_pass(capsys):
    _, plain, _ = run(capsys, "estimate", "--json", "--batch", "8")
    _, busy, _ = run(capsys, "estimate", "--json", "--batch", "8", "--step-overhead-ms", "2")
    plain, busy = json.loads(plain), json.loads(busy)
    assert busy["step_overhead_s"] == 0.002
    assert busy["itl_s"] == pytest.approx(plain["itl_s"] + 0.002, rel=1e-12)
    assert busy["ttft_s"] == pytest.approx(plain["ttft_s"] + 0.002, rel=1e-12)


def test_the_vidur_profile_is_the_models_own_entry_or_says_what_stands_in(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-7b", "--step-overhead", "vidur-a100")
    assert code == 0
    own = kernels.StepOverhead.from_profile("llama-2-7b", 1)
    assert f"step overhead: {own.label}" in out and "standing in" not in out
    # Llama-2 70B is profiled at TP 4 only: the nearest entry to TP 8, named as such
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--tp", "8", "--json",
                       "--step-overhead", "vidur-a100", "--batch", "16")
    assert code == 0
    r = json.loads(out)
    p70 = kernels.StepOverhead.from_profile("llama-2-70b", 4)
    assert r["step_overhead"] == p70.label + ", standing in for llama-2-70b at TP 8"
    assert r["step_overhead_s"] == pytest.approx(p70.fixed_s + 16 * p70.per_sequence_s, rel=1e-12)
    # a model the profile lacks: Llama-2 7B at TP 1 stands in
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b", "--step-overhead", "vidur-a100", "--tp", "2")
    assert code == 0 and "llama-2-7b at TP 1" in out and "standing in for llama-2-13b at TP 2" in out


@pytest.mark.parametrize("argv, words", [
    (["estimate", "--gpu", "l4", "--efficiency", "measured"], ["--efficiency measured", "--gpu", "'l4'",
                                                               "h100-sxm, a100-80gb", "h200"]),
    (["estimate", "--efficiency", "measured", "--mfu", "0.5"], ["--efficiency measured", "--mfu 0.5", "must stay 1"]),
    (["estimate", "--efficiency", "measured", "--weights-dtype", "int8"], ["--weights-dtype", "bf16, fp16", "int8"]),
    # FP8 compute on a GPU without FP8 tensor cores, measured or ideal; FP8 weights alone (weight-only) measured
    (["estimate", "--gpu", "a100-80gb", "--efficiency", "measured", "--weights-dtype", "fp8", "--activations-dtype",
      "fp8"], ["--activations-dtype fp8", "a100-80gb", "no FP8"]),
    (["serve", "--gpu", "a100-80gb", "--weights-dtype", "fp8", "--activations-dtype", "fp8"],
     ["--activations-dtype fp8", "a100-80gb", "no FP8"]),
    (["estimate", "--efficiency", "measured", "--weights-dtype", "fp8"], ["--weights-dtype", "FP8 W8A8",
                                                                          "activations bf16"]),
    (["estimate", "--engine-overhead", "trt-llm"], ["--engine-overhead", "'trt-llm'", "python-scheduler"]),
    (["serve", "--engine-overhead", "cpp"], ["--engine-overhead", "'cpp'", "python-scheduler"]),
    (["estimate", "--engine-overhead", "python-scheduler", "--step-overhead-ms", "1"],
     ["--step-overhead-ms 1", "--engine-overhead python-scheduler"]),
    (["estimate", "--attention", "published"], ["--attention published", "--efficiency measured"]),
    # the simulator times attention on the ideal roofline: the option would be ignored, so it is refused
    (["serve", "--attention", "published", "--efficiency", "measured"], ["--attention published", "inferlab estimate"]),
    (["estimate", "--attention", "published", "--efficiency", "measured", "--gpu", "a100-80gb"],
     ["--attention published", "a100-80gb", "Hopper"]),
    (["estimate", "--efficiency", "measured", "--allreduce-latency-us", "0"], ["--allreduce-latency-us", "leave it out"]),
    (["estimate", "--efficiency", "fast"], ["--efficiency", "'fast'", "ideal", "measured"]),
    (["estimate", "--step-overhead-ms", "1", "--step-overhead", "vidur-a100"], ["--step-overhead-ms",
                                                                                "--step-overhead", "one engine time"]),
    (["estimate", "--step-overhead-ms", "-1"], ["--step-overhead-ms", "-1", ">= 0"]),
    (["estimate", "--step-overhead-ms", "nan"], ["--step-overhead-ms", "nan"]),
    (["estimate", "--step-overhead", "vidur-h100"], ["--step-overhead", "vidur-h100", "vidur-a100"]),
    (["estimate", "--context", "0"], ["--context", "0", ">= 1"]),
    (["estimate", "--context", "5000"], ["5000", "4096", "--beyond-context"]),
    (["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--tp", "16", "--efficiency", "measured"],
     ["tp=16", "all_reduce of 16 GPUs"]),
    (["serve", "--gpu", "l4", "--efficiency", "measured"], ["--efficiency measured", "'l4'"]),
    (["serve", "--efficiency", "measured", "--mbu", "0.9"], ["--mbu 0.9", "must stay 1"]),
    (["serve", "--live", "--step-overhead-ms", "1"], ["--step-overhead-ms", "simulator only"]),
])
def test_bad_efficiency_options_are_one_line_and_exit_2(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    err = err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_serve_runs_on_the_measured_kernels_with_a_step_overhead(capsys):
    # 0.2 requests/s of 256 + 4 tokens, constant gaps: each request alone, so TTFT is one prefill pass and
    # each ITL one decode step, both with their 1 ms of CPU time
    on = Deployment(G, efficiency=MeasuredKernels(), step_overhead=kernels.StepOverhead.constant(1e-3))
    assert main(["serve", "--model", "llama-2-13b", "--rate", "0.2", "--duration", "20", "--cv", "0", "--prompt", "256",
                 "--output", "4", "--efficiency", "measured", "--step-overhead-ms", "1", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["ttft_s"]["p50"] == pytest.approx(prefill_time_s(M, on, 256), rel=1e-9)
    assert s["itl_s"]["p50"] == pytest.approx(decode_step_time_s(M, on, 258), rel=1e-9)
    assert main(["serve", "--rate", "1", "--duration", "5", "--efficiency", "measured"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert ("; efficiency: measured kernels (Vidur's published h100-sxm profiles; attention on the "
            "ideal roofline); step overhead: none; KV pool in 0.9 × 80.0 GB = 72.0 GB") in header


def test_fp8_w8a8_and_the_h200_run_measured_and_say_so(capsys):
    # FP8 W8A8 on an H100 SXM: the header names the FP8 table, the decode step is the library's own on that
    # deployment, and it is faster than the 16-bit one (half the weight bytes).
    from inferlab.core.specs import Precision
    fp8 = Deployment(G, Precision(weights="fp8", activations="fp8", kv="fp8"), efficiency=MeasuredKernels())
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b", "--efficiency", "measured", "--weights-dtype", "fp8",
                       "--activations-dtype", "fp8", "--kv-dtype", "fp8", "--json")
    e = json.loads(out)
    assert code == 0 and "DeepGEMM" in e["efficiency"]["label"]
    assert e["itl_s"] == pytest.approx(decode_step_time_s(M, fp8, 1024), rel=1e-9)
    assert e["itl_s"] < 0.75 * decode_step_time_s(M, MEASURED, 1024)
    code, out, _ = run(capsys, "serve", "--gpu", "h200", "--efficiency", "measured", "--weights-dtype", "fp8",
                       "--activations-dtype", "fp8", "--rate", "1", "--duration", "5")
    assert code == 0 and "h200 carried from h100-sxm" in out.splitlines()[0] and "DeepGEMM" in out.splitlines()[0]


def test_engine_overhead_is_named_in_the_scenario_line_and_added(capsys):
    # --engine-overhead python-scheduler is Vidur's A100 scheduler profile (the model's own entry, else Llama-2 7B):
    # the same step time as --step-overhead vidur-a100, named as the engine time in the header.
    code, out, _ = run(capsys, "estimate", "--efficiency", "measured", "--engine-overhead", "python-scheduler", "--json")
    named = json.loads(out)
    code2, out2, _ = run(capsys, "estimate", "--efficiency", "measured", "--step-overhead", "vidur-a100", "--json")
    profile = json.loads(out2)
    assert code == code2 == 0 and named["itl_s"] == pytest.approx(profile["itl_s"], rel=1e-12)
    assert named["step_overhead"].startswith("engine time python-scheduler, Vidur's A100 scheduler profile")
    code, out, _ = run(capsys, "serve", "--rate", "1", "--duration", "5", "--engine-overhead", "python-scheduler")
    assert code == 0 and "step overhead: engine time python-scheduler" in out.splitlines()[0]
    code, out, _ = run(capsys, "serve", "--rate", "1", "--duration", "5")
    assert code == 0 and "; step overhead: none; " in out.splitlines()[0]
