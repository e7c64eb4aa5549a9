"""The last loose inputs: an output path that names a folder is refused by name before any work
(`serve --timeseries`, `errata --output`, `measure --out`), and an absurd `estimate --prompt` with
`--beyond-context` is one line, not a page of 30-digit numbers."""
import pytest

from inferlab import cli


def one_line_error(argv, capsys, *words):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture
def no_work(monkeypatch):
    """Every long piece of work these commands start raises: an option checked after it fails the test."""
    import sys

    import inferlab.serving.simulate  # noqa: F401 (the module; the package exports the function by that name)
    from inferlab.claims import evaluate
    from inferlab.measure import suite
    simulate = sys.modules["inferlab.serving.simulate"]

    def started(*args, **kwargs):
        raise AssertionError("the work started before the output path was checked")
    monkeypatch.setattr(simulate, "simulate", started)
    monkeypatch.setattr(evaluate, "evaluate_registry", started)
    monkeypatch.setattr(suite, "run_suite", started)
    from inferlab.study import live, validate
    monkeypatch.setattr(live, "run_live", started)
    monkeypatch.setattr(validate, "validate", started)


@pytest.mark.parametrize("argv, option", [
    (["serve", "--rate", "1", "--duration", "5", "--timeseries", "{dir}"], "--timeseries"),
    (["serve", "--rate", "1", "--duration", "5", "--timeseries", "{dir}/new/"], "--timeseries"),
    (["errata", "--output", "{dir}"], "--output"),
    (["errata", "--output", "{dir}/new/"], "--output"),
    (["errata", "--check", "--output", "{dir}"], "--output"),
    (["errata", "--check", "--output", "{dir}/new/"], "--output"),
    (["measure", "--quick", "--out", "{dir}"], "--out"),
    (["measure", "--quick", "--out", "{dir}/new/"], "--out"),
    (["serve", "--live", "--model", "tiny", "--out", "{dir}/new/"], "--out"),
    (["serving", "validate", "--model", "tiny", "--out", "{dir}"], "--out"),
    (["serving", "validate", "--model", "tiny", "--out", "{dir}/new/"], "--out"),
])
def test_an_output_that_names_a_folder_is_refused_before_any_work(argv, option, tmp_path, capsys, no_work):
    argv = [a.format(dir=tmp_path) for a in argv]
    one_line_error(argv, capsys, option, "not a directory", str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # "new/" was neither made a folder nor a file


@pytest.mark.parametrize("argv, option", [
    (["serve", "--rate", "1", "--duration", "5", "--timeseries", "{file}/ts.csv"], "--timeseries"),
    (["errata", "--output", "{file}/ERRATA.md"], "--output"),
    (["measure", "--quick", "--out", "{file}/run.json"], "--out"),
])
def test_an_output_under_a_file_is_refused_before_any_work(argv, option, tmp_path, capsys, no_work):
    file = tmp_path / "a-file"
    file.write_text("x")
    one_line_error([a.format(file=file) for a in argv], capsys, option, "cannot be created")
    assert file.read_text() == "x"


def test_a_measure_output_that_is_a_path_is_still_accepted(tmp_path, capsys, monkeypatch):
    """The folder check does not refuse a good path: run_suite is reached, with the path as given."""
    from inferlab.measure import suite
    seen = {}

    class Reached(Exception):
        pass

    def reached(config):
        seen.update(vars(config))
        raise Reached  # stop here: the checks passed
    monkeypatch.setattr(suite, "run_suite", reached)
    with pytest.raises(Reached):
        cli.main(["measure", "--quick", "--out", str(tmp_path / "runs" / "run.json")])
    assert seen["quick"] is True and seen["drift_correction"] is False and (tmp_path / "runs").is_dir() and not (tmp_path / "runs" / "run.json").exists()


def test_an_absurd_prompt_beyond_context_is_one_line(capsys):
    # llama-2-13b-book holds 4,096 tokens; a yardstick may reach 1000 x that = 4,096,000 tokens
    err = one_line_error(["estimate", "--prompt", str(2**62), "--beyond-context"], capsys,
                         "--prompt + --output", "4,611,686,018,427,387,904", "<= 4,096,000", "--beyond-context")
    assert "ms" not in err
    one_line_error(["estimate", "--prompt", "4096000", "--output", "1", "--beyond-context"], capsys,
                   "4,096,001", "<= 4,096,000")


def test_the_books_100k_prompt_is_still_a_yardstick(capsys):
    # 100,000 tokens on Llama-2 13B (24x its context): computed, flagged as not fitting (exit 2), no error line
    code = cli.main(["estimate", "--prompt", "100000", "--beyond-context"])
    out, err = capsys.readouterr()
    assert code == 2 and "prefill / TTFT" in out and "error" not in err
    assert "exceed the maximum context" in err and "does not fit" in err
