"""Issue 22: the serving and classroom commands at their edges. Every bad value is one line naming
the option, its value and the allowed range (exit 2) before any long work; ignored combinations and
empty strings are errors; files are checked field by field; a run that serves nothing is a result;
an interrupted write leaves no partial file."""
import json
import math

import numpy as np
import pytest

from inferlab import cli
from inferlab.serving import Workload, simulate
from inferlab.serving.compare import parse_vllm_result
from inferlab.serving.workload import MAX_REQUESTS, arrival_times_s, load_trace, synthetic
from inferlab.core.specs import get_accelerator, get_model

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_13B = get_model("llama-2-13b")
LLAMA_2_13B_BOOK = get_model("llama-2-13b-book")
LLAMA_2_70B = get_model("llama-2-70b")


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(argv, capsys, *words):
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


# -- options bounded by what the run would allocate or how long it would take -----------------------
@pytest.mark.parametrize("argv, words", [
    # 1e9/s x 60 s = 6e10 requests: the arrays alone would be hundreds of GB
    (["serve", "--rate", "1e9"], ["--rate x --duration", "6e+10", "1,000,000"]),
    (["serve", "--duration", "1e12"], ["--rate x --duration", "1e+13", "1,000,000"]),
    # cv^2 underflows (1e-200) or the gamma shape is beyond any meaning (1e-160): 0 says it exactly
    (["serve", "--cv", "1e-200"], ["--cv", "1e-200", ">= 1e-06", "<= 100"]),
    (["serve", "--cv", "1e-160"], ["--cv", "1e-160", ">= 1e-06"]),
    (["serve", "--cv", "1e6"], ["--cv", "1000000.0", "<= 100"]),
    (["serve", "--cv", "nan"], ["--cv", "nan"]),
    # The book's 13B (12,911,006,720 parameters) in bf16 on an H100: 0.9 x 80e9 - 25,822,013,440 bytes of
    # weights = 46,177,986,560 bytes free; 819,200 bytes per token (2 x 40 layers x 5120 x 2 bytes)
    # -> floor(46,177,986,560 / 819,200) = 56,369 tokens in one block at most
    (["serve", "--block-tokens", "1000000000"], ["--block-tokens", "1000000000", "<= 56,369 "]),
    (["estimate", "--reserved-gb", "1e300"], ["--reserved-gb", "1e+300", "<= 80"]),
    (["serve", "--replicas", "3", "--rate", "1", "--duration", "3", "--cv", "0"],
     ["--replicas", "3", "2 requests"]),  # arrivals at 1 and 2 s: two requests, so 3 replicas is one too many
    # between the bound (~56k tokens) and twice it: still one block too large for the free memory
    (["serve", "--block-tokens", "60000"], ["--block-tokens", "60000", "<= 56,369 "]),
    # cv 100 brings (100^2 - 1) / 2 = 4,999.5 requests on top of rate x duration = 996,000: over 1,000,000
    (["serve", "--rate", "1", "--duration", "996000", "--cv", "100"], ["--rate x --duration", "4999.5", "--cv 100"]),
    (["serve", "--prompt", str(2**62)], ["--prompt", "<="]),
    (["serve", "--prompt-dist", "lognormal", "--prompt-cv", "1e300"], ["--prompt-cv", "<= 100"]),
])
def test_an_option_beyond_what_the_run_can_hold_is_refused_by_name(argv, words, capsys):
    one_line_error(argv, capsys, *words)


@pytest.mark.parametrize("argv, words", [
    (["serving", "validate", "--seed", "-1"], ["--seed", "-1", ">= 0"]),
    (["serving", "validate", "--duration", "1e9"], ["--duration", "<= 3600"]),
    # 8 KV slots of 1e11 tokens of cpu-0.5b: far beyond any machine's memory
    (["serving", "validate", "--max-len", "100000000000"], ["GB", "--max-len"]),
])
def test_validate_refuses_bad_options_before_its_minute_of_profiling(argv, words, capsys, monkeypatch):
    from inferlab.study import validate

    def profiled(**kw):
        raise AssertionError("validate() started (the profile) before every option was checked")
    monkeypatch.setattr(validate, "validate", profiled)
    one_line_error(argv, capsys, *words)


@pytest.mark.parametrize("argv, words", [
    (["serve", "--policy", ""], ["--policy", "must not be empty"]),
    (["serve", "--trace", ""], ["--trace", "must not be empty"]),
    (["estimate", "--model", ""], ["--model", "must not be empty"]),
    (["verify", "--registry", ""], ["--registry", "must not be empty"]),
])
def test_an_empty_string_is_not_an_absent_option(argv, words, capsys):
    one_line_error(argv, capsys, *words)


