"""Issue 22 item 7: a fuzz of the CLI, in-process. Hypothesis picks a subcommand and a random subset
of its options (taken from the parser itself, so a new option is fuzzed too), each with a plausible
or hostile value, and asserts what a user may rely on:

- the exit status is 0 or 2 (argparse's own refusals too; `errata --check` may also say 1, stale),
  never another exception (a traceback);
- stdout carries no NaN or infinity as a result (JSON output parses with no NaN/Infinity);
- an output file exists whole after exit 0 and does not exist after exit 2; no temporary is left.

Left out, for time (each starts long work once its options pass): `serve --live`, `serving validate`,
`measure`, `figures`, `classroom grade` and `classroom sample`. Their option checks run before the
work and are covered case by case in test_cli_edges.py and test_bad_input.py.
"""
import argparse
import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from inferlab import cli

COMMANDS = (("list",), ("estimate",), ("serve",), ("serving", "compare"), ("verify",), ("errata",),
            ("classroom", "list"), ("classroom", "cells"), ("classroom", "build-student"))
SKIP = {"help", "live"}  # --live serves on the wall clock (test_serving_live.py)
# Output options: paths under the test's folder (or hostile places), checked after the run.
OUTPUTS = {"timeseries", "out", "figure", "output"}
INPUTS = {"trace", "vllm_result", "registry", "statements"}
INSIDE_REPOSITORY = {("errata",): [("--output", "ERRATA.md")], ("classroom", "build-student"): [("--out", "student")]}

HOSTILE = ["", " ", "nan", "inf", "-inf", "-1", "0", "1e300", "1e-320", str(2**64), "abc", "1,2", "--", "\x00x"]
INTS = ["1", "2", "3", "8", "16", "64", "512", "100000", "1e9", "3.5"]
FLOATS = ["0.001", "0.1", "0.5", "1", "2", "5", "20", "100", "1e6", "1e-200", "1e-160"]
NAMES = ["llama-2-13b-book", "llama-2-70b", "llama-3-8b", "h100-sxm", "h200", "a100-80gb", "chunked", "static",
         "continuous", "prefill-first", "round-robin", "least-loaded", "fixed", "uniform", "lognormal", "bf16",
         "fp8", "15.1.1", "15.2.3", "number", "statement", "consistent", "erratum"]
NOT_A_RESULT = re.compile(r"(?<![\w.])(nan|inf|NaN|Infinity|-inf)(?![\w])")

PARSER = cli.build_parser()


def subparser(path):
    p = PARSER
    for name in path:
        action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = action.choices[name]
    return p


def option_values(action, tmp):
    if action.dest in OUTPUTS:
        return st.sampled_from([f"{tmp}/o.csv", f"{tmp}/o.json", f"{tmp}/o.png", f"{tmp}/o.svg", f"{tmp}/o.txt",
                                f"{tmp}/sub/o.md", "", "/", "/proc/x.csv", str(tmp)])
    if action.dest in INPUTS:
        return st.sampled_from([f"{tmp}/trace.csv", f"{tmp}/short.csv", f"{tmp}/vllm.json", f"{tmp}/bad.json",
                                f"{tmp}/binary.bin", f"{tmp}/empty.toml", "/nonexistent", "", str(tmp)])
    plausible = list(action.choices) if action.choices else (
        INTS if action.type is int else FLOATS if action.type is float else NAMES)
    return st.sampled_from(plausible) | st.sampled_from(HOSTILE)


