"""deployment.Deployment: the frozen value the core's time functions take (accelerator, precision, TP,
efficiencies, overlap, all-reduce latency), and the short call with a bare Accelerator."""
import dataclasses

import pytest

from inferlab.core import latency
from inferlab.core.costs import decode_costs
from inferlab.core.deployment import Deployment
from inferlab.core.specs import Precision, get_accelerator, get_model

pytestmark = pytest.mark.core

M, G = get_model("llama-2-13b"), get_accelerator("h100-sxm")
INT8 = Precision(weights="int8")


def test_an_accelerator_alone_means_the_default_deployment():
    assert latency.prefill_time_s(M, G, 2048) == latency.prefill_time_s(M, Deployment(G), 2048)
    assert latency.decode_step_time_s(M, G, 1024, 8) == latency.decode_step_time_s(M, Deployment(G), 1024, 8)
    d = Deployment(G)
    assert (d.precision, d.tp, d.mfu, d.mbu, d.overlap, d.allreduce) == (Precision(), 1, 1.0, 1.0, "per_operator", True)


def test_the_short_call_keeps_its_precision():
    # int8 weights halve the weight read of a B = 1 decode step: the short call must not drop them
    short = latency.decode_step_time_s(M, G, 1024, 1, INT8)
    assert short == latency.decode_step_time_s(M, Deployment(G, INT8), 1024, 1)
    assert short < 0.6 * latency.decode_step_time_s(M, G, 1024, 1)
    assert latency.throughput_tokens_per_s(M, G, 1024, 4, INT8) == pytest.approx(4 / latency.itl_s(M, G, 1024, 4, INT8))


def test_the_deployments_overlap_reaches_the_time_by_hand():
    # overlap 'none': every operator's compute and memory times add, so the B = 1 step is
    # total FLOPs / peak + total bytes / bandwidth (one device, no all-reduce).
    total = decode_costs(M, 1, 1024).total
    by_hand = total.flops / G.peak("bf16") + total.bytes / G.hbm_bytes_per_s
    assert latency.decode_step_time_s(M, Deployment(G, overlap="none"), 1024) == pytest.approx(by_hand, rel=1e-12)
    assert latency.decode_step_time_s(M, G, 1024) < by_hand


def test_a_deployment_is_frozen_and_with_checks_again():
    d = Deployment(G, tp=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.tp = 4
    assert d.with_(mfu=0.5) == Deployment(G, tp=2, mfu=0.5)
    with pytest.raises(ValueError, match="mfu must be a finite number"):
        d.with_(mfu=2.0)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(tp=0), ValueError, r"^tp must be an integer >= 1 and <= 65536; got 0$"),
    (dict(tp=1.5), ValueError, r"^tp must be an integer"),
    (dict(mfu=0.0), ValueError, r"^mfu must be a finite number >= 1e-09 and <= 1; got 0.0$"),
    (dict(mbu=1.5), ValueError, r"^mbu must be a finite number >= 1e-09 and <= 1; got 1.5$"),
    (dict(overlap="sometimes"), ValueError, r"unknown overlap 'sometimes'; allowed: per_operator, whole_model, none"),
    (dict(overlap=True), ValueError, r"^overlap must be one of 'per_operator', 'whole_model', 'none'; got True$"),
    (dict(allreduce="yes"), ValueError, r"^allreduce must be True or False; got 'yes'$"),
    (dict(allreduce_latency_s=-1e-6), ValueError, r"^allreduce_latency_s must be a finite number >= 0"),
    (dict(precision="int8"), TypeError,
     r"^deployment\.Deployment\(precision=\.\.\.\): expected Precision, got str 'int8'; build one with inferlab\.core\.specs\.Precision"),
])
def test_a_bad_field_is_refused_by_name_in_one_line(kwargs, error, match):
    with pytest.raises(error, match=match) as e:
        Deployment(G, **kwargs)
    assert "\n" not in str(e.value)


def test_a_name_where_the_object_belongs_says_which_resolver():
    with pytest.raises(TypeError, match=r"^deployment\.Deployment\(accelerator=\.\.\.\): expected Accelerator, got str 'h100-sxm'; "
                                        r"resolve names with inferlab\.core\.specs\.get_accelerator$"):
        Deployment("h100-sxm")
    with pytest.raises(TypeError, match=r"^latency\.prefill_time_s\(deployment=\.\.\.\): expected Deployment or "
                                        r"Accelerator, got str 'h100-sxm'"):
        latency.prefill_time_s(M, "h100-sxm", 2048)


def test_a_precision_beside_a_deployment_is_refused():
    # the deployment holds one already: two would leave a reader guessing which one counted
    with pytest.raises(ValueError, match=r"^precision: give it inside the Deployment"):
        latency.decode_step_time_s(M, Deployment(G), 1024, 1, INT8)