def test_errata_output_empty_does_not_rewrite_the_repositorys_errata(capsys):
    from inferlab.commands.claims import _repo_root
    errata = _repo_root() / "ERRATA.md"

    def state():  # (mtime, bytes), or None where there is no ERRATA.md (a copy of lib/ and data/ only)
        return (errata.stat().st_mtime_ns, errata.read_bytes()) if errata.exists() else None
    before = state()
    one_line_error(["errata", "--output", ""], capsys, "--output", "must not be empty")
    assert state() == before


@pytest.mark.parametrize("argv, words", [
    (["serve", "--batch-size", "4"], ["--batch-size", "static", "chunked"]),
    (["serve", "--policy", "static", "--token-budget", "1024"], ["--token-budget", "chunked", "static"]),
    (["serve", "--policy", "static", "--max-num-seqs", "4"], ["--max-num-seqs", "static"]),
    (["serve", "--policy", "chunked", "--max-batched-tokens", "100"],
     ["--max-batched-tokens", "continuous", "prefill-first", "not chunked"]),
    (["serve", "--timeout-ms", "5"], ["--timeout-ms", "static"]),
    (["serve", "--router", "least-loaded"], ["--router", "--replicas > 1"]),
    (["serve", "--prompt-cv", "0.5"], ["--prompt-cv", "lognormal", "fixed"]),
    (["serve", "--live", "--policy", "prefill-first", "--token-budget", "300"], ["--token-budget", "chunked"]),
    (["serve", "--output-dist", "uniform", "--output-cv", "2"], ["--output-cv", "uniform"]),
    (["verify", "--kind", "statement", "--verdict", "erratum"], ["--verdict", "--kind number"]),
    (["verify", "--statement-verdict", "erratum"], ["--statement-verdict", "--kind statement"]),
])
def test_an_option_the_combination_would_ignore_is_an_error(argv, words, capsys):
    one_line_error(argv, capsys, *words)


@pytest.mark.parametrize("option", [["--rate", "5"], ["--duration", "3"], ["--cv", "0"], ["--prompt", "64"],
                                    ["--output-dist", "lognormal"], ["--seed", "3"]])
