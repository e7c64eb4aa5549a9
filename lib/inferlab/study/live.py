"""The serving scheduler run for real: requests arrive on the wall clock, the torch decoder of
inferlab.measure.model does the work, one engine step per iteration, and each token's time is read off
the clock. The simulator (engine.py) predicts these times; this loop measures them.

Ragged ("flat") batching, as Orca and vLLM do it: a step's T tokens, from any mix of sequences
(whole prompts, prompt chunks, one decode token each), go through every linear layer as ONE
[1, T, d] matrix, so the weights are read once per step whatever the batch. Only attention is per
sequence: a chunk of q tokens after p cached ones writes its keys and values at positions p..p+q-1
of its sequence's slot and attends causally over 0..p+q-1 (query i sees keys 0..p+i), with rotary
at each token's own position. The LM head runs on one row per sequence that samples (the last
token of a finished prefill or a decode token); sampling is greedy (argmax).

KV cache: slotted, [n_slots, n_kv_heads, max_len, head_dim] per layer for K and for V, one slot
per running sequence, n_slots = max_num_seqs. Admission needs a free slot, and every slot holds
max_len >= prompt + output tokens, so an admitted request always fits: there is no preemption
(the simulator's paged pool with preemption by recompute is not reproduced; its block watermark
has no counterpart). The memory this reserves, 2 * n_layers * n_slots * max_len * kv_dim * bytes,
is checked against free memory before anything is allocated.

Scheduling: the simulator's own policy objects (serving.policies), asked the same questions as
engine.Replica asks them: each step's `plan_step`, and `enqueue` for every arrival (queue order);
every registered policy that plans step by step runs here (not static batching); a prefill of
n tokens samples one token, each decode step feeds the last sampled token and samples the next,
and a request of N output tokens finishes with its Nth. A request becomes visible once
time.perf_counter() - t0 >= its arrival; with nothing to do the loop sleeps until the next one.
Per-step counts follow the simulator's StepTimeModel arguments: tokens fed, logits sampled,
attention query-key pairs (q * p + q (q + 1) / 2 per chunk) and cached keys read (p + q).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from inferlab.core import attention
from inferlab.serving.metrics import ReplicaTrace, SimResult
from inferlab.serving.policies import POLICIES, make_policy, option_fields
from inferlab.serving.workload import Workload
from inferlab.core.specs import check_model
from inferlab.base.input_checks import DoesNotFitError, choice, nonneg_int, positive_int



def _runs_live(cls) -> bool:
    try:
        cls().check_runs_with("the live loop")
    except ValueError:
        return False
    return True


LIVE_POLICIES = tuple(name for name, cls in POLICIES.items() if _runs_live(cls))
LIVE_DTYPES = ("fp32", "bf16", "fp16")
LIVE_DEVICES = ("auto", "cpu", "cuda")
MARGIN_BYTES = 0.5e9  # activations, allocator slack and the interpreter, beside weights and KV


# -- the slotted cache and the ragged forward ------------------------------------------------------
class SlottedKVCache:
    """Per layer, K and V of shape [n_slots, n_kv_heads, max_len, head_dim], plus the rotary
    tables for positions < max_len (the model's own `rope_tables`)."""

    def __init__(self, cfg, n_slots: int, max_len: int, dtype, device):
        import torch

        from inferlab.measure.model import rope_tables
        positive_int("n_slots", n_slots)
        positive_int("max_len", max_len)
        self.n_slots, self.max_len = int(n_slots), int(max_len)
        shape = (self.n_slots, cfg.n_kv_heads, self.max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)]
        self.cos, self.sin = rope_tables(cfg.head_dim, self.max_len, device)


def kv_slots_bytes(cfg, n_slots: int, max_len: int, dtype: str) -> float:
    """K and V of every slot: 2 * n_layers * n_slots * max_len * n_kv_heads * head_dim * bytes."""
    from inferlab.base.units import bytes_per_element
    return 2.0 * cfg.n_layers * n_slots * max_len * cfg.n_kv_heads * cfg.head_dim * bytes_per_element(dtype)


