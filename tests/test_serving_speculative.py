"""Speculative decoding in the simulator (serving.speculative), checked against hand arithmetic."""
import math

import numpy as np
import pytest

from inferlab.measure.plan import TINY_MODEL
from inferlab.serving.policies import ChunkedPrefill
from inferlab.serving.simulate import simulate
from inferlab.serving.speculative import Speculative, SpeculativeStepTime, speedup, tokens_per_verification
from inferlab.serving.steptime import RooflineStepTime, StepShape
from inferlab.serving.workload import Workload
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.simulator


class Linear:
    """a + b * tokens fed: the step time a test can work by hand."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def step_time_s(self, step, t_s):
        return self.a + self.b * step.tokens


def test_tokens_per_verification_by_hand():
    # k = 3, alpha = 0.5: 1 + 0.5 + 0.25 + 0.125 = 1.875 (the first token always, then each kept w.p. alpha^i)
    assert tokens_per_verification(3, 0.5) == pytest.approx(1.875)
    # alpha = 0: only the target's own token; k = 1, alpha = 0.8: 1 + 0.8
    assert tokens_per_verification(5, 0.0) == pytest.approx(1.0)
    assert tokens_per_verification(1, 0.8) == pytest.approx(1.8)


def test_the_verification_step_time_by_hand():
    # 2 sequences decoding, k = 3: the target feeds 2 x 4 = 8 tokens -> 1 + 0.1 * 8 = 1.8 s;
    # the draft runs 3 steps of 2 tokens -> 3 x (0.2 + 0.01 * 2) = 0.66 s; in all 2.46 s.
    st = SpeculativeStepTime(Linear(1.0, 0.1), Speculative(3, 0.5, TINY_MODEL), Linear(0.2, 0.01))
    assert st.step_time_s(StepShape(2, 2 * 100.0, (), 2), 0.0) == pytest.approx(2.46)
    # a prefill-only step is the target's own: 1 + 0.1 * 50
    assert st.step_time_s(StepShape(0, 0.0, ((50, 0),), 1), 0.0) == pytest.approx(6.0)


def test_one_request_tokens_come_in_bursts_of_the_expected_count():
    # target: 1 s per step whatever it holds; mtp draft step = 1 s / n_layers. k = 3, alpha = 0.5: E = 1.875.
    # N = 10 output tokens: the prefill gives token 0 at t = 1, then ceil(9 / 1.875) = ceil(4.8) = 5
    # verifications of v = 1 + 3 / L seconds; token j arrives with verification ceil(j / 1.875):
    # j = 1 -> 1; 2, 3 -> 2; 4, 5 -> 3; 6, 7 -> 4; 8, 9 -> 5.
    v = 1.0 + 3.0 / TINY_MODEL.n_layers
    r = simulate(Workload(np.zeros(1), np.array([4]), np.array([10])), TINY_MODEL, get_accelerator("h100-sxm"),
                 ChunkedPrefill(token_budget=64, max_num_seqs=4), step_time=Linear(1.0, 0.0), kv_blocks=64,
                 speculative=Speculative(3, 0.5, "mtp"))
    assert r.first_token_s[0] == pytest.approx(1.0)
    assert r.finish_s[0] == pytest.approx(1.0 + 5 * v)
    np.testing.assert_allclose(r.itls_s[0], [v, v, 0, v, 0, v, 0, v, 0], atol=1e-12)
    assert r.output_tokens.tolist() == [10]


def test_it_pays_at_small_batch_and_stops_paying_at_large_batch():
    # Llama-2 13B on an H100, mtp, k = 4, alpha = 0.7 (E = 2.77), context 128: at batch 1 a decode
    # step reads the weights (memory-bound), so 5 tokens cost about what 1 does: speed-up near E;
    # at batch 1024 the step is compute-bound, 5 tokens cost about 5 times 1: speed-up below 1.
    m, acc = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
    st = RooflineStepTime(m, acc)
    spec = Speculative(4, 0.7)
    e = (1 - 0.7 ** 5) / 0.3
    small = speedup(st, spec, 1, 128, None, m.n_layers)
    large = speedup(st, spec, 1024, 128, None, m.n_layers)
    assert 0.8 * e < small < e
    assert large < 1.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=0), "speculative k (draft tokens per verification) must be an integer >= 1"),
    (dict(acceptance=1.0), "acceptance (alpha, the per-token acceptance rate) must be a number >= 0 and < 1; got 1.0"),
    (dict(acceptance=-0.1), "must be a number >= 0 and < 1; got -0.1"),
    (dict(draft="llama-2-7b"), "draft must be a model (ModelConfig) or 'mtp'"),
])
def test_bad_settings_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Speculative(**kwargs)
    assert math.isfinite(tokens_per_verification(3, 0.99))
