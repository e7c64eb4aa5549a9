"""The compiled decode step is checked against the eager one before it is timed (measure/runner.py).

torch.compile is replaced by stand-ins that return the eager step's logits, NaN, or wrong values, so the
fallback chain (frozen, then not frozen, then eager) is tested without a compiler and on any CPU.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from inferlab import measure  # noqa: E402
from inferlab.measure import runner  # noqa: E402
from inferlab.measure.ceilings import generator  # noqa: E402


def stand_in_compile(frozen="right", unfrozen="right"):
    """A torch.compile stand-in: the eager module, whose logits are kept ('right'), made NaN ('nan') or moved by
    a tenth of their largest value ('wrong'), depending on whether the step was asked to freeze."""
    calls = []

    def compile_(model, **opts):
        frozen_ = bool((opts.get("options") or {}).get("freezing"))
        calls.append(frozen_)
        how = frozen if frozen_ else unfrozen

        def step(tok, pos, all_logits=False):
            out = model(tok, pos, all_logits=all_logits)
            if how == "nan":
                return torch.full_like(out, float("nan"))
            if how == "wrong":
                return out + 0.1 * out.abs().max()
            return out
        return step
    compile_.calls = calls
    return compile_


def tiny_model():
    model = runner.random_model(measure.TINY_MODEL, "cpu", "fp32")
    model.setup_cache(1, 32)
    runner.fill_kv_cache_(model, generator("cpu", 0))
    pool = runner.token_pool(measure.TINY_MODEL, 1, 1, 2, "cpu", generator("cpu", 1))
    return model, pool


def first_step(monkeypatch, frozen, unfrozen):
    """(stand-in compile, model, pool, decode_runner's fn, mode used, note) at position 20 of a tiny model."""
    fake = stand_in_compile(frozen=frozen, unfrozen=unfrozen)
    monkeypatch.setattr(torch, "compile", fake)
    model, pool = tiny_model()
    with torch.inference_mode():
        return (fake, model, pool, *runner.decode_runner(model, pool, 20, "compile", "cpu"))


def test_a_frozen_step_with_nan_logits_is_recompiled_without_freezing(monkeypatch):
    fake, model, pool, fn, used, note = first_step(monkeypatch, "nan", "right")
    assert used == "compile" and fake.calls == [True, False]
    assert "frozen" in note and "not finite" in note
    assert runner.decode_step(model)["timed"] == "compile (not frozen)"
    assert "not finite" in runner.decode_step(model)["why"]
    with torch.inference_mode():
        assert torch.isfinite(fn(pool[1])).all()
        # the next point does not try the frozen step again
        fn, used, _ = runner.decode_runner(model, pool, 21, "compile", "cpu")
    assert used == "compile" and fake.calls == [True, False]


def test_a_step_with_wrong_logits_both_ways_falls_back_to_eager(monkeypatch):
    fake, model, pool, fn, used, note = first_step(monkeypatch, "wrong", "wrong")
    assert used == "eager" and fake.calls == [True, False]
    assert note.count("differ from the eager step's") == 2 and "without freezing" in note
    step = runner.decode_step(model)
    assert step["timed"] == "eager" and "differ" in step["why"]
    with torch.inference_mode():
        assert torch.equal(fn(pool[1]), model(pool[1], 20, all_logits=False))


def test_a_step_that_passes_its_check_is_the_frozen_one(monkeypatch):
    fake, model, _, _, used, note = first_step(monkeypatch, "right", "nan")
    assert used == "compile" and note is None and fake.calls == [True]
    assert runner.decode_step(model) == {"timed": "compile (frozen)", "why": None}


def test_the_tolerance_is_a_share_of_the_largest_logit_per_dtype():
    ref = torch.tensor([[4.0, -2.0, 1.0]])
    # fp32: 1e-3 of the largest |logit| (4.0) is 0.004
    assert runner.step_mismatch(ref + torch.tensor([[0.0, 0.003, 0.0]]), ref) is None
    assert "tolerance 0.001 in fp32" in runner.step_mismatch(ref + torch.tensor([[0.0, 0.005, 0.0]]), ref)
    half = ref.to(torch.bfloat16)
    assert runner.step_mismatch(half + 0.125, half) is None  # 0.125 / 4 = 0.031 <= 0.05
    assert "in bf16" in runner.step_mismatch(half + 0.25, half)  # 0.0625 > 0.05
    inf = ref.clone()
    inf[0, 1] = float("inf")
    assert runner.step_mismatch(inf, ref) == "1 of 3 logits not finite"
    assert "shape" in runner.step_mismatch(ref[:, :2], ref)


def test_the_suite_records_which_step_it_timed_and_why(monkeypatch):
    monkeypatch.setattr(torch, "compile", stand_in_compile(frozen="nan", unfrozen="right"))
    run = measure.run_suite(device="cpu", model="tiny", progress=False, threads=1, decode_mode="compile",
                            dtype="fp32")
    step = run.data["config"]["decode_step"]
    assert step["timed"] == "compile (not frozen)" and "not finite" in step["why"]
    assert any("the frozen compiled step failed its check" in n for n in run.data["notes"])
    assert "decode step: compile (not frozen)" in run.table()
