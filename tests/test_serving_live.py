"""The live serving loop (serving/live.py): its ragged forward against Transformer.forward, its
streamed tokens against plain greedy generation, its schedule against the simulator's, and
`inferlab serve --live`. Tiny model, fp32, workloads of a second or two."""
import json

import numpy as np
import pytest
import torch

from inferlab.cli import main
from inferlab.measure.plan import TINY_MODEL
from inferlab.measure.model import build_model
from inferlab.serving import Workload, simulate
from inferlab.study.live import LiveSettings, Segment, SlottedKVCache, ragged_forward, run_live
from inferlab.serving.policies import ChunkedPrefill, ContinuousBatching, PrefillFirst
from inferlab.core.specs import get_accelerator
from inferlab.base.input_checks import DoesNotFitError

H100_SXM = get_accelerator("h100-sxm")

ATOL = 1e-4  # fp32; logits are O(1) (|logit| up to ~2 for this model), reordered sums differ by ~1e-6


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: on a shared 2-core machine two threads wait at every parallel region for a
    descheduled one (a tiny step then takes ~10 ms instead of ~0.5 ms). Restored after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def model():
    return build_model(TINY_MODEL, seed=3).eval()


def ids(n, seed):
    return tuple(np.random.default_rng(seed).integers(0, TINY_MODEL.vocab_size, size=n).tolist())


def drop_cache(model):
    """Back to a plain causal model (no KV cache, no rotary tables): the fixture is shared."""
    for layer in model.layers:
        layer.attention.kv_cache = None
    model.rope_cos = model.rope_sin = None


def full_logits(model, tokens):
    """Last-position logits of a plain causal pass over the whole sequence (no cache)."""
    with torch.inference_mode():
        return model(torch.tensor([list(tokens)]), all_logits=False)[0, -1]


def test_ragged_forward_equals_transformer_forward_prefill_then_decode(model):
    prompt, nxt = ids(11, 0), ids(4, 1)
    model.setup_cache(1, 32)
    cache = SlottedKVCache(TINY_MODEL, 3, 32, torch.float32, "cpu")
    with torch.inference_mode():
        ref = model(torch.tensor([list(prompt)]), 0, all_logits=False)[0, -1]
        got = ragged_forward(model, cache, [Segment(2, prompt, 0)])  # slot 2: not the first slot
        assert got.shape == (1, TINY_MODEL.vocab_size)
        torch.testing.assert_close(got[0], ref, atol=ATOL, rtol=0)
        for j, tok in enumerate(nxt):  # decode steps at positions 11, 12, 13, 14
            ref = model(torch.tensor([[tok]]), 11 + j, all_logits=False)[0, -1]
            got = ragged_forward(model, cache, [Segment(2, (tok,), 11 + j)])[0]
            torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
    drop_cache(model)


def test_prefill_in_chunks_equals_one_prefill(model):
    # chunks of 5, 5, 3 after 0, 5, 10 cached tokens: query i of a chunk sees keys 0..p+i
    prompt = ids(13, 2)
    cache = SlottedKVCache(TINY_MODEL, 1, 16, torch.float32, "cpu")
    with torch.inference_mode():
        a = ragged_forward(model, cache, [Segment(0, prompt[:5], 0, sample=False)])
        assert a.shape == (0, TINY_MODEL.vocab_size)  # no sampler, no LM head row
        ragged_forward(model, cache, [Segment(0, prompt[5:10], 5, sample=False)])
        got = ragged_forward(model, cache, [Segment(0, prompt[10:], 10)])[0]
    torch.testing.assert_close(got, full_logits(model, prompt), atol=ATOL, rtol=0)