@dataclass(frozen=True)
class Segment:
    """One sequence's share of a step: `tokens` (ids) fed at positions start_pos.. of `slot`;
    `sample`: the LM head runs on its last token (a finished prefill, or a decode token)."""

    slot: int
    tokens: tuple
    start_pos: int
    sample: bool = True


def ragged_forward(model, cache: SlottedKVCache, segments):
    """Logits [number of sampling segments, vocab] (in segment order) of one ragged step.

    All tokens of all segments form one [1, T, d] activation through embeddings, norms, the
    Q/K/V/O projections and the MLP; attention runs per segment against its slot: its keys and
    values are written at start_pos..start_pos+q-1 and query i attends keys 0..start_pos+i."""
    import torch
    import torch.nn.functional as F

    from inferlab.measure.model import apply_rope
    if not segments:
        raise ValueError("segments must hold at least one Segment; got none")
    cfg = model.cfg
    H, KV, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    device = cache.k[0].device
    spans, ids, pos = [], [], []
    for s in segments:
        q = len(s.tokens)
        if q == 0 or not 0 <= s.slot < cache.n_slots or s.start_pos < 0 or s.start_pos + q > cache.max_len:
            raise ValueError(f"a segment of {q} tokens at slot {s.slot}, positions from {s.start_pos}, does not "
                             f"fit the cache (allowed: 0 <= slot < {cache.n_slots}, at least 1 token, "
                             f"positions 0..{cache.max_len - 1})")
        spans.append((len(ids), q, s))
        ids.extend(s.tokens)
        pos.extend(range(s.start_pos, s.start_pos + q))
    tokens = torch.tensor([ids], dtype=torch.int64, device=device)
    positions = torch.tensor(pos, dtype=torch.int64, device=device)
    cos, sin = cache.cos[positions], cache.sin[positions]
    T = len(ids)
    masks = {}
    x = model.tok_embeddings(tokens)
    for li, layer in enumerate(model.layers):
        att = layer.attention
        h = layer.attention_norm(x)
        q_all = apply_rope(att.wq(h).view(1, T, H, D).transpose(1, 2), cos, sin)
        k_all = apply_rope(att.wk(h).view(1, T, KV, D).transpose(1, 2), cos, sin)
        v_all = att.wv(h).view(1, T, KV, D).transpose(1, 2)
        kc, vc = cache.k[li], cache.v[li]
        outs = []
        for a, q, s in spans:
            p, end = s.start_pos, s.start_pos + q
            kc[s.slot, :, p:end] = k_all[0, :, a:a + q]
            vc[s.slot, :, p:end] = v_all[0, :, a:a + q]
            mask = None
            if q > 1:  # query i (position p + i) sees keys 0..p+i: a triangle shifted by p
                mask = masks.get((q, p))
                if mask is None:
                    mask = torch.ones(q, end, dtype=torch.bool, device=device).tril(diagonal=p)
                    masks[(q, p)] = mask
            outs.append(F.scaled_dot_product_attention(
                q_all[:, :, a:a + q], kc[s.slot:s.slot + 1, :, :end], vc[s.slot:s.slot + 1, :, :end],
                attn_mask=mask, enable_gqa=KV != H))
        y = torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
        x = x + att.wo(y.transpose(1, 2).reshape(1, T, H * D))
        x = x + layer.feed_forward(layer.ffn_norm(x))
    last = [a + q - 1 for a, q, s in spans if s.sample]
    if not last:
        return x.new_zeros((0, cfg.vocab_size))
    rows = x[0, torch.tensor(last, dtype=torch.int64, device=device)]
    return model.output(model.norm(rows))


# -- results -----------------------------------------------------------------------------------------
STEP_FIELDS = ("start_s", "step_s", "tokens", "logits", "attn_pairs", "attn_kv_tokens", "n_decode",
               "n_prefill_chunks", "slots_used", "decode_kv_tokens")


