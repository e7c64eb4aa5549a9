"""The no-eviction policy (serving.policies.NoEviction, `--policy no-evict`): a request is admitted only
when the blocks of its whole sequence (prompt + maximum output) are free, so nothing is preempted.
Schedules worked by hand on a 1-second step (tests/one_second.py)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from inferlab.serving.policies import ChunkedPrefill, NoEviction, make_policy
from inferlab.serving.workload import Workload

sys.path.insert(0, str(Path(__file__).parent))
from one_second import run_by_hand  # noqa: E402

pytestmark = pytest.mark.simulator

# Two requests at t = 0, A then B, each 8 prompt and 8 output tokens; blocks of 4 tokens, a pool of
# 6 blocks (24 tokens), token budget 64, no watermark. A whole sequence is 8 + 8 = 16 tokens = 4 blocks.
TWO = Workload(np.array([0.0, 0.0]), np.array([8, 8]), np.array([8, 8]))


def test_vllm_style_admission_preempts_where_no_eviction_queues():
    # Chunked prefill admits on the prompt's blocks: A and B take 2 blocks each (free 2) and prefill
    # together in [0,1) (first tokens at t = 1). The first decode step [1,2) writes each one's 9th
    # key: a 3rd block each (free 0). At decode step 4, [5,6), each would write its 13th key and
    # needs a 4th block: none is free, so B (the latest admitted) is evicted after 4 decode steps
    # (it has 1 + 4 = 5 tokens) and its 3 blocks freed; A takes one (free 2). B's recompute is
    # 8 + 5 = 13 tokens = 4 blocks, more than the 2 free, so it waits until A's 8th token at
    # t = 8 (A decodes [1,8): 7 steps after its first token) frees A's 4 blocks. B then prefills
    # its 13 tokens in [8,9) (its 6th token) and decodes 2 more, [9,10) and [10,11): done at 11.
    chunked = run_by_hand(TWO, ChunkedPrefill(64, 4), kv_blocks=6, block_tokens=4)
    np.testing.assert_array_equal(chunked.preemptions, [0, 1])
    np.testing.assert_allclose(chunked.first_token_s, [1.0, 1.0])
    np.testing.assert_allclose(chunked.finish_s, [8.0, 11.0])

    # No eviction admits A with its whole 4 blocks (free 2); B's 4 blocks do not fit, so B waits
    # in the queue while A runs: A prefills [0,1) and decodes 7 steps, done at t = 8. B is then
    # admitted, prefills its 8 tokens in [8,9) (first token at 9) and decodes 7 steps: done at 16.
    # Nothing was preempted and nothing recomputed: tokens fed are the prompts 8 + 8 and 7 + 7
    # decode tokens, 30, against chunked prefill's 8 + 8 + 13 (B's recompute) prompt tokens and
    # 7 (A) + 4 + 2 (B) decode tokens, 42.
    no_evict = run_by_hand(TWO, NoEviction(64, 4), kv_blocks=6, block_tokens=4)
    np.testing.assert_array_equal(no_evict.preemptions, [0, 0])
    np.testing.assert_allclose(no_evict.first_token_s, [1.0, 9.0])
    np.testing.assert_allclose(no_evict.finish_s, [8.0, 16.0])
    assert no_evict.traces[0].tokens.sum() == 30 and chunked.traces[0].tokens.sum() == 42
    assert no_evict.traces[0].kv_blocks_used[0] == 4   # A's whole sequence (4 blocks) reserved at once


def test_requests_that_fit_together_run_together():
    # A pool of 8 blocks holds both whole sequences (4 + 4): both are admitted at t = 0, prefill in
    # [0,1) and decode [1,8) side by side, done at 8, as chunked prefill does with room to spare.
    r = run_by_hand(TWO, NoEviction(64, 4), kv_blocks=8, block_tokens=4)
    np.testing.assert_allclose(r.first_token_s, [1.0, 1.0])
    np.testing.assert_allclose(r.finish_s, [8.0, 8.0])


def test_a_request_whose_whole_sequence_never_fits_is_rejected_not_stalled():
    # 8 + 20 = 28 tokens = 7 blocks of 4 > a pool of 6: rejected on arrival (as every policy does).
    w = Workload(np.array([0.0]), np.array([8]), np.array([20]))
    r = run_by_hand(w, NoEviction(64, 4), kv_blocks=6, block_tokens=4)
    assert not r.completed[0]


def test_no_eviction_never_preempts_under_load_where_chunked_prefill_does():
    # The fingerprint's workload (120 requests, lognormal prompts of mean 400 and outputs of mean
    # 120) at 40 requests/s on a 300-block pool: chunked prefill preempts; no-evict must not.
    from test_serving_fingerprint import AffineStepTime
    from inferlab.core.specs import get_accelerator, get_model
    from inferlab.serving.simulate import simulate
    from inferlab.serving.workload import LengthDist, synthetic
    w = synthetic(40.0, n_requests=120, prompt=LengthDist("lognormal", 400, 1.0, 1, 3000),
                  output=LengthDist("lognormal", 120, 1.0, 1, 600), seed=3)
    runs = {p.name: simulate(w, get_model("llama-2-13b-book"), get_accelerator("h100-sxm"), p, kv_blocks=300,
                             step_time=AffineStepTime()) for p in (ChunkedPrefill(), NoEviction())}
    assert runs["chunked"].preemptions.sum() > 0
    assert runs["no-evict"].preemptions.sum() == 0
    assert runs["no-evict"].completed.all()


def test_no_eviction_is_registered_by_name_with_chunked_prefills_options():
    p = make_policy("no-evict", token_budget=256, max_num_seqs=16)
    assert p == NoEviction(256, 16)
    with pytest.raises(ValueError, match="token_budget must be >= max_num_seqs=16"):
        make_policy("no-evict", token_budget=8, max_num_seqs=16)


def test_serve_runs_the_no_eviction_policy(capsys):
    from inferlab.cli import main
    assert main(["serve", "--policy", "no-evict", "--rate", "5", "--duration", "5", "--token-budget", "256",
                 "--max-num-seqs", "32"]) == 0
    out = capsys.readouterr().out
    assert "policy NoEviction(token_budget=256, max_num_seqs=32)" in out
