"""A fingerprint of 80 simulations: every scheduling policy (5), two loads, one and two replicas, the
KV pool that fits and a short one (64 blocks), prompts fixed and lognormal. Prints one SHA-256 over
every request's outcome times (their float64 bytes): a change that must not move any number (a
refactoring) leaves it unchanged.

    python benchmarks/sim_fingerprint.py        # run on two commits and compare the line printed
"""
import hashlib

import numpy as np

from inferlab.core.specs import get_accelerator, get_model
from inferlab.serving.policies import POLICY_NAMES, make_policy
from inferlab.serving.simulate import simulate
from inferlab.serving.workload import LengthDist, synthetic


def fingerprint() -> tuple[int, str]:
    model, acc = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
    h, n = hashlib.sha256(), 0
    for name in POLICY_NAMES:
        for rate in (4.0, 24.0):
            for replicas in (1, 2):
                for kv_blocks in (None, 64):
                    for prompt in (LengthDist("fixed", 512), LengthDist("lognormal", 900, 1.0, 16, 4000)):
                        wl = synthetic(rate, n_requests=60, prompt=prompt, output=LengthDist("fixed", 64), seed=7)
                        r = simulate(wl, model, acc, make_policy(name), replicas=replicas, kv_blocks=kv_blocks)
                        for a in (r.first_scheduled_s, r.first_token_s, r.finish_s, r.preemptions, r.replica):
                            h.update(np.ascontiguousarray(a, dtype=float).tobytes())
                        for itl in r.itls_s:
                            h.update(np.ascontiguousarray(itl, dtype=float).tobytes())
                        n += 1
    return n, h.hexdigest()


if __name__ == "__main__":
    n, digest = fingerprint()
    print(f"{n} simulations: {digest}")