@dataclass(frozen=True)
class LiveResult:
    """A live run: `result`, the same SimResult the simulator returns (times from the wall clock,
    seconds after t0; its trace counts a slot as a KV "block"; a step's time runs from its
    scheduling decision to its sampled tokens on the host); `steps`, one column per
    STEP_FIELDS entry (start and duration of each step, tokens fed, logits sampled, attention
    query-key pairs, cached keys read, decoding sequences, prefill chunks, slots in use after
    the step's admissions); `tokens`, each request's streamed token ids; the run's settings."""

    result: SimResult
    steps: dict = field(hash=False)
    tokens: tuple = field(hash=False)
    prompt_ids: tuple = field(hash=False)
    config: dict = field(hash=False)
    device: str = ""
    warmup_s: float = 0.0
    chunks: tuple = field(default=(), hash=False)  # per step: ((q new, p cached), ...) of its prefill chunks

    def to_dict(self, slo=None) -> dict:
        """JSON-able: config, device, per-request arrays (seconds, NaN as None), steps, summary."""
        from inferlab.serving.metrics import SLO
        r = self.result

        def col(x):
            return [None if not np.isfinite(v) else float(v) for v in np.asarray(x, dtype=float)]
        requests = {"arrival_s": col(r.arrival_s), "prompt_tokens": r.prompt_tokens.tolist(),
                    "output_tokens": r.output_tokens.tolist(), "first_scheduled_s": col(r.first_scheduled_s),
                    "first_token_s": col(r.first_token_s), "finish_s": col(r.finish_s),
                    "itls_s": [np.asarray(x, dtype=float).tolist() for x in r.itls_s],
                    "token_ids": [list(t) for t in self.tokens]}
        steps = {k: np.asarray(v).tolist() for k, v in self.steps.items()}
        return {"kind": "inferlab.serving.live", "config": dict(self.config), "device": self.device,
                "warmup_s": self.warmup_s, "requests": requests, "steps": steps,
                "summary": r.summary(slo or SLO())}


# -- the loop ----------------------------------------------------------------------------------------
class _Req:
    __slots__ = ("i", "arrival", "prompt", "output", "prio", "slot", "done", "generated", "tokens", "times",
                 "first_sched")

    def __init__(self, i, arrival, prompt_ids, output, prio=1):
        self.i, self.arrival, self.prompt, self.output = i, arrival, prompt_ids, output
        self.prio = prio       # priority level (workload.PRIORITY_CLASSES index; 0 most urgent)
        self.slot = -1
        self.done = 0          # prompt tokens prefilled so far
        self.generated = 0
        self.tokens, self.times = [], []
        self.first_sched = None


def live_policy(policy, max_num_seqs=None, token_budget=None, max_batched_tokens=None):
    """A policy object as it is, or one made from its name with the settings that are its options
    (None: the policy's default)."""
    if isinstance(policy, str):
        choice("policy", policy, LIVE_POLICIES)
        names = [name for name, _, _ in option_fields(POLICIES[policy])]
        given = {"max_num_seqs": max_num_seqs, "token_budget": token_budget, "max_batched_tokens": max_batched_tokens}
        policy = make_policy(policy, **{k: v for k, v in given.items() if k in names and v is not None})
    elif not hasattr(policy, "plan_step"):
        raise ValueError(f"policy must be one of {', '.join(LIVE_POLICIES)} or a serving.policies class; "
                         f"got {policy!r}")
    policy.check_runs_with("the live loop")
    return policy


def resolve_device(device: str) -> str:
    """'auto' is cuda where torch sees one, else cpu; an explicit device must be present."""
    import torch
    choice("device", device, LIVE_DEVICES)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' is not available on this machine (allowed here: auto, cpu)")
    return device


