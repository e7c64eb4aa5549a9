"""measure.probe: the one linear probe (weight copies rotating past the cache, timed F.linear) that the
operator profile, the drift probes and the live engines' host-speed probe all use."""
import pytest

from inferlab.measure import drift, probe, profile
from inferlab.measure.plan import TINY_MODEL
from inferlab.measure.probe import LinearProbe, weight_copies


@pytest.mark.parametrize("nbytes, cache_bytes, pool_bytes, expected", [
    (1000, 10_000, None, 21),     # 2 x 10,000 / 1,000 = 20 copies fill twice the cache; one more exceeds it
    (1000, 10_500, None, 22),     # 21 copies come to 21,000 = twice the cache: not beyond it
    (1000, 0.0, None, 2),         # no cache: still two copies, so that calls alternate
    (1000, 10_000, 5_000, 5),     # the pool holds five
    (1000, 10_000, 500, 1),       # the pool holds less than one: one copy, never none
    (1000, 1e12, None, probe.MAX_COPIES),
])
def test_weight_copies_exceed_twice_the_cache_within_the_pool_by_hand(nbytes, cache_bytes, pool_bytes, expected):
    assert weight_copies(nbytes, cache_bytes, pool_bytes) == expected


def _profile_copies(monkeypatch, cfg, cache_bytes):
    """{weight shape (N, K): number of distinct weight copies the profile's linear points rotate over}."""
    import torch

    copies = {}
    real_time_fn = profile.time_fn

    def recording_time_fn(fn, pool, **kw):
        for args in pool:
            if isinstance(args, tuple) and len(args) == 2 and all(isinstance(a, torch.Tensor) for a in args):
                copies.setdefault(tuple(args[1].shape), set()).add(id(args[1]))
        return real_time_fn(fn, pool, **kw)

    monkeypatch.setattr(profile, "time_fn", recording_time_fn)
    monkeypatch.setattr(profile, "step_overhead", lambda *a, **k: (0.0, {}))
    profile._profile_round(cfg, "cpu", "fp32", max_tokens=2, max_batch=1, max_kv_positions=2,
                           cache_bytes=cache_bytes, pool_bytes=1e9, point_time_s=0.001)
    return {shape: len(ids) for shape, ids in copies.items()}


def test_profile_drift_and_host_probes_rotate_the_same_copies(monkeypatch):
    """One copy rule for the three timings of F.linear. Before they shared one, the host probe took
    ceil(2 cache / weight) copies (at most 64), the profile and the drift probe one more (at most 32). Here
    the up-projection's 688 x 256 fp32 weight is 704,512 bytes; a 5 MB cache: 2 x 5e6 / 704,512 = 14.2, so
    15 copies fill twice the cache and 16 exceed it. Fails when any of the three counts its own way."""
    cache = 5e6
    up = (TINY_MODEL.d_ff, TINY_MODEL.d_model)
    host = LinearProbe.for_model(TINY_MODEL, "fp32", cache_bytes=cache)
    probes = drift.LinearProbes(None, TINY_MODEL, "cpu", "fp32", cache_bytes=cache, pool_bytes=1e9)
    pool = probes._pool(f"{up[1]}x{up[0]}", 1)
    assert len(host.weights) == len({id(w) for _, w in pool}) == 16
    assert _profile_copies(monkeypatch, TINY_MODEL, cache)[up] == 16


def test_host_probe_warms_every_copy_then_rotates():
    p = LinearProbe.for_model(TINY_MODEL, "fp32", cache_bytes=0.0)
    assert len(p.weights) == 2 and p.weights[0].shape == (TINY_MODEL.d_ff, TINY_MODEL.d_model)
    big = LinearProbe.for_model(TINY_MODEL, "fp32", cache_bytes=1e12)
    assert len(big.weights) == probe.MAX_COPIES  # capped: a tiny model cannot leave the cache
    assert not p.warmed
    assert p() > 0 and p.warmed and p.calls == 1


def test_warm_reads_every_copy_once_before_the_first_timed_call():
    p = LinearProbe(8, 4, "fp32", cache_bytes=1000.0)
    seen = []
    assert p.warm(3, fn=lambda x, w: seen.append((x.shape[0], id(w)))) == len(p.weights)
    assert [m for m, _ in seen] == [3] * len(p.weights) and {i for _, i in seen} == {id(w) for w in p.weights}


@pytest.mark.parametrize("call, match", [
    (lambda: LinearProbe.for_model(TINY_MODEL, "fp16"), r"dtype 'fp16' cannot be measured \(allowed: fp32, bf16\)"),
    (lambda: LinearProbe(8, 8, "fp8"), r"dtype 'fp8' cannot be measured \(allowed: fp32, bf16, fp16\)"),
    (lambda: LinearProbe(8, 8, "fp32", copies=0), "copies must be an integer >= 1"),
    (lambda: LinearProbe(0, 8, "fp32"), "d_in must be an integer >= 1"),
    (lambda: LinearProbe(8, 8, "fp32", cache_bytes=-1.0), "cache_bytes must be a finite number >= 0"),
    (lambda: LinearProbe(8, 8, "fp32").pool(0), "m must be an integer >= 1"),
])
def test_linear_probe_refuses_bad_input_in_one_line(call, match):
    with pytest.raises(ValueError, match=match) as e:
        call()
    assert "\n" not in str(e.value)