def argv_for(path, tmp):
    p = subparser(path)
    options = [a for a in p._actions if a.option_strings and a.dest not in SKIP]
    positionals = [a for a in p._actions if not a.option_strings]

    @st.composite
    def build(draw):
        argv = list(path)
        for a in positionals:  # classroom cells SECTION, build-student NOTEBOOKS
            argv.append(draw(st.sampled_from(["15.1.1", "15.2.3", "99", f"{tmp}/nb.ipynb", f"{tmp}/cells.ipynb",
                                              f"{tmp}/binary.bin", ""])))
        chosen = draw(st.lists(st.sampled_from(options), max_size=5, unique_by=lambda a: a.dest)) if options else []
        for a in chosen:
            flag = a.option_strings[-1]
            if a.nargs == 0:
                argv.append(flag)
            else:
                argv += [flag, draw(option_values(a, tmp))]
        # Outputs whose default lies in the repository (ERRATA.md, build/student) go to the test's folder.
        for flag, dest in INSIDE_REPOSITORY.get(tuple(path), ()):
            if flag not in argv:
                argv += [flag, f"{tmp}/{dest}"]
        return argv
    return build()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    (d / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n0.5,300,20\n2,64,1\n")
    (d / "short.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100\n")
    (d / "vllm.json").write_text(json.dumps({
        "input_lens": [100, 200, 50], "output_lens": [3, 2, 0], "ttfts": [0.01, 0.02, 0.0],
        "itls": [[0.005, 0.006], [0.007], []], "errors": ["", "", "boom"], "request_rate": 2.0,
        "burstiness": 1.0}))
    (d / "bad.json").write_text(json.dumps({"input_lens": [1.5], "output_lens": [1], "ttfts": "x", "itls": [[]]}))
    (d / "binary.bin").write_bytes(bytes(range(256)))
    (d / "empty.toml").write_text("")
    (d / "nb.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (d / "cells.ipynb").write_text(json.dumps({"cells": 3, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return d


def check(argv, tmp, capsys):
    outputs = [argv[i + 1] for i, a in enumerate(argv[:-1])
               if a.lstrip("-").replace("-", "_") in OUTPUTS and argv[i + 1].startswith(str(tmp))]
    before = {o: _read(o) for o in outputs}
    try:
        code = cli.main(argv)
    except SystemExit as stop:  # argparse refusing a value it cannot parse
        code = stop.code
    out, err = capsys.readouterr()
    allowed = (0, 1, 2) if argv[0] == "errata" and "--check" in argv else (0, 2)  # 1: ERRATA.md is stale
    assert code in allowed, (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.strip(), (argv, "exit 2 without a message")
    assert not NOT_A_RESULT.search(out), (argv, out)
    if "--json" in argv and code == 0 and out.strip():
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{argv}: JSON holds {c}"))
    for o in outputs:
        if code == 0 and _read(o) is not None:
            assert _read(o), (argv, o, "an empty output file")
        if code == 2:
            assert _read(o) == before[o], (argv, o, "an output written by a run that failed")
    leftovers = [p for p in tmp.rglob("*") if ".part" in p.name]
    assert not leftovers, (argv, leftovers)


def _read(path):
    from pathlib import Path
    p = Path(path)
    return p.read_bytes() if p.is_file() else None


# The cases the fuzz found, always tried first ({tmp}: the fixture folder).
KNOWN = {
    ("serve",): [["--kv-blocks", "1"], ["--cv", "1e-160"], ["--cv", "1e6"], ["--rate", "1e9"],
                 ["--trace", "{tmp}/short.csv"], ["--policy", ""], ["--kv-blocks", "1", "--json"],
                 ["--block-tokens", "1000000000"], ["--timeseries", "{tmp}/o.csv", "--kv-blocks", "1"]],
    ("serving", "compare"): [["--vllm-result", "{tmp}/bad.json"], ["--vllm-result", "{tmp}/binary.bin"],
                             ["--vllm-result", "{tmp}/vllm.json", "--figure", "{tmp}/o.txt"],
                             ["--vllm-result", "{tmp}/vllm.json", "--json"]],
    ("classroom", "build-student"): [["{tmp}/cells.ipynb", "--out", "{tmp}/student"],
                                     ["{tmp}/binary.bin", "--out", "{tmp}/student"]],
    ("estimate",): [["--reserved-gb", "1e300"]],
    ("verify",): [["--kind", "statement", "--verdict", "erratum"], ["--registry", "{tmp}/empty.toml"]],
    ("errata",): [["--output", ""]],
}

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p))
def test_cli_fuzz_exits_0_or_2_with_no_traceback_nan_or_partial_file(path, tmp, capsys):
    @FUZZ
    @given(argv=argv_for(path, tmp))
    def fuzz(argv):
        check(argv, tmp, capsys)
    for tail in KNOWN.get(path, []):
        fuzz = example(argv=list(path) + [a.replace("{tmp}", str(tmp)) for a in tail])(fuzz)
    fuzz()