def check_live_memory(cfg, n_slots: int, max_len: int, dtype: str, device: str,
                      weights: bool = True) -> float:
    """Bytes needed (weights if `weights`, KV slots, a margin); DoesNotFitError beyond free memory."""
    from inferlab.measure.device import free_memory_bytes
    from inferlab.base.units import GB, bytes_per_element
    kv = kv_slots_bytes(cfg, n_slots, max_len, dtype)
    w = cfg.n_params * bytes_per_element(dtype) if weights else 0.0
    need = w + kv + MARGIN_BYTES
    free = free_memory_bytes(device)
    if need > free:
        raise DoesNotFitError(
            f"{cfg.name} in {dtype} with {n_slots} KV slots x {max_len} tokens needs {need / GB:.2f} GB "
            f"(weights {w / GB:.2f} GB + KV {kv / GB:.2f} GB + margin {MARGIN_BYTES / GB:.1f} GB) but "
            f"{device} has {free / GB:.2f} GB free; lower max_num_seqs (--max-num-seqs) or max_len (--max-len)")
    return need


@dataclass(frozen=True)
class LiveSettings:
    """How `run_live` serves: the policy and its limits, tokens per KV slot, the device and dtype,
    the seed, the warm-up passes and torch's CPU threads (each described in `run_live`)."""

    policy: object = "chunked"
    max_num_seqs: int = 8
    token_budget: int = 256
    max_batched_tokens: int | None = None
    max_len: int | None = None
    device: str = "auto"
    dtype: str | None = None
    seed: int = 0
    warmup: int = 2
    threads: int | None = None


def run_live(workload: Workload, model_or_cfg=None, settings: LiveSettings = LiveSettings(), *,
             on_token=None, prompt_ids=None) -> LiveResult:
    """Serve `workload` for real and return the measured LiveResult. settings: a LiveSettings.

    policy: a name of LIVE_POLICIES (made with those of max_num_seqs, token_budget and
    max_batched_tokens that are its options; max_batched_tokens None: the policy's default), or a
    serving.policies object, whose own settings then apply; static batching is simulated only.
    model_or_cfg: an inferlab.measure.model.Transformer (used as it is: its device and dtype win), or a
    ModelConfig built with random weights (measure.runner.random_model, `seed`); None: the `tiny`
    preset. Names are resolved at the edge (measure.plan.resolve_model: presets and models.toml). dtype: fp32 (default on CPU), bf16 (default on CUDA),
    fp16. max_len: tokens per KV slot, default the longest prompt + output of the workload.
    prompt_ids: optional token ids per request (else drawn from numpy's default_rng(seed)).
    on_token(i, token_id, time_s): called as each token is sampled (the stream).
    warmup: passes at the workload's shapes before t0 (first-call costs stay out of the timings).
    threads: torch's CPU threads during the run (restored after); on a shared machine one thread
    avoids waiting at every parallel region for a descheduled one.
    """
    import torch

    from inferlab.measure.model import Transformer
    policy, max_num_seqs, max_len, device = settings.policy, settings.max_num_seqs, settings.max_len, settings.device
    dtype, seed, warmup, threads = settings.dtype, settings.seed, settings.warmup, settings.threads
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a serving.Workload; got {type(workload).__name__}")
    positive_int("max_num_seqs", max_num_seqs)
    nonneg_int("seed", seed)
    nonneg_int("warmup", warmup)
    if threads is not None:
        positive_int("threads", threads)
    pol = live_policy(policy, max_num_seqs, settings.token_budget, settings.max_batched_tokens)
    n_slots = pol.max_num_seqs
    prompts = workload.prompt_tokens.tolist()
    outputs = workload.output_tokens.tolist()
    longest = max(p + o for p, o in zip(prompts, outputs))
    if max_len is None:
        max_len = longest
    positive_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"every prompt + output must fit max_len={max_len} tokens (a KV slot); "
                         f"the workload's longest is {longest}: raise max_len or shorten the requests")
    if isinstance(model_or_cfg, Transformer):
        from inferlab.measure.ceilings import dtype_name
        model = model_or_cfg.eval()
        cfg = model.cfg
        tdtype = model.output.weight.dtype
        dtype = dtype_name(tdtype)
        device = model.output.weight.device.type
        check_live_memory(cfg, n_slots, max_len, dtype, device, weights=False)
    else:
        from inferlab.measure.ceilings import torch_dtype
        from inferlab.measure.fastpath import check_fast_path
        from inferlab.measure.plan import TINY_MODEL
        from inferlab.measure.runner import random_model
        cfg = TINY_MODEL if model_or_cfg is None else check_model(model_or_cfg, "model_or_cfg")
        device = resolve_device(device)
        dtype = choice("dtype", dtype or ("fp32" if device == "cpu" else "bf16"), LIVE_DTYPES)
        check_fast_path(device, dtype, "dtype")  # a dtype with no fast product here is refused (measure.fastpath)
        check_live_memory(cfg, n_slots, max_len, dtype, device)
        model = random_model(cfg, device, dtype, seed)
        tdtype = torch_dtype(dtype)
    if prompt_ids is None:
        rng = np.random.default_rng(seed)
        prompt_ids = [tuple(rng.integers(0, cfg.vocab_size, size=p).tolist()) for p in prompts]
    else:
        prompt_ids = [tuple(int(t) for t in ids) for ids in prompt_ids]
        if len(prompt_ids) != len(prompts) or any(len(a) != p for a, p in zip(prompt_ids, prompts)):
            raise ValueError("prompt_ids must hold one sequence per request, of its prompt_tokens length")
        if any(not 0 <= t < cfg.vocab_size for ids in prompt_ids for t in ids):
            raise ValueError(f"prompt_ids must lie in 0..{cfg.vocab_size - 1} (the vocabulary)")
    cache = SlottedKVCache(cfg, n_slots, max_len, tdtype, device)
    levels = workload.priority.tolist() if workload.priority is not None else [1] * len(prompts)
    reqs = [_Req(i, a, ids, o, level) for i, (a, ids, o, level) in
            enumerate(zip(workload.arrival_s.tolist(), prompt_ids, outputs, levels))]
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        run = _LiveRun(model, cfg, cache, pol, n_slots, max_len, warmup, device, dtype, seed, on_token)
        return _serve(run, reqs, prompts, prompt_ids)
    finally:
        torch.set_num_threads(saved_threads)