def test_mixed_step_gives_each_sequence_its_own_logits(model):
    # B (7 cached) and C (13 cached) decode while A prefills 10 tokens and D a non-sampling chunk,
    # all in ONE step; each must equal the sequence run alone (a full causal pass).
    a, b, c, d = ids(10, 3), ids(8, 4), ids(14, 5), ids(6, 6)
    cache = SlottedKVCache(TINY_MODEL, 4, 32, torch.float32, "cpu")
    with torch.inference_mode():
        ragged_forward(model, cache, [Segment(1, b[:7], 0, sample=False)])
        ragged_forward(model, cache, [Segment(3, c[:13], 0, sample=False)])
        ragged_forward(model, cache, [Segment(2, d[:3], 0, sample=False)])
        out = ragged_forward(model, cache, [Segment(1, b[7:], 7), Segment(0, a, 0),
                                            Segment(2, d[3:], 3, sample=False), Segment(3, c[13:], 13)])
        assert out.shape == (3, TINY_MODEL.vocab_size)  # B, A, C sample; D does not
        for row, seq in zip(out, (b, a, c)):
            torch.testing.assert_close(row, full_logits(model, seq), atol=ATOL, rtol=0)
        # D's keys went to its slot at 3..5: its next token sees all six
        nxt = ragged_forward(model, cache, [Segment(2, (7,), 6)])[0]
    torch.testing.assert_close(nxt, full_logits(model, d + (7,)), atol=ATOL, rtol=0)


def test_grouped_query_attention_mixed_step():
    # 4 query heads share 2 KV heads (Llama-2 70B's layout, scaled down): a mixed step still
    # reproduces each sequence's full causal pass
    from dataclasses import replace
    cfg = replace(TINY_MODEL, name="tiny-gqa", n_kv_heads=2)
    gqa = build_model(cfg, seed=4).eval()
    a, b = ids(9, 7), ids(6, 8)
    cache = SlottedKVCache(cfg, 2, 16, torch.float32, "cpu")
    with torch.inference_mode():
        ragged_forward(gqa, cache, [Segment(1, b[:5], 0, sample=False)])
        out = ragged_forward(gqa, cache, [Segment(0, a, 0), Segment(1, b[5:], 5)])
    for row, seq in zip(out, (a, b)):
        torch.testing.assert_close(row, full_logits(gqa, seq), atol=ATOL, rtol=0)


def greedy(model, prompt, n):
    """Plain sequential greedy generation with Transformer.forward and its own KV cache."""
    model.setup_cache(1, len(prompt) + n)
    out = []
    with torch.inference_mode():
        logits = model(torch.tensor([list(prompt)]), 0, all_logits=False)
        for j in range(n):
            out.append(int(logits[0, -1].argmax()))
            if j < n - 1:
                logits = model(torch.tensor([[out[-1]]]), len(prompt) + j, all_logits=False)
    drop_cache(model)
    return out


@pytest.mark.parametrize("policy", ["chunked", "continuous", "prefill-first"])
def test_streamed_tokens_equal_sequential_greedy_generation(model, policy):
    # 4 requests within 0.3 s, 2 slots, budget 8: prompts are chunked and decodes share steps
    w = Workload(np.array([0.0, 0.05, 0.1, 0.3]), np.array([12, 5, 9, 3]), np.array([6, 4, 1, 5]))
    stream = []
    live = run_live(w, model, LiveSettings(policy=policy, max_num_seqs=2, token_budget=8, warmup=1),
                    on_token=lambda i, tok, t: stream.append((i, tok, t)))
    for i in range(len(w)):
        want = greedy(model, live.prompt_ids[i], int(w.output_tokens[i]))
        assert list(live.tokens[i]) == want
        assert [tok for j, tok, _ in stream if j == i] == want  # the stream carries the same tokens
    times = [t for _, _, t in stream]
    assert times == sorted(times)
    assert len(set(map(tuple, live.prompt_ids))) == 4  # distinct random prompts


