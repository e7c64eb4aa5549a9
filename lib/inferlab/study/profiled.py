"""Step time from a measured operator profile: the simulator fed with what this machine achieved.

A serving step feeds T tokens (one per decoding sequence plus each prefill chunk's tokens) through
every linear layer as one flat [T, d] matrix, and runs attention once per sequence against its own
cache (as the live loop, `serving.study.live`, and paged-attention engines do). From the operator
profile of a run (`inferlab.measure.profile`: each operator timed alone on this device):

    step_s = sum over linear layers of L * t_linear(op, M = T)          (LM head: M = sequences sampled)
           + L * ( sum over decoding sequences of t_attn_decode(c_i)    (one query against c_i keys)
                 + sum over prefill chunks of t_attn_prefill(S_eq) )   (q new queries after p cached:
                                                                        S_eq(S_eq+1)/2 = q*p + q(q+1)/2)
           + L * t_elementwise(T) + t_head_elementwise(T) + t_sample(sampled)
           + overhead_s(+ per_sequence_s * sequences)

t_linear and t_attn are the calibrated times of `inferlab.measure.calibrate` (each operator's
roofline divided by the efficiency interpolated between profiled sizes: rows M; keys read for
decode attention; for a prefill chunk S_eq, the causal length with as many query-key pairs); the
elementwise times are the profiled times interpolated in log-log (extrapolated with the end
segment's slope). Decode attention is summed at the batch's mean context (n * t(mean) for n
sequences: exact when the contexts are equal; t is close to linear in c). `overhead_s` is the profile's fixed per-step
cost; `per_sequence_s` the engine's cost per sequence beyond its operators, when measured.
"""
from __future__ import annotations

from inferlab.measure.calibrate import _efficiency, attention_time_s, interp_log, linear_shapes, shape_key
from inferlab.core.roofline import roofline_time_s
from inferlab.core.costs import linear_cost
from inferlab.serving.steptime import StepShape, decode_shape, prefill_shape
from inferlab.core.specs import ModelConfig, Precision
from inferlab.base.input_checks import positive_float


class ProfileStepTime:
    """A StepTimeModel (serving.steptime) from an operator profile; see the module docstring.

    profile: the `profile` dict of a measurement run (or of `inferlab serving validate`);
    cfg, precision: the model and dtype it was measured for; accelerator: the measured ceilings
    (the roofline the efficiencies are relative to)."""

    def __init__(self, profile: dict, cfg: ModelConfig, precision: Precision, accelerator, *,
                 per_sequence_s: float = 0.0):
        for key in ("linear", "attention", "elementwise", "overhead_s"):
            if key not in profile:
                raise ValueError(f"profile lacks '{key}': pass the 'profile' of a measurement run "
                                 "(inferlab measure, or inferlab serving validate)")
        positive_float("per_sequence_s", per_sequence_s, allow_zero=True)
        self.profile, self.cfg, self.precision = profile, cfg, precision
        self.accelerator = accelerator
        self.dtype = precision.compute_dtype
        self.per_sequence_s = float(per_sequence_s)
        self.overhead_s = float(profile["overhead_s"]) + float(profile.get("residual_s", 0.0))
        self._shapes = linear_shapes(cfg)
        for name, (k, n) in self._shapes.items():
            if shape_key(k, n) not in profile["linear"]:
                raise ValueError(f"profile has no linear layer {shape_key(k, n)} ({name}): it was "
                                 f"measured for another model than {cfg.name}")
        el = profile["elementwise"]
        self._layer = ([p["tokens"] for p in el["layer"]], [p["time_s"] for p in el["layer"]])
        self._headel = ([p["tokens"] for p in el["head"]], [p["time_s"] for p in el["head"]])
        self._sample = ([p["tokens"] for p in el["sampling"]], [p["time_s"] for p in el["sampling"]])
        self._body: dict = {}
        self._head: dict = {}
        self._dec_memo: dict = {}
        self._chunk_memo: dict = {}

    # -- per-operator pieces ---------------------------------------------------------------------
    def linear_s(self, name: str, rows: int) -> float:
        """One linear layer (one of `calibrate.LINEAR_OPS`) at M = rows: roofline / efficiency."""
        k, n = self._shapes[name]
        c = linear_cost(int(rows), k, n, self.precision)
        r = float(roofline_time_s(float(c.flops), float(c.bytes), self.accelerator, self.dtype))
        return r / _efficiency(self.profile["linear"][shape_key(k, n)], int(rows), self.accelerator, self.dtype)

    def body_s(self, tokens: int) -> float:
        """Everything that scales with the tokens fed: the layers' linear and elementwise work."""
        t = self._body.get(tokens)
        if t is None:
            L = self.cfg.n_layers
            t = sum(L * self.linear_s(name, tokens) for name in self._shapes if name != "lm_head")
            t += L * interp_log(tokens, *self._layer, extrapolate=True)
            t += interp_log(tokens, *self._headel, extrapolate=True)
            self._body[tokens] = t
        return t

    def head_s(self, sampled: int) -> float:
        """The LM head and the argmax over the vocabulary for `sampled` sequences."""
        if sampled <= 0:
            return 0.0
        t = self._head.get(sampled)
        if t is None:
            t = self.linear_s("lm_head", sampled) + interp_log(sampled, *self._sample, extrapolate=True)
            self._head[sampled] = t
        return t

    def decode_attention_s(self, sequences: int, kv_tokens: float) -> float:
        """All layers' attention of `sequences` single-query sequences reading `kv_tokens` keys in
        all, one call per sequence, each at the mean context."""
        if sequences <= 0:
            return 0.0
        ctx = max(int(round(kv_tokens / sequences)), 1)
        t = self._dec_memo.get(ctx)
        if t is None:
            t = attention_time_s(self.profile, self.cfg, self.precision, self.accelerator, 1, 1, ctx - 1)[1]
            self._dec_memo[ctx] = t
        return sequences * t

    def chunk_attention_s(self, q: int, p: int) -> float:
        """All layers' attention of a prefill chunk of q tokens after p cached ones (one call)."""
        if q == 1:
            return self.decode_attention_s(1, p + 1)
        t = self._chunk_memo.get((q, p))
        if t is None:
            t = attention_time_s(self.profile, self.cfg, self.precision, self.accelerator, 1, q, p)[1]
            self._chunk_memo[(q, p)] = t
        return t

    # -- the StepTimeModel interface ------------------------------------------------------------
    def step_time_s(self, step: StepShape, t_s: float) -> float:
        """One step (the same at any t_s): its decoding sequences over their keys, its prefill
        chunks (q new tokens, p cached), its sampled sequences."""
        tokens = step.tokens
        if tokens <= 0:
            return 0.0
        return (self.body_s(tokens) + self.head_s(int(step.sampled))
                + self.decode_attention_s(int(step.decode_seqs), float(step.decode_kv_tokens))
                + sum(self.chunk_attention_s(int(q), int(p)) for q, p in step.chunks)
                + self.overhead_s + self.per_sequence_s * step.sequences)

    def prefill_s(self, prompt_tokens: int) -> float:
        return self.step_time_s(prefill_shape(prompt_tokens), 0.0)

    def decode_s(self, context_tokens: int, batch: int = 1) -> float:
        return self.step_time_s(decode_shape(context_tokens, batch), 0.0)