@dataclass(frozen=True)
class _LiveRun:
    """What one live run serves with: the model and its config, the slotted KV cache, the policy
    (scheduler), the slots and their length, the device and dtype, the seed, the warm-up passes and
    the token stream callback."""

    model: object
    cfg: object
    cache: SlottedKVCache
    pol: object
    n_slots: int
    max_len: int
    warmup: int
    device: str
    dtype: str
    seed: int
    on_token: object = None

    def forward(self, segments):
        logits = ragged_forward(self.model, self.cache, segments)
        return logits.argmax(-1).tolist()  # .tolist() waits for the device


class _Queues:
    """The scheduler's state (what policies.plan_step reads): free slots, and the requests
    waiting, prefilling and decoding. A slot holds a whole sequence, so no decode ever evicts."""

    def __init__(self, n_slots: int, max_num_seqs: int):
        self.free_slots = list(range(n_slots - 1, -1, -1))
        self.waiting, self.prefilling, self.decoding = deque(), [], []
        self.max_num_seqs = max_num_seqs
        self.clock = 0.0

    @property
    def n_decoding(self) -> int:
        return len(self.decoding)

    @staticmethod
    def left(r) -> int:
        return len(r.prompt) - r.done

    @staticmethod
    def reserve_decode() -> bool:
        return False

    def admit(self, token_cap=None, max_seqs=None, first_chunk=None, whole_prompts=False):
        """engine.Replica._admit without blocks: a free slot (max_len tokens, the whole sequence)
        stands for the blocks."""
        t = self.clock
        cap = self.max_num_seqs if max_seqs is None else min(max_seqs, self.max_num_seqs)
        taken = 0
        while self.waiting and len(self.prefilling) + len(self.decoding) < cap:
            r = self.waiting[0]
            take = len(r.prompt) if first_chunk is None else min(first_chunk - taken, len(r.prompt))
            if whole_prompts and take < len(r.prompt):
                break
            if token_cap is not None and taken + take > token_cap and taken > 0:
                break
            if take <= 0:
                break
            self.waiting.popleft()
            r.slot = self.free_slots.pop()
            if r.first_sched is None:
                r.first_sched = t
            self.prefilling.append(r)
            taken += take


