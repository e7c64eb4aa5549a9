"""Hugging Face transformers' continuous batching, served live on the wall clock (read from and
pinned to transformers 5.24.0: generation/continuous_batching/{continuous_api,scheduler,cache}.py).

The model: a `LlamaForCausalLM` built from a LlamaConfig equal to an inferlab ModelConfig (layers,
width, heads, KV heads, head size, MLP width, vocabulary; SwiGLU, RMSNorm, rotary), random weights
(transformers' own initialisation, seeded), in the run's dtype, attention 'sdpa'. Nothing is
downloaded and no tokenizer is used: prompts are token ids.

The engine: `model.init_continuous_batching(...)`, a `ContinuousBatchingManager` whose background
thread runs the loop prepare_next_batch (scheduling) -> forward -> update_batch (sampling, token
timestamps). Its configuration, all set here, nothing inferred from free memory:
  - scheduler 'fifo' (decoding requests first, then partly prefilled, then waiting; prompts split
    at the token budget: serving.policies.TransformersFIFO models it);
  - max_batch_tokens (tokens per step) and max_requests_per_batch (requests per step);
  - page_size tokens per KV page, num_blocks pages: sized to hold every running request's prompt
    + output twice over, so the scheduler's safety margin (no new prefill under 15 % free pages)
    and its offloading never act;
  - greedy sampling, eos_token_id = -1 (never stops early): a request of N output tokens ends with
    its Nth; no prefix sharing (block sharing off), synchronous batching, no CUDA graphs, no compile,
    no switch to flash attention.
On CPU the 'sdpa' path runs ONE scaled_dot_product_attention per layer over the whole step: the
T queries of all its requests against T + K keys (K read from the paged cache through an index),
with a block mask keeping each request to its own keys (transformers/integrations/sdpa_attention.py).

Times: each request is submitted (add_request: a put on the engine's input queue) when
time.perf_counter() - t0 reaches its arrival; requests already due are put back to back. The engine
drains that queue at the start of every step (prepare_next_batch), so a request submitted while a
step runs is scheduled in the next one, as the simulator admits a request at the first step that
starts after its arrival. (Never inside `manager.pause()`: the loop parks for a pause only after it
has drained the queue, so a burst submitted in a pause missed the next step and joined one later,
a whole step behind the simulator: a replay diverged there.)
its tokens' times are the engine's own timestamps (RequestState.record_timestamps: perf_counter
when update_batch appends the token), minus t0. Each step is logged by wrapping the batch
processor's prepare_next_batch and update_batch: start before scheduling, end after the tokens are
appended, and its requests' (query tokens, cached tokens) from the scheduled FutureRequestStates.

The host-speed probe (`probe=`, a measure.probe.LinearProbe; optional): run in the engine's own
thread at every step, serially, INSIDE the logged step window (after prepare_next_batch has picked
the batch, before the forward), so its cost lands alike in calibrations and live runs and the fitted
step time absorbs it; each call's (start since t0, seconds) is logged beside the step
(`LiveResult.config["probe"]`: the log, its summary and its share of the steps' time).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from inferlab.study.live import STEP_FIELDS, LiveResult
from inferlab.serving.metrics import ReplicaTrace, SimResult
from inferlab.serving.workload import Workload
from inferlab.core.specs import check_model
from inferlab.base.input_checks import choice, nonneg_int, positive_int

DTYPES = ("fp32", "bf16")
PINNED = "5.24.0"


def require_transformers():
    """The transformers module, or an ImportError saying how to install the pinned version."""
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - the extra is installed in the project's venv
        raise ImportError(f"engine 'transformers' needs transformers=={PINNED}: pip install -e '.[engines]'") from e
    if transformers.__version__ != PINNED:
        raise ImportError(f"engine 'transformers' was read from and pinned to transformers=={PINNED}; "
                          f"found {transformers.__version__}: pip install -e '.[engines]'")
    return transformers


def llama_config(cfg, dtype: str = "bf16"):
    """A transformers LlamaConfig equal in dimensions to the ModelConfig `cfg` (a gated-MLP,
    untied Llama layout), attention 'sdpa'."""
    require_transformers()
    from transformers import LlamaConfig
    cfg = check_model(cfg, "cfg")
    choice("dtype", dtype, DTYPES)
    if not cfg.gated_mlp:
        raise ValueError(f"model {cfg.name} has no gated MLP; the transformers engine runs Llama layouts only")
    return LlamaConfig(hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
                       num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
                       head_dim=cfg.head_dim, vocab_size=cfg.vocab_size, tie_word_embeddings=bool(cfg.tied_embeddings),
                       max_position_embeddings=4096, attn_implementation="sdpa", eos_token_id=None,
                       bos_token_id=None, pad_token_id=None)


def build_model(cfg, dtype: str = "bf16", seed: int = 0):
    """LlamaForCausalLM of `cfg`'s dimensions, random weights (torch.manual_seed(seed)), in `dtype`."""
    import torch
    require_transformers()
    from transformers import LlamaForCausalLM
    nonneg_int("seed", seed)
    lc = llama_config(cfg, dtype)
    torch.manual_seed(seed)
    from inferlab.measure.ceilings import torch_dtype
    model = LlamaForCausalLM(lc).to(torch_dtype(dtype, allowed=DTYPES)).eval()
    return model


