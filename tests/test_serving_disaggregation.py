"""Disaggregated prefill and decode (serving.disaggregation), against hand arithmetic.

Modelled: the first token is delivered when the decode pool admits the request, after its KV cache
arrived (as behind vLLM's disaggregated-prefill proxy), so a lone request's TTFT and end-to-end time
are the shared pool's plus the transfer."""
import numpy as np
import pytest

from inferlab.serving.disaggregation import KVLink, Pool, link, simulate_disaggregated, transfer_time_s
from inferlab.serving.policies import ChunkedPrefill, ContinuousBatching
from inferlab.serving.simulate import simulate
from inferlab.serving.workload import LengthDist, Workload, synthetic
from inferlab.core.specs import BF16, get_accelerator, get_model

pytestmark = pytest.mark.simulator

MODEL, GPU = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
# Llama-2 13B in BF16: 2 (K and V) x 40 layers x 5,120 (40 heads x 128) x 2 bytes = 819,200 bytes a token
BYTES_PER_TOKEN = 2 * 40 * 5120 * 2


def test_one_request_alone_takes_the_shared_time_plus_the_transfer():
    w = Workload(np.array([0.0]), np.array([2000]), np.array([100]))
    shared = simulate(w, MODEL, GPU, ChunkedPrefill(token_budget=4096))
    kv_link = KVLink.from_gbps(400.0, 20.0)          # 400 Gbit/s = 50e9 bytes/s, 20 us
    transfer = 20e-6 + 2000 * BYTES_PER_TOKEN / 50e9  # 32.788 ms
    d = simulate_disaggregated(w, MODEL, GPU, decode=Pool(policy=ChunkedPrefill(token_budget=4096)), kv_link=kv_link)
    assert d.e2e_s[0] == pytest.approx(shared.e2e_s[0] + transfer, rel=1e-12)
    assert d.ttft_s[0] == pytest.approx(shared.ttft_s[0] + transfer, rel=1e-12)
    assert d.kv_arrival_s[0] == pytest.approx(shared.first_token_s[0] + transfer, rel=1e-12)
    # its ITLs are the shared pool's: the same decode steps at the same contexts
    np.testing.assert_allclose(d.itls_s[0], shared.itls_s[0], rtol=1e-12)


def test_transfer_time_is_the_links_latency_plus_the_cache_over_its_bandwidth():
    # what the lab, the claims and the interview report: 2,000 tokens over 400 Gbit/s (50e9 bytes/s) + 20 us
    kv_link = KVLink.from_gbps(400.0, 20.0)
    assert transfer_time_s(MODEL, BF16, 2000, kv_link) == pytest.approx(20e-6 + 2000 * BYTES_PER_TOKEN / 50e9, rel=1e-12)
    # under tensor parallelism each device sends its own share of the heads, in parallel
    assert transfer_time_s(MODEL, BF16, 2000, kv_link, tp=2) == pytest.approx(20e-6 + 1000 * BYTES_PER_TOKEN / 50e9,
                                                                             rel=1e-12)


def test_streaming_layer_by_layer_hides_all_but_the_last_layer():
    # One prefill step [0, t_p): the cache arrives at max(t_p + x / 40, t_p / 40 + x), x = S b / B; with
    # x < t_p (a fast link) the first term wins: the last layer's x / 40 after the prefill ends.
    w = Workload(np.array([0.0]), np.array([2000]), np.array([4]))
    kv_link = KVLink.from_gbps(3600.0, 0.0)
    x = 2000 * BYTES_PER_TOKEN / 450e9
    d = simulate_disaggregated(w, MODEL, GPU, kv_link=kv_link, streaming=True)
    t_p = d.traces[0].step_s[0]
    assert x < t_p
    assert d.kv_arrival_s[0] == pytest.approx(t_p + x / 40, rel=1e-12)


def test_decode_runs_free_of_prefill_stalls():
    # Long prompts among short ones: unchunked in one shared pool, a decode step that shares its iteration
    # with a 4,000-token prefill takes the prefill's time; the decode pool never runs a prefill.
    w = synthetic(4.0, n_requests=200, seed=1, prompt=LengthDist("lognormal", 1500, 1.0, high=8000),
                  output=LengthDist("fixed", 100))
    shared = simulate(w, MODEL, GPU, ContinuousBatching(), replicas=2, router="least-loaded")
    d = simulate_disaggregated(w, MODEL, GPU, prefill=Pool(1), decode=Pool(1))
    assert d.all_itls_s.max() < 0.5 * shared.all_itls_s.max()
    assert d.summary()["itl_s"]["p99"] < shared.summary()["itl_s"]["p99"]
    assert d.summary()["completed"] == 200
    # the decode pool's steps feed one token per running sequence: never more tokens than sequences
    assert np.all(d.traces[1].tokens == d.traces[1].batch)


def test_the_sourced_links():
    assert link("nvlink").gbps == pytest.approx(3600.0)
    assert link("infiniband").gbps == pytest.approx(400.0)
    assert link("infiniband").latency_s == pytest.approx(19.1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: Pool(replicas=0), "pool replicas must be an integer >= 1; got 0"),
    (lambda: KVLink.from_gbps(0.0), r"--kv-link-gbps \(the KV link's bandwidth, Gbit/s\) must be a finite number > 0; got 0.0"),
    (lambda: KVLink.from_gbps(100.0, -1.0), r"--kv-link-latency-us .* must be a finite number >= 0; got -1.0"),
    (lambda: link("ethernet"), "unknown kv link 'ethernet'; allowed: nvlink, infiniband"),
])
def test_bad_settings_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError, match=message):
        make()