def _warm_up(run: _LiveRun, prompts) -> float:
    """Warm-up at the workload's shapes: a whole (or budget-sized) prompt, then a decode step of
    every slot beside a short chunk. Slots are rewritten from position 0 by each request. Seconds."""
    from inferlab.measure.device import synchronize
    pol, max_len = run.pol, run.max_len
    t_w = time.perf_counter()
    first = pol.largest_prefill(max(prompts))
    for _ in range(run.warmup):
        run.forward([Segment(0, (0,) * min(first, max_len), 0)])
        segs = [Segment(s, (0,), min(prompts[0], max_len - 1)) for s in range(run.n_slots)]
        run.forward(segs + [Segment(0, (0,) * min(8, max_len), 0, sample=False)])
    synchronize(run.device)
    return time.perf_counter() - t_w


def _schedule(pol, q: _Queues, t_start: float):
    """The step's work under `pol` (its plan_step, the simulator's own): (prefill chunks
    [(request, tokens)], whether the decoders step)."""
    q.clock = t_start
    plan = pol.plan_step(q)
    if plan.empty:  # cannot happen: a free slot admits, a busy one decodes
        raise RuntimeError(f"the {pol.name} scheduler found no work with {len(q.waiting)} waiting, "
                           f"{len(q.prefilling)} prefilling, {len(q.decoding)} decoding")
    return list(plan.chunks), plan.decode


def _segments(dec, chunks):
    """The step's segments, the requests that sample, its attention pairs and KV tokens read (the one
    account, `attention.pairs` and `attention.keys_read`, for the live loop's full-attention decoder)."""
    segs = [Segment(r.slot, (r.tokens[-1],), len(r.prompt) + r.generated - 1) for r in dec]
    samplers = list(dec)
    pairs = kv = 0.0
    for r in dec:   # one new token over the cached keys plus its own
        pairs += attention.pairs("full", None, 1, len(r.prompt) + r.generated - 1)
        kv += attention.keys_read("full", None, 1, len(r.prompt) + r.generated - 1)
    for r, q in chunks:
        p = r.done
        last = p + q == len(r.prompt)
        segs.append(Segment(r.slot, r.prompt[p:p + q], p, sample=last))
        if last:
            samplers.append(r)
        pairs += attention.pairs("full", None, q, p)
        kv += attention.keys_read("full", None, q, p)
    return segs, samplers, pairs, kv


def _advance(run: _LiveRun, q: _Queues, dec, chunks, samplers, sampled, t_end: float):
    """After the step: prompts move on, samplers get their token, finished requests free their slot."""
    for r, n in chunks:
        r.done += n
    for r, tok in zip(samplers, sampled):
        r.tokens.append(int(tok))
        r.times.append(t_end)
        r.generated += 1
        if run.on_token is not None:
            run.on_token(r.i, int(tok), t_end)
    for r in dec:
        if r.generated >= r.output:
            q.decoding.remove(r)
            q.free_slots.append(r.slot)
    still = []
    for r in q.prefilling:
        if r.done < len(r.prompt):
            still.append(r)
        elif r.generated >= r.output:
            q.free_slots.append(r.slot)
        else:
            q.decoding.append(r)
    q.prefilling[:] = still


