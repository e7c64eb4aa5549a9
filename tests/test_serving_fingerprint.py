"""The scheduler's behaviour pinned: 80 simulations (every policy with a few option sets, two loads,
one and two replicas, the KV pool roomy and short) hashed request by request and step by step.

The step time is a fixed affine function of the step's shape (below), and the KV pool is given in
blocks, so the fingerprint depends on the scheduling code only (serving.engine, serving.policies,
serving.simulate), not on the physics in core. A refactor of the schedulers must leave every digest
as it is; a change that means to alter a schedule updates tests/data/serving_fingerprint.json
(`python tests/test_serving_fingerprint.py --write`) and says why in its commit.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.simulator

DIGESTS = Path(__file__).parent / "data" / "serving_fingerprint.json"


class AffineStepTime:
    """2 ms a step, plus 20 us a token fed, 0.1 us a key read (a shape-dependent time, so that
    scheduling decisions move the clock differently)."""

    def step_time_s(self, step, t_s):
        return 2e-3 + 2e-5 * step.tokens + 1e-7 * step.attn_kv_tokens


def _policies():
    from inferlab.serving import policies as p
    return {
        "static-8": p.StaticBatching(8),
        "static-4-timeout": p.StaticBatching(4, 0.5),
        "continuous": p.ContinuousBatching(),
        "continuous-16-capped": p.ContinuousBatching(16, 2048),
        "prefill-first": p.PrefillFirst(),
        "chunked": p.ChunkedPrefill(),
        "chunked-prefix-cached": p.ChunkedPrefill(256, 64),
        "priority": p.PriorityScheduling(),
        "transformers-fifo": p.TransformersFIFO(256, 32),
        "vllm-v1-unchunked": p.VllmV1(4096, 64, chunked_prefill=False),
    }


def _cases():
    for name in _policies():
        for rate in (8.0, 40.0):
            for replicas in (1, 2):
                for kv_blocks in (4000, 300):
                    yield f"{name} rate={rate:g} replicas={replicas} kv_blocks={kv_blocks}", name, rate, replicas, kv_blocks


def _digest(result) -> str:
    h = hashlib.sha256()
    for name in ("first_scheduled_s", "first_token_s", "finish_s", "preemptions", "replica",
                 "cached_prompt_tokens"):
        h.update(np.ascontiguousarray(getattr(result, name), dtype=float).tobytes())
    for itl in result.itls_s:
        h.update(np.ascontiguousarray(itl, dtype=float).tobytes())
    for tr in result.traces:
        for name in ("start_s", "step_s", "batch", "tokens", "kv_blocks_used"):
            h.update(np.ascontiguousarray(getattr(tr, name), dtype=float).tobytes())
    return h.hexdigest()


def _simulate(name, rate, replicas, kv_blocks):
    from inferlab.core.specs import get_accelerator, get_model
    from inferlab.serving.simulate import simulate
    from inferlab.serving.workload import LengthDist, synthetic, with_priority, with_shared_prefix
    w = synthetic(rate, n_requests=120, prompt=LengthDist("lognormal", 400, 1.0, 1, 3000),
                  output=LengthDist("lognormal", 120, 1.0, 1, 600), seed=3)
    caching = name == "chunked-prefix-cached"
    if caching:
        w = with_shared_prefix(w, 200, every=2)
    if name == "priority":
        w = with_priority(w, [("high", "normal", "low")[i % 3] for i in range(len(w))])
    return simulate(w, get_model("llama-2-13b-book"), get_accelerator("h100-sxm"), _policies()[name],
                    replicas=replicas, router="least-loaded" if replicas > 1 else "round-robin",
                    kv_blocks=kv_blocks, step_time=AffineStepTime(), prefix_caching=caching)


def fingerprint() -> dict:
    return {label: _digest(_simulate(*args)) for label, *args in _cases()}


def test_eighty_simulations_are_bit_identical_to_the_recorded_schedules():
    recorded = json.loads(DIGESTS.read_text())["digests"]
    now = fingerprint()
    assert len(now) == 80
    changed = [label for label in now if now[label] != recorded.get(label)]
    assert not changed, f"{len(changed)} of 80 schedules changed: {', '.join(changed[:5])}"


def test_the_fingerprint_sees_a_one_token_change_in_one_simulation():
    """The digest is not blind: one request one token longer changes its simulation's digest."""
    a = _simulate("chunked", 8.0, 1, 300)
    from inferlab.core.specs import get_accelerator, get_model
    from inferlab.serving.simulate import simulate
    from inferlab.serving.workload import LengthDist, Workload, synthetic
    w = synthetic(8.0, n_requests=120, prompt=LengthDist("lognormal", 400, 1.0, 1, 3000),
                  output=LengthDist("lognormal", 120, 1.0, 1, 600), seed=3)
    out = w.output_tokens.copy()
    out[60] += 1
    b = simulate(Workload(w.arrival_s, w.prompt_tokens, out), get_model("llama-2-13b-book"),
                 get_accelerator("h100-sxm"), _policies()["chunked"], kv_blocks=300, step_time=AffineStepTime())
    assert _digest(a) != _digest(b)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    DIGESTS.write_text(json.dumps({"recorded_at_commit": commit, "digests": fingerprint()}, indent=1) + "\n")
    print(f"wrote {DIGESTS}")