class _Steps:
    """The step log, filled from the engine's thread (appends only; read after the run)."""

    def __init__(self):
        self.rows, self.chunks = [], []
        self.probe_start, self.probe_s = [], []
        self.t0 = None

    def clear(self):
        for x in (self.rows, self.chunks, self.probe_start, self.probe_s):
            x.clear()


def _instrument(manager, log: _Steps, probe=None):
    """Wrap the batch processor the manager creates: time each step and record its requests; with a
    `probe` (a callable returning its own seconds), run it once per step inside the step's window."""
    create = manager._create_batch_processor

    def create_logged():
        bp = create()
        prepare, update = bp.prepare_next_batch, bp.update_batch
        pending = {}

        def prepare_logged():
            t = time.perf_counter()
            ok = prepare()
            if ok:
                if probe is not None:  # logged with its step's row, in update_logged
                    t_p = time.perf_counter()
                    pending["probe"] = (t_p, probe())
                pending["start"] = t
                reqs = []
                for fs in bp.inputs_and_outputs.requests_in_batch:
                    st = fs.state
                    q = int(fs.query_length)
                    p = int(st.position_offset) - q
                    reqs.append((q, p, p >= len(st.initial_tokens), bool(fs.has_new_token)))
                pending["reqs"] = reqs
            return ok

        def update_logged():
            update()
            t_end = time.perf_counter()
            reqs = pending.pop("reqs", [])
            t_start = pending.pop("start", t_end)
            dec = [(q, p) for q, p, is_dec, _ in reqs if is_dec]
            chunks = tuple((q, p) for q, p, is_dec, _ in reqs if not is_dec)
            tokens = sum(q for q, *_ in reqs)
            pairs = sum(p + 1 for _, p in dec) + sum(q * p + q * (q + 1) / 2 for q, p in chunks)
            kv = sum(p + q for q, p, *_ in reqs)
            active = len(bp.scheduler.active_requests)
            if "probe" in pending:
                t_p, probe_s = pending.pop("probe")
                log.probe_start.append(t_p)
                log.probe_s.append(probe_s)
            log.rows.append((t_start, t_end - t_start, tokens, sum(1 for r in reqs if r[3]), pairs, kv,
                             len(dec), len(chunks), active, sum(p + 1 for _, p in dec)))
            log.chunks.append(chunks)

        bp.prepare_next_batch, bp.update_batch = prepare_logged, update_logged
        return bp

    manager._create_batch_processor = create_logged