def _serve(run: _LiveRun, reqs, prompts, prompt_ids) -> LiveResult:
    import torch

    from inferlab.measure.device import synchronize
    pol, n_slots = run.pol, run.n_slots
    with torch.inference_mode():
        warmup_s = _warm_up(run, prompts)
        q = _Queues(n_slots, pol.max_num_seqs)
        pending = deque(reqs)
        log = {k: [] for k in STEP_FIELDS}
        chunk_log = []
        t0 = time.perf_counter()
        while pending or q.waiting or q.prefilling or q.decoding:
            now = time.perf_counter() - t0
            while pending and pending[0].arrival <= now:
                pol.enqueue(q.waiting, pending.popleft(), False)
            if not (q.waiting or q.prefilling or q.decoding):
                time.sleep(max(0.0, pending[0].arrival - (time.perf_counter() - t0)))
                continue
            t_start = now
            chunks, do_decode = _schedule(pol, q, t_start)
            dec = list(q.decoding) if do_decode else []
            segs, samplers, pairs, kv = _segments(dec, chunks)
            sampled = run.forward(segs)
            synchronize(run.device)
            t_end = time.perf_counter() - t0
            for k, v in zip(STEP_FIELDS, (t_start, t_end - t_start, sum(len(s.tokens) for s in segs),
                                          len(samplers), pairs, kv, len(dec), len(chunks),
                                          n_slots - len(q.free_slots),
                                          sum(len(r.prompt) + r.generated for r in dec))):
                log[k].append(v)
            chunk_log.append(tuple((n, r.done) for r, n in chunks))
            _advance(run, q, dec, chunks, samplers, sampled, t_end)

    steps = {k: np.asarray(v) for k, v in log.items()}
    result = _sim_result(reqs, steps, n_slots, f"live: {run.cfg.name} {run.dtype} on {run.device}, {pol}, "
                                               f"{n_slots} slots x {run.max_len} tokens")
    options = {name: getattr(pol, name) for name, _, _ in option_fields(type(pol))}
    config = {"model": run.cfg.name, "dtype": run.dtype, "device": run.device, "policy": pol.name,
              "max_num_seqs": pol.max_num_seqs, "max_len": int(run.max_len), "seed": int(run.seed),
              "threads": torch.get_num_threads() if run.device == "cpu" else None,
              "token_budget": options.get("token_budget"), "max_batched_tokens": options.get("max_batched_tokens")}
    return LiveResult(result, steps, tuple(tuple(r.tokens) for r in reqs), tuple(prompt_ids),
                      config, _device_name(run.device), warmup_s, tuple(chunk_log))


def _device_name(device: str) -> str:
    import torch
    if device == "cuda":
        return torch.cuda.get_device_name()
    from inferlab.measure.device import cpu_name
    n = torch.get_num_threads()
    return f"{cpu_name()} ({n} thread{'' if n == 1 else 's'})"


def _sim_result(reqs, steps, n_slots, description) -> SimResult:
    def col(values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    trace = ReplicaTrace(steps["start_s"], steps["step_s"], steps["n_decode"] + steps["n_prefill_chunks"],
                         steps["tokens"], steps["slots_used"], n_slots)
    return SimResult(
        arrival_s=np.array([r.arrival for r in reqs], dtype=float),
        prompt_tokens=np.array([len(r.prompt) for r in reqs], dtype=np.int64),
        output_tokens=np.array([r.output for r in reqs], dtype=np.int64),
        first_scheduled_s=col(r.first_sched for r in reqs),
        first_token_s=col(r.times[0] if r.times else None for r in reqs),
        finish_s=col(r.times[-1] if len(r.times) == r.output else None for r in reqs),
        preemptions=np.zeros(len(reqs), dtype=np.int64), replica=np.zeros(len(reqs), dtype=np.int64),
        itls_s=[np.diff(np.asarray(r.times, dtype=float)) for r in reqs], traces=(trace,),
        description=description)