def test_chunked_schedule_hand_derived():
    # token_budget 8, max_num_seqs 2; (prompt, output) = (5, 3), (6, 2), (3, 1), all at t = 0.
    # step 1: admit r0 (5) and r1 (first 3 of 6): tokens 8, logits 1 (r0's prefill ends),
    #         pairs 5*6/2 + 3*4/2 = 15 + 6 = 21, keys read 5 + 3 = 8.
    # step 2: r0 decodes (cache 5 -> attends 6); r1 chunk of 3 after 3: pairs 6 + 3*3 + 3*4/2 = 21,
    #         tokens 1 + 3 = 4, logits 2, keys 6 + 6 = 12; both slots busy, r2 waits.
    # step 3: r0, r1 decode at caches 6 and 6: tokens 2, logits 2, pairs = keys = 7 + 7 = 14;
    #         r0 has its 3rd token, r1 its 2nd: both finish.
    # step 4: r2 prefills 3: tokens 3, logits 1, pairs 3*4/2 = 6, keys 3; output 1: done.
    w = Workload(np.zeros(3), np.array([5, 6, 3]), np.array([3, 2, 1]))
    live = run_live(w, TINY_MODEL, LiveSettings(policy=ChunkedPrefill(token_budget=8, max_num_seqs=2), warmup=0))
    s = live.steps
    rows = list(zip(s["tokens"].tolist(), s["logits"].tolist(), s["attn_pairs"].tolist(),
                    s["attn_kv_tokens"].tolist()))
    assert rows == [(8, 1, 21, 8), (4, 2, 21, 12), (2, 2, 14, 14), (3, 1, 6, 3)]
    assert s["n_decode"].tolist() == [0, 1, 2, 0] and s["n_prefill_chunks"].tolist() == [2, 1, 0, 1]
    assert [len(t) for t in live.tokens] == [3, 2, 1]
    r = live.result
    assert r.completed.all() and [len(x) for x in r.itls_s] == [2, 1, 0]
    # r2 waits for a slot: scheduled at step 4's start, its only token at step 4's end
    assert r.first_scheduled_s[2] == s["start_s"][3]
    assert r.first_token_s[2] == r.finish_s[2] == s["start_s"][3] + s["step_s"][3]


class Recorder:
    """A step-time model that records what the simulator asks of each step (and takes 1 ms)."""

    def __init__(self):
        self.calls = []

    def step_time_s(self, step, t_s):
        self.calls.append((int(step.tokens), int(step.sampled), float(step.attn_pairs), float(step.attn_kv_tokens)))
        return 1e-3


@pytest.mark.parametrize("policy", [PrefillFirst(max_num_seqs=3, max_batched_tokens=20),
                                    PrefillFirst(max_num_seqs=3, max_batched_tokens=6),  # 7 > 6: alone
                                    ContinuousBatching(max_num_seqs=3),
                                    ChunkedPrefill(token_budget=10, max_num_seqs=3)])
def test_live_steps_equal_the_simulators_on_a_burst(policy):
    # All arrive at t = 0, so neither schedule depends on step times: every step's work
    # (tokens, logits, attention pairs, keys read) and batch must be the simulator's, step by step.
    w = Workload(np.zeros(6), np.array([7, 3, 12, 5, 9, 2]), np.array([4, 6, 2, 5, 1, 3]))
    rec = Recorder()
    sim = simulate(w, TINY_MODEL, H100_SXM, policy, kv_blocks=10_000, step_time=rec)
    live = run_live(w, TINY_MODEL, LiveSettings(policy=policy, warmup=0))
    s = live.steps
    got = list(zip(s["tokens"].tolist(), s["logits"].tolist(), s["attn_pairs"].tolist(),
                   s["attn_kv_tokens"].tolist()))
    assert got == rec.calls
    assert (s["n_decode"] + s["n_prefill_chunks"]).tolist() == sim.traces[0].batch.tolist()
    assert [len(t) for t in live.tokens] == w.output_tokens.tolist()
    assert [len(x) for x in live.result.itls_s] == [len(x) for x in sim.itls_s]


def test_light_load_token_accounting_and_fifo_order_match_the_simulator():
    # 5 requests/s for 1.5 s, 8 + 4 tokens each: live and simulated serve the same requests in the
    # same order (first tokens in arrival order), each with its 4 tokens and 3 ITLs.
    from inferlab.serving.workload import fixed, synthetic
    w = synthetic(5.0, duration_s=1.5, prompt=fixed(8), output=fixed(4), seed=1)
    live = run_live(w, TINY_MODEL, LiveSettings(policy="chunked", max_num_seqs=4, token_budget=16, warmup=1))
    sim = simulate(w, TINY_MODEL, H100_SXM, ChunkedPrefill(token_budget=16, max_num_seqs=4),
                   kv_blocks=10_000, step_time=Recorder())
    r = live.result
    assert r.completed.all() and len(r.arrival_s) == len(w) >= 3
    assert [len(t) for t in live.tokens] == [4] * len(w)
    assert [len(x) for x in r.itls_s] == [len(x) for x in sim.itls_s] == [3] * len(w)
    assert np.argsort(r.first_token_s, kind="stable").tolist() == \
        np.argsort(sim.first_token_s, kind="stable").tolist() == list(range(len(w)))
    assert np.all(r.first_scheduled_s >= r.arrival_s)  # nobody is served before it arrives
    assert np.all(r.first_token_s > r.first_scheduled_s) and np.all(r.finish_s >= r.first_token_s)
    s = r.summary()
    assert s["completed"] == len(w) and s["ttft_s"]["p50"] > 0 and s["itl_s"]["p50"] > 0


