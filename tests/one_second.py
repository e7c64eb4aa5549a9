"""Schedules worked by hand: a step-time model in which every step takes 1 s, so that the schedule
alone sets the times, and the simulator run on it (the tiny model, no admission watermark)."""
from inferlab.measure.plan import TINY_MODEL
from inferlab.serving.simulate import simulate
from inferlab.core.specs import get_accelerator


class OneSecond:
    """Every step takes 1 s: the schedule alone decides the times."""

    def step_time_s(self, step, t_s):
        return 1.0


def run_by_hand(workload, policy, kv_blocks=64, block_tokens=16):
    """`simulate` of `workload` under `policy` on one replica of `kv_blocks` blocks of `block_tokens`, every
    step 1 s."""
    return simulate(workload, TINY_MODEL, get_accelerator("h100-sxm"), policy, kv_blocks=kv_blocks,
                    block_tokens=block_tokens, watermark=0.0, step_time=OneSecond())
