"""The command line: `inferlab list` and `inferlab estimate` on the book's Llama-2 13B / H100 cases."""
import re
import subprocess
import sys

import pytest

from inferlab import list_accelerators, list_models
from inferlab.cli import main
from hang_guard import HANG_S

d, f, L, N, H, V = 5120, 20480, 40, 40, 128, 32000
BOOK_WEIGHTS = 2 * (L * (4 * d * d + 2 * d * f + 2 * d) + 2 * V * d + d)
KV_TOKEN = 2 * L * N * H * 2


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def number(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in:\n{text}"
    return float(match.group(1))


def test_list_names_every_model_and_accelerator(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    for name in list_models() + list_accelerators():
        assert re.search(rf"^\s+{re.escape(name)}\s", out, re.M), name
    assert re.search(r"llama-2-13b-book\s+12\.911 B params", out)  # 12,911,006,720 by hand
    assert re.search(r"h100-sxm\s+80 GB\s+3\.35 TB/s", out)


def test_estimate_book_decode_at_S_1000(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b-book", "--gpu", "h100-sxm",
                       "--batch", "1", "--prompt", "1000")
    assert code == 0
    assert number(r"weights\s+([\d.]+) GB", out) == round(BOOK_WEIGHTS / 1e9, 2)  # 25.82
    assert number(r"\(([\d.]+) GB per sequence of 1000 tokens\)", out) == 0.819  # 0.82 GB
    assert number(r"ITL\s+([\d.]+) ms", out) == pytest.approx(8, rel=0.03)
    assert number(r"throughput\s+([\d.]+) tokens/s", out) == pytest.approx(125, rel=0.03)
    assert number(r"max batch at this context: (\d+)", out) == (80e9 - BOOK_WEIGHTS) // (KV_TOKEN * 1000) == 66
    assert "(memory-bound, at context 1000)" in out


def test_estimate_book_throughput_at_B_64(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b-book", "--batch", "64", "--prompt", "1024")
    assert code == 0
    assert number(r"throughput\s+([\d.]+) tokens/s", out) == pytest.approx(2689, rel=0.01)
    assert number(r"KV-crossover B\*\s+([\d.]+)", out) == pytest.approx(31, abs=0.5)
    assert number(r"max batch at this context: (\d+)", out) == 64
    assert "fits" in out and "DOES NOT FIT" not in out


def test_estimate_issue_example(capsys):
    # inferlab estimate --model llama-2-13b --gpu h100-sxm --batch 32 --prompt 1024
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-13b", "--gpu", "h100-sxm",
                       "--batch", "32", "--prompt", "1024")
    assert code == 0
    real_weights = 2 * (40 * (4 * d * d + 3 * d * 13824 + 2 * d) + 2 * V * d + d)
    assert number(r"weights\s+([\d.]+) GB", out) == round(real_weights / 1e9, 2)  # 26.03
    assert number(r"KV cache\s+([\d.]+) GB", out) == round(32 * KV_TOKEN * 1024 / 1e9, 2)  # 26.84
    # (26.0 + 26.8) GB / 3.35 TB/s = 15.8 ms, ~2,030 tok/s (not the book's 10 ms / 3,200).
    itl = number(r"ITL\s+([\d.]+) ms", out)
    assert itl == pytest.approx((real_weights + 32 * KV_TOKEN * 1024) / 3.35e12 * 1e3, rel=0.02)
    assert number(r"throughput\s+([\d.]+) tokens/s", out) == pytest.approx(32 / itl * 1e3, rel=0.001)
    # One 1024-token prompt: ~27 ms; the 32 prompts prefilled together take ~32 times that.
    alone = number(r"one prompt alone: ([\d.]+) ms", out)
    assert alone == pytest.approx(27, rel=0.03)
    assert number(r"TTFT\s+([\d.]+) ms", out) == pytest.approx(32 * alone, rel=0.02)
    assert "(compute-bound)" in out and "(memory-bound, at context 1024)" in out
    assert "ridge point 295 FLOP/byte" in out


def test_estimate_ttft_book_cases(capsys):
    for S, ms in ((1024, 27), (2048, 54)):
        code, out, _ = run(capsys, "estimate", "--prompt", str(S))
        assert code == 0
        assert number(r"TTFT\s+([\d.]+) ms", out) == pytest.approx(ms, rel=0.03)


def test_estimate_reports_a_configuration_that_does_not_fit(capsys):
    code, out, err = run(capsys, "estimate", "--model", "llama-3-70b", "--batch", "1")
    assert code == 2
    assert "DOES NOT FIT" in out
    assert "max batch at this context: none (llama-3-70b weights need 141.1 GB" in out
    assert "does not fit in memory" in err
    assert "nan" not in out.lower()


def test_estimate_with_tp_int8_and_cost(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-3-70b", "--tp", "2", "--kv-dtype", "int8",
                       "--weights-dtype", "int8", "--batch", "8", "--prompt", "2048", "--output", "256",
                       "--usd-per-gpu-hour", "4")
    assert code == 0
    assert "2 x h100-sxm" in out and "KV int8" in out
    assert "per sequence of 2304 tokens" in out
    assert re.search(r"cost\s+\$[\d.]+ per 1k output tokens", out)


@pytest.mark.parametrize("argv, pieces", [
    (["estimate", "--model", "llama-2-13"], ["unknown model 'llama-2-13'", "Did you mean 'llama-2-13b'"]),
    (["estimate", "--gpu", "h100"], ["unknown accelerator 'h100'", "Did you mean 'h100-sxm'"]),
    (["estimate", "--batch", "0"], ["--batch must be an integer >= 1; got 0"]),
    (["estimate", "--prompt", "-5"], ["--prompt must be an integer >= 1; got -5"]),
    (["estimate", "--output", "-1"], ["--output must be an integer >= 0; got -1"]),
    (["estimate", "--mfu", "1.5"], ["--mfu must be a finite number >= 1e-09 and <= 1; got 1.5"]),
    (["estimate", "--tp", "3"], ["tp must divide n_heads=40", "got tp=3"]),
])
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, pieces):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("inferlab: error: ")
    for piece in pieces:
        assert piece in err


def test_unknown_dtype_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--kv-dtype", "bf17"])
    assert info.value.code == 2
    assert "invalid choice: 'bf17'" in capsys.readouterr().err


def test_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "inferlab", "list"], capture_output=True, text=True,
                          timeout=HANG_S)
    assert done.returncode == 0 and "llama-2-13b-book" in done.stdout


@pytest.mark.parametrize("argv, piece", [
    (["estimate", "--batch", "x"], "argument --batch: invalid int value: 'x'"),
    (["estimate", "--mfu", "lots"], "argument --mfu: invalid float value: 'lots'"),
    (["estimate", "--kv-dtype", "bf17"], "argument --kv-dtype: invalid choice: 'bf17'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_values_the_parser_cannot_read_are_one_line_too(capsys, argv, piece):
    """argparse's usage block is replaced by one line naming the argument and the value (exit 2)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and piece in err and "usage:" not in err
