"""Every 16-bit figure `--efficiency measured` gave before FP8, grouped experts, the H200 transfer and
published attention were added moves by less than 3 % (attention and engine time stay off here).

The expected values are data (tests/data/measured_16bit_pins.json): printed once from the unchanged code at
commit ad0a3e3 (its "obtained" field says how), never from the code under test. A change to the 16-bit curves,
the small kernels, the all-reduce or the way a pass is summed that moves any of them by 3 % or more fails here.

The mixture-of-experts rows (Mixtral, DeepSeek-V2-Lite) move on purpose: their routed experts now run as one
grouped product (one launch, the experts' tiles sharing the waves) instead of one product per expert, which
makes them 1-47 % faster. They are held to 3 % with the experts timed one product each, as before (the grouped
call replaced by that sum here), so nothing else in them moves; test_grouped_experts_only_speed_up checks the
direction of the change.
"""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import Precision, get_accelerator, resolve_model

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]
PINS = json.loads((ROOT / "tests" / "data" / "measured_16bit_pins.json").read_text())
TOLERANCE = 0.03


def _latency(key: str) -> float:
    model_name, gpu, tp, kv, what = key.split("|")
    kind, b, x = what.split()
    d = Deployment(get_accelerator(gpu), Precision(kv=kv.removeprefix("kv ")), tp=int(tp.removeprefix("tp")),
                   efficiency=MeasuredKernels())
    fn = prefill_time_s if kind == "prefill" else decode_step_time_s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(resolve_model(str(ROOT / model_name) if "/" in model_name else model_name), d, int(x[1:]),
                  int(b[1:]))


MOE = ("mixtral", "deepseek")
DENSE_KEYS = sorted(k for k in PINS["latency"] if not any(m in k for m in MOE))
MOE_KEYS = sorted(k for k in PINS["latency"] if any(m in k for m in MOE))


@pytest.fixture
def experts_one_product_each(monkeypatch):
    """The routed experts timed as before: `groups` separate products of rows_per_group rows each."""
    from inferlab.core import kernels
    grouped = kernels.product_times_s

    def separate(acc, groups, rows_per_group, k, n, dtype="bf16"):
        return groups * grouped(acc, 1, rows_per_group, k, n, dtype)
    monkeypatch.setattr(kernels, "product_times_s", separate)


@pytest.mark.parametrize("key", DENSE_KEYS)
def test_latency_figure_within_three_percent(key):
    assert _latency(key) == pytest.approx(PINS["latency"][key], rel=TOLERANCE)


@pytest.mark.parametrize("key", MOE_KEYS)
def test_moe_figure_within_three_percent_with_experts_as_separate_products(key, experts_one_product_each):
    assert _latency(key) == pytest.approx(PINS["latency"][key], rel=TOLERANCE)


@pytest.mark.parametrize("key", MOE_KEYS)
def test_grouped_experts_only_speed_up(key):
    # One launch and shared waves never take longer than one product per expert (the pinned figure).
    assert _latency(key) <= PINS["latency"][key] * (1 + 1e-9)


def _cli(args):
    out = subprocess.run([sys.executable, "-m", "inferlab", *args], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(n for n in PINS["serve"] if not any(m in " ".join(PINS["serve"][n]["args"])
                                                                           for m in MOE)))
def test_serve_figures_within_three_percent(name):
    pin = PINS["serve"][name]
    got = _cli(pin["args"])
    for field in ("ttft_mean_s", "ttft_p90_s", "itl_mean_s", "e2e_mean_s"):
        metric, stat = field.rsplit("_", 2)[0], field.rsplit("_", 2)[1]
        assert got[f"{metric}_s"][stat] == pytest.approx(pin[field], rel=TOLERANCE), field


@pytest.mark.parametrize("name", sorted(PINS["estimate"]))
def test_estimate_figures_within_three_percent(name):
    pin = PINS["estimate"][name]
    got = _cli(pin["args"])
    for field in ("ttft_s", "prefill_batch_s", "itl_s", "throughput_tokens_per_s"):
        assert got[field] == pytest.approx(pin[field], rel=TOLERANCE), field