def test_bad_arguments_are_named():
    w = Workload(np.zeros(1), np.array([30]), np.array([5]))
    with pytest.raises(ValueError, match=r"max_len=20.*longest is 35"):
        run_live(w, TINY_MODEL, LiveSettings(max_len=20, warmup=0))
    with pytest.raises(ValueError, match="policy.*static"):
        run_live(w, TINY_MODEL, LiveSettings(policy="static", warmup=0))
    with pytest.raises(DoesNotFitError, match="KV slots"):
        run_live(w, TINY_MODEL, LiveSettings(policy="continuous", max_num_seqs=10**6, max_len=10**6, warmup=0))
    cache = SlottedKVCache(TINY_MODEL, 1, 8, torch.float32, "cpu")
    with pytest.raises(ValueError, match="positions 0..7"):
        ragged_forward(build_model(TINY_MODEL), cache, [Segment(0, (1, 2, 3), 6)])


# -- CLI ---------------------------------------------------------------------------------------------
def test_serve_live_prints_the_summary_and_records_json(capsys, tmp_path):
    out = tmp_path / "run.json"
    assert main(["serve", "--live", "--model", "tiny", "--rate", "4", "--duration", "1", "--prompt", "8",
                 "--output", "3", "--cv", "0", "--threads", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "served live" in text and "tiny fp32" in text
    for word in ("TTFT", "ITL", "TPOT", "E2E", "queueing", "throughput"):
        assert word in text
    rec = json.loads(out.read_text())
    # cv 0 at 4/s: arrivals every 0.25 s, before 1 s: at 0.25, 0.5, 0.75
    assert rec["requests"]["arrival_s"] == pytest.approx([0.25, 0.5, 0.75])
    assert [len(t) for t in rec["requests"]["token_ids"]] == [3, 3, 3]
    assert rec["config"]["model"] == "tiny" and rec["config"]["max_len"] == 11  # 8 + 3
    assert rec["config"]["threads"] == 1
    assert rec["summary"]["completed"] == 3 and len(rec["steps"]["tokens"]) >= 3


@pytest.mark.parametrize("argv, words", [
    (["--rate", "0"], ["--rate", "0", "> 0"]),
    (["--gpu", "a100"], ["--gpu", "simulator"]),
    (["--kv-blocks", "100"], ["--kv-blocks", "simulator"]),
    (["--policy", "static"], ["--policy", "static", "chunked"]),
    (["--prompt", "30", "--output", "5", "--max-len", "20"], ["--max-len=20", "35"]),
    (["--dtype", "fp8"], ["--dtype", "fp8", "fp32"]),
    (["--device", "tpu"], ["--device", "tpu", "cpu"]),
    (["--policy", "continuous", "--max-num-seqs", "1000000", "--max-len", "1000000"],
     ["--max-num-seqs", "--max-len", "GB"]),
    (["--token-budget", "4"], ["--token-budget", "4", "--max-num-seqs"]),
    (["--threads", "0"], ["--threads", "0", ">= 1"]),
])
def test_serve_live_bad_input_is_one_line_naming_the_parameter(capsys, argv, words):
    assert main(["serve", "--live", "--model", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_serve_live_stream_prints_every_token_in_time_order(capsys):
    assert main(["serve", "--live", "--model", "tiny", "--rate", "4", "--duration", "1", "--prompt", "8",
                 "--output", "3", "--cv", "0", "--threads", "1", "--stream"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if " request " in x]
    assert len(lines) == 9  # 3 requests x 3 tokens
    times = [float(x.split()[0]) for x in lines]
    assert times == sorted(times) and times[0] >= 0.25  # the first request arrives at 0.25 s
    for i in range(3):
        assert [x.split("token")[1].split("of")[0].strip() for x in lines if f"request    {i} " in x] == \
            ["1", "2", "3"]


def test_live_only_options_are_refused_by_the_simulator(capsys):
    assert main(["serve", "--out", "x.json"]) == 2
    assert "--out" in capsys.readouterr().err