def _check_workload(workload, max_batch_tokens, max_requests_per_batch, page_size, max_len, warmup, seed):
    """The checked arguments: (prompts, outputs, max_len), max_len defaulting to the longest request."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a serving.Workload; got {type(workload).__name__}")
    positive_int("max_batch_tokens", max_batch_tokens)
    positive_int("max_requests_per_batch", max_requests_per_batch)
    positive_int("page_size", page_size, minimum=4)
    nonneg_int("warmup", warmup)
    nonneg_int("seed", seed)
    if max_requests_per_batch > max_batch_tokens:
        raise ValueError(f"max_requests_per_batch must be <= max_batch_tokens={max_batch_tokens} "
                         f"(one token per decoding request); got {max_requests_per_batch}")
    prompts = workload.prompt_tokens.tolist()
    outputs = workload.output_tokens.tolist()
    longest = max(p + o for p, o in zip(prompts, outputs))
    max_len = longest if max_len is None else positive_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"every prompt + output must fit max_len={max_len} tokens; the workload's longest "
                         f"is {longest}: raise max_len or shorten the requests")
    return prompts, outputs, max_len


def _model_and_prompts(model_or_cfg, dtype, seed, prompt_ids, prompts):
    """(model, its dtype name, the prompts' token ids): the model given, or one built from a config."""
    if hasattr(model_or_cfg, "init_continuous_batching"):
        model = model_or_cfg.eval()
        vocab = model.config.vocab_size
        from inferlab.measure.ceilings import dtype_name
        dtype = dtype_name(model.dtype)
    else:
        from inferlab.measure.plan import TINY_MODEL
        cfg = TINY_MODEL if model_or_cfg is None else check_model(model_or_cfg, "model_or_cfg")
        choice("dtype", dtype, DTYPES)
        model = build_model(cfg, dtype, seed)
        vocab = cfg.vocab_size
    if prompt_ids is None:
        rng = np.random.default_rng(seed)
        prompt_ids = [rng.integers(0, vocab, size=p).tolist() for p in prompts]
    else:
        prompt_ids = [[int(t) for t in ids] for ids in prompt_ids]
        if len(prompt_ids) != len(prompts) or any(len(a) != p for a, p in zip(prompt_ids, prompts)):
            raise ValueError("prompt_ids must hold one sequence per request, of its prompt_tokens length")
        if any(not 0 <= t < vocab for ids in prompt_ids for t in ids):
            raise ValueError(f"prompt_ids must lie in 0..{vocab - 1} (the vocabulary)")
    return model, dtype, prompt_ids


def _warm_up(manager, prompt_ids, prompts, warmup: int, max_requests_per_batch: int, timeout_s: float) -> float:
    """`warmup` rounds of a longest prompt alone, then a full batch of short ones decoding. Seconds."""
    t_w = time.perf_counter()
    for w in range(warmup):
        ids = [f"warm{w}-{k}" for k in range(max_requests_per_batch + 1)]
        manager.add_request(prompt_ids[int(np.argmax(prompts))], request_id=ids[0], max_new_tokens=2)
        for k in range(1, len(ids)):
            manager.add_request(prompt_ids[0][:8] or [0], request_id=ids[k], max_new_tokens=4)
        got = 0
        while got < len(ids):
            r = manager.get_result(timeout=timeout_s)
            if r is None:
                raise RuntimeError(f"transformers' engine returned nothing during warm-up: "
                                   f"{manager.background_thread_status.fatal_error}")
            got += r.is_finished()
    return time.perf_counter() - t_w


def _submit(manager, arrivals, prompt_ids, outputs, t0: float) -> list:
    """Put each request on the engine's queue at its arrival; how late each went in (seconds)."""
    n = len(arrivals)
    submitted_late = []
    i = 0
    while i < n:
        wait = arrivals[i] - (time.perf_counter() - t0)
        if wait > 0:
            time.sleep(wait)
        due = i + 1  # requests due together go onto the input queue back to back (module doc)
        while due < n and arrivals[due] <= time.perf_counter() - t0:
            due += 1
        for k in range(i, due):
            submitted_late.append(time.perf_counter() - t0 - arrivals[k])
            manager.add_request(prompt_ids[k], request_id=f"r{k}", max_new_tokens=int(outputs[k]),
                                record_timestamps=True, eos_token_id=-1)
        i = due
    return submitted_late


def _collect(manager, n: int, timeout_s: float) -> dict:
    """{request index: its finished result} for the n measured requests."""
    from transformers.generation.continuous_batching.requests import RequestStatus
    results = {}
    deadline = time.perf_counter() + timeout_s
    while len(results) < n:
        r = manager.get_result(timeout=max(0.01, deadline - time.perf_counter()))
        if r is None:
            raise RuntimeError(f"transformers' engine stopped with {n - len(results)} of {n} requests "
                               f"unfinished: {manager.background_thread_status.fatal_error}")
        if r.is_finished() and r.request_id.startswith("r"):
            if r.status != RequestStatus.FINISHED:
                raise RuntimeError(f"transformers' engine failed request {r.request_id}: {r.error}")
            results[int(r.request_id[1:])] = r
    return results


def _steps_since(log: _Steps, t0: float) -> dict:
    """The step log as STEP_FIELDS arrays, start_s since t0. A warm-up step still finishing when the
    log was cleared appends its row after: keep the steps (and probes) that started at t0 or later."""
    keep = [i for i, row in enumerate(log.rows) if row[0] >= t0]
    log.rows[:], log.chunks[:] = [log.rows[i] for i in keep], [log.chunks[i] for i in keep]
    if log.probe_s:  # one probe per row, appended with it
        log.probe_start[:], log.probe_s[:] = [log.probe_start[i] for i in keep], [log.probe_s[i] for i in keep]
    steps = {k: np.asarray(v) for k, v in zip(STEP_FIELDS, zip(*log.rows))} if log.rows else \
        {k: np.zeros(0) for k in STEP_FIELDS}
    steps["start_s"] = steps["start_s"] - t0
    return steps


def _sim_result(workload, prompts, outputs, results, steps, t0, max_requests_per_batch, version, dtype):
    n = len(prompts)
    times = [np.asarray(results[i].timestamps, dtype=float) - t0 for i in range(n)]
    for i in range(n):
        if len(times[i]) != outputs[i]:
            raise RuntimeError(f"request {i} got {len(times[i])} tokens, asked {outputs[i]}")
    first_sched = []
    for i in range(n):
        ls = results[i].lifespan[0]
        first_sched.append(ls - t0 if ls > 0 else np.nan)
    trace = ReplicaTrace(steps["start_s"], steps["step_s"], steps["n_decode"] + steps["n_prefill_chunks"],
                         steps["tokens"], steps["slots_used"], max_requests_per_batch)
    return SimResult(
        arrival_s=np.asarray(workload.arrival_s, dtype=float),
        prompt_tokens=np.asarray(prompts, dtype=np.int64), output_tokens=np.asarray(outputs, dtype=np.int64),
        first_scheduled_s=np.asarray(first_sched, dtype=float),
        first_token_s=np.array([t[0] for t in times]), finish_s=np.array([t[-1] for t in times]),
        preemptions=np.zeros(n, dtype=np.int64), replica=np.zeros(n, dtype=np.int64),
        itls_s=[np.diff(t) for t in times], traces=(trace,),
        description=f"live: transformers {version} continuous batching (fifo), {dtype} on cpu")


@dataclass(frozen=True)
class TransformersSettings:
    """The engine's configuration (module docstring): tokens and requests per step, tokens per KV
    page; max_len: the longest prompt + output a request may have (None: the workload's), which sizes
    the page pool; dtype and seed of a model built from a config; warmup: requests served before t0
    (a longest prompt, then a full batch decoding) so first-call costs stay out; timeout_s: the
    longest wait for the engine's results."""

    max_batch_tokens: int = 256
    max_requests_per_batch: int = 8
    page_size: int = 16
    max_len: int | None = None
    dtype: str = "bf16"
    seed: int = 0
    warmup: int = 2
    timeout_s: float = 3600.0


def run_transformers(workload: Workload, model_or_cfg=None, settings: TransformersSettings = TransformersSettings(),
                     *, prompt_ids=None, probe=None) -> LiveResult:
    """Serve `workload` with transformers' continuous batching on the CPU; the measured LiveResult.

    model_or_cfg: a LlamaForCausalLM (used as it is), or a ModelConfig built with random weights
    (`build_model`, settings.seed); None: the `tiny` preset. settings: TransformersSettings.
    The result's trace counts active requests as its 'blocks' column (as live.py counts slots).
    probe: a measure.probe.LinearProbe run at every step (module doc); None: no probe. Its log
    (steps after t0) is config["probe"]: {"times_s", "probe_s", "summary", "share"}."""
    import torch
    require_transformers()
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    s = settings
    max_batch_tokens, max_requests_per_batch, page_size = s.max_batch_tokens, s.max_requests_per_batch, s.page_size
    seed, timeout_s = s.seed, s.timeout_s
    prompts, outputs, max_len = _check_workload(workload, max_batch_tokens, max_requests_per_batch, page_size,
                                                s.max_len, s.warmup, seed)
    model, dtype, prompt_ids = _model_and_prompts(model_or_cfg, s.dtype, seed, prompt_ids, prompts)
    pages_per_request = -(-max_len // page_size)
    num_blocks = 2 * max_requests_per_batch * pages_per_request + 2
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, max_new_tokens=max(outputs))
    cb = ContinuousBatchingConfig(page_size=page_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                  max_requests_per_batch=max_requests_per_batch, scheduler_type="fifo",
                                  allow_block_sharing=False, use_async_batching=False, use_cuda_graph=False,
                                  auto_switch_to_flash=False, max_blocks_per_request=0, seed=seed)
    if probe is not None and not callable(probe):
        raise ValueError(f"probe must be a callable returning seconds (a measure.probe.LinearProbe); got {probe!r}")
    if probe is not None and hasattr(probe, "warm"):
        probe.warm()
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    log = _Steps()
    _instrument(manager, log, probe)
    n = len(prompts)
    with torch.inference_mode():
        manager.start()
        try:
            warmup_s = _warm_up(manager, prompt_ids, prompts, s.warmup, max_requests_per_batch, timeout_s)
            log.clear()
            t0 = time.perf_counter()
            submitted_late = _submit(manager, workload.arrival_s.tolist(), prompt_ids, outputs, t0)
            results = _collect(manager, n, timeout_s)
        finally:
            manager.stop(block=True)
    tokens = tuple(tuple(int(t) for t in results[i].generated_tokens) for i in range(n))
    version = require_transformers().__version__
    steps = _steps_since(log, t0)
    result = _sim_result(workload, prompts, outputs, results, steps, t0, max_requests_per_batch, version, dtype)
    config = {"engine": "transformers", "engine_version": version, "dtype": dtype, "device": "cpu",
              "policy": "transformers-fifo", "max_batch_tokens": max_batch_tokens,
              "max_requests_per_batch": max_requests_per_batch, "page_size": page_size, "num_blocks": num_blocks,
              "max_len": int(max_len), "seed": int(seed), "threads": torch.get_num_threads(),
              "attn_implementation": model.config._attn_implementation,
              "submission_lag_max_s": float(max(submitted_late)) if submitted_late else 0.0}
    if probe is not None and log.probe_s:
        from inferlab.study.hostspeed import ProbeLog, probe_share, probe_summary
        plog = ProbeLog(np.asarray(log.probe_start) - t0, log.probe_s)
        config["probe"] = {**plog.to_dict(), "summary": probe_summary(plog),
                           "share": probe_share(plog.probe_s, steps["step_s"])}
    from inferlab.study.live import _device_name
    return LiveResult(result, steps, tokens, tuple(tuple(p) for p in prompt_ids), config, _device_name("cpu"),
                      warmup_s, tuple(log.chunks))