def test_synthetic_workload_options_beside_a_trace_are_an_error(option, tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    one_line_error(["serve", "--trace", str(trace), *option], capsys, option[0], "--trace")


# -- files checked field by field ---------------------------------------------------------------------
@pytest.mark.parametrize("body, words", [
    ("arrival_s,prompt_tokens,output_tokens\n0,100\n", ["line 2", "2 fields", "3"]),  # short row
    ("arrival_s,prompt_tokens,output_tokens\n0,100.7,10\n", ["line 2", "prompt_tokens", "100.7"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,50,0\n", ["line 3", "output_tokens", "'0'"]),
    ("arrival_s,prompt_tokens,output_tokens\nnan,100,10\n", ["line 2", "arrival_s", "nan"]),
    ("arrival_s,prompt_tokens,output_tokens\n-1,100,10\n", ["line 2", "arrival_s", ">= 0"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,abc,10\n", ["line 2", "prompt_tokens", "abc"]),
    ("arrival_s,prompt_tokens,output_tokens\n", ["no request rows"]),
    ("", ["header", "an empty file"]),
    ("time,prompt,output\n0,1,1\n", ["header", "arrival_s"]),
])
def test_a_bad_trace_names_the_file_line_and_field(body, words, tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(body)
    one_line_error(["serve", "--trace", str(trace)], capsys, "--trace", "t.csv", *words)


def test_a_binary_trace_is_named_not_a_codec_error(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n\xff\xfe\x00\x81,1,1\n")
    err = one_line_error(["serve", "--trace", str(trace)], capsys, "--trace", "not a UTF-8 text file")
    assert "codec" not in err


def test_a_good_trace_is_read_exactly(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,arrival_s,output_tokens,note\n100,0.5,10,a\n\n200,0.25,1e1,b\n")
    w = load_trace(trace)  # columns by name, blank line skipped, rows sorted by arrival, 1e1 is 10
    assert w.arrival_s.tolist() == [0.25, 0.5]
    assert w.prompt_tokens.tolist() == [200, 100] and w.output_tokens.tolist() == [10, 10]


def vllm_result(**override):
    data = {"input_lens": [100, 200], "output_lens": [3, 2], "ttfts": [0.01, 0.02],
            "itls": [[0.005, 0.006], [0.007]], "errors": ["", ""], "request_rate": "inf", "burstiness": 1.0}
    data.update(override)
    return data


@pytest.mark.parametrize("override, words", [
    ({"ttfts": 5}, ["ttfts", "must be a list", "int"]),
    ({"request_rate": [1]}, ["request_rate", "[1]"]),
    ({"burstiness": [2]}, ["burstiness", "[2]"]),
    ({"burstiness": 1e-9}, ["burstiness", ">= 0.0001"]),  # cv = 1/sqrt(b) = 31623 > 100
    ({"ttfts": ["0.01", 0.02]}, ["ttfts[0]", '"0.01"']),
    ({"input_lens": [100.7, 200]}, ["input_lens[0]", "whole numbers", "100.7"]),
    ({"input_lens": [True, 200]}, ["input_lens[0]", "true"]),
    ({"itls": [[0.005, -1], [0.007]]}, ["itls[0][1]", "-1"]),
    ({"itls": [5, [0.007]]}, ["itls[0]", "must be a list"]),
    ({"errors": [1, ""]}, ["errors", "strings"]),
    ({"output_lens": [3]}, ["output_lens", "2 entries", "got 1"]),
    ({"ttfts": [], "input_lens": [], "output_lens": [], "itls": [], "errors": []}, ["ttfts", "got 0"]),
    ({"max_concurrency": 0.5}, ["max_concurrency", "0.5"]),
])
def test_a_bad_vllm_result_names_the_field(override, words, tmp_path, capsys):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(vllm_result(**override)))
    one_line_error(["serving", "compare", "--vllm-result", str(path)], capsys, "v.json", *words)


def test_a_binary_vllm_result_is_named(tmp_path, capsys):
    path = tmp_path / "v.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    one_line_error(["serving", "compare", "--vllm-result", str(path)], capsys, "v.json", "not a UTF-8 text file")


def test_a_good_vllm_result_keeps_its_values_exactly():
    run = parse_vllm_result(vllm_result(errors=["", "timeout"], burstiness=None, request_rate=2))
    # the second request failed: only the first is kept, with its own numbers
    assert run.prompt_tokens.tolist() == [100] and run.output_tokens.tolist() == [3]
    assert run.ttft_s.tolist() == [0.01] and run.itls_s[0].tolist() == [0.005, 0.006]
    assert run.burstiness == 1.0 and run.request_rate == 2.0 and run.n_failed == 1


def test_compare_refuses_a_figure_format_before_printing_the_table(tmp_path, capsys):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(vllm_result()))
    code, out, err = run(["serving", "compare", "--vllm-result", str(path), "--figure", str(tmp_path / "f.txt")],
                         capsys)
    assert code == 2 and out == "" and "--figure" in err and ".png" in err


def test_compare_refuses_an_slo_it_would_not_use(tmp_path, capsys):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(vllm_result()))
    one_line_error(["serving", "compare", "--vllm-result", str(path), "--slo-ttft-ms", "100"], capsys,
                   "--slo-ttft-ms", "no effect")


def test_classroom_notebooks_with_bad_cells_or_bytes_name_the_file(tmp_path, capsys):
    bad = tmp_path / "cells.ipynb"
    bad.write_text(json.dumps({"cells": {"a": 1}, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    binary = tmp_path / "bin.ipynb"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    out = tmp_path / "out"
    one_line_error(["classroom", "build-student", str(bad), "--out", str(out)], capsys, "cells.ipynb",
                   "'cells' is a list", "dict")
    one_line_error(["classroom", "build-student", str(binary), "--out", str(out)], capsys, "bin.ipynb", "UTF-8")


@pytest.mark.parametrize("option, value", [("--memory-gb", "1e-10"), ("--memory-gb", "0.1"),
                                           ("--max-output-mb", "1e-07"), ("--max-disk-mb", "1e-09")])
def test_grade_limits_that_round_to_no_limit_are_refused(option, value, tmp_path, capsys):
    nb = tmp_path / "s.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    one_line_error(["classroom", "grade", str(nb), "--out", str(tmp_path / "g"), option, value], capsys,
                   option, value)


def test_an_empty_registry_is_an_error_not_an_empty_pass(tmp_path, capsys):
    empty = tmp_path / "claims.toml"
    empty.write_text("# nothing here\n")
    code, out, err = run(["verify", "--registry", str(empty)], capsys)
    assert code == 2 and "no [[claim]] entries" in err
    code, out, err = run(["verify", "--kind", "statement", "--statements", str(empty)], capsys)
    assert code == 2 and "no [[statement]] entries" in err


# -- library bounds ----------------------------------------------------------------------------------
def test_the_library_refuses_the_same_workloads_by_parameter_name():
    with pytest.raises(ValueError, match=r"cv must be a finite number 0 or >= 1e-06 and <= 100; got 1e-160"):
        arrival_times_s(1.0, 5, cv=1e-160)
    with pytest.raises(ValueError, match=r"rate x duration_s = 1e\+09/s x 60 s = 6e\+10 requests"):
        synthetic(1e9, duration_s=60)
    # cv = 100 brings (100^2 - 1) / 2 = 4999.5 extra requests: 1e6 - 4000 + 4999.5 > 1e6
    with pytest.raises(ValueError, match="for cv=100"):
        synthetic(1.0, duration_s=MAX_REQUESTS - 4000, cv=100)
    # the largest cv at the smallest rate still finishes (a few thousand draws)
    assert len(synthetic(1.0, duration_s=10, cv=100, seed=1)) >= 1
    # cv = 0 exactly: one request per 1/rate
    assert synthetic(2.0, duration_s=3, cv=0).arrival_s.tolist() == [0.5, 1.0, 1.5, 2.0, 2.5]


# -- degenerate runs are results ---------------------------------------------------------------------
def test_a_run_where_every_request_is_rejected_is_a_result():
    # 3 requests of 512 + 128 = 640 tokens need 640 / 16 = 40 blocks; the pool has 1
    w = Workload(np.array([0.0, 1.0, 2.0]), np.array([512, 512, 512]), np.array([128, 128, 128]))
    r = simulate(w, LLAMA_2_13B_BOOK, H100_SXM, kv_blocks=1)
    s = r.summary()
    assert (s["completed"], s["rejected"]) == (0, 3)
    assert s["span_s"] == 0.0 and s["throughput_requests_per_s"] == 0.0 and s["goodput_requests_per_s"] == 0.0
    assert s["ttft_s"] is None and s["batch"] == {"max": 0, "mean": 0.0}
    assert s["kv_use"] == {"peak_fraction": 0.0, "mean_fraction": 0.0} and s["slo_attainment"] == 0.0
    assert "NaN" not in json.dumps(s) and "Infinity" not in json.dumps(s)
    assert "0 served, 3 rejected (too long to fit" in r.table() and "640 tokens" in r.table()


def test_serve_with_a_one_block_pool_reports_zero_served(capsys):
    # 1 request/s, constant gaps, for 3 s: arrivals at 1 and 2 s; 512 + 128 tokens never fit one block
    code, out, err = run(["serve", "--kv-blocks", "1", "--rate", "1", "--duration", "3", "--cv", "0"], capsys)
    assert code == 0, err
    assert "0 served, 2 rejected (too long to fit" in out and "a pool of 1 blocks" in out
    code, out, err = run(["serve", "--kv-blocks", "1", "--rate", "1", "--duration", "3", "--cv", "0", "--json"],
                         capsys)
    s = json.loads(out)  # json.loads accepts NaN; the text must not contain it
    assert code == 0 and (s["completed"], s["rejected"]) == (0, 2) and "NaN" not in out


# -- interrupted writes ------------------------------------------------------------------------------
def test_atomic_write_leaves_the_old_file_or_none_when_interrupted(tmp_path):
    from inferlab.base.atomicio import write_text_atomic, atomic_write
    target = tmp_path / "out.csv"
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert not target.exists() and list(tmp_path.iterdir()) == []  # nothing, not even the temporary
    write_text_atomic(target, "old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target) as tmp:
            tmp.write_text("new, but cut")
            raise KeyboardInterrupt
    assert target.read_text() == "old\n" and list(tmp_path.iterdir()) == [target]


def test_serve_timeseries_interrupted_mid_write_leaves_no_file(tmp_path, capsys, monkeypatch):
    from pathlib import Path
    real = Path.write_text

    def cut(self, text, *a, **k):  # the write is interrupted half-way (Ctrl-C)
        real(self, text[: len(text) // 2], *a, **k)
        raise KeyboardInterrupt
    monkeypatch.setattr(Path, "write_text", cut)
    target = tmp_path / "ts.csv"
    code, out, err = run(["serve", "--rate", "1", "--duration", "3", "--timeseries", str(target)], capsys)
    assert code == 130 and "interrupted" in err
    assert list(tmp_path.iterdir()) == []  # no partial ts.csv, no temporary left behind


def test_a_kv_block_too_large_is_blamed_on_the_block_not_the_weights():
    from inferlab.serving.kv import kv_capacity_blocks
    from inferlab.base.input_checks import DoesNotFitError
    # Llama-2 13B: 13,015,864,320 x 2 bytes of weights; 72e9 - 26,031,728,640 = 45,968,271,360 bytes free;
    # / 819,200 bytes per token = 56,113.6: blocks of up to 56,113 tokens fit.
    with pytest.raises(DoesNotFitError, match=r"block_tokens=1000000000: .* allowed: block_tokens <= 56113$"):
        kv_capacity_blocks(LLAMA_2_13B, H100_SXM, block_tokens=10**9)
    assert kv_capacity_blocks(LLAMA_2_13B, H100_SXM, block_tokens=56113) == 1
    with pytest.raises(DoesNotFitError, match="weights take 138.0 GB"):  # 70B: the weights are the problem
        kv_capacity_blocks(LLAMA_2_70B, H100_SXM)
