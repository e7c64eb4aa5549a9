"""A model's maximum context: prompts and KV caches beyond it are flagged, not silently computed.

`ModelConfig.max_context_tokens` (data/models.toml, with its source) is the longest sequence the
model was trained for. A library computation past it (a 100k-token prompt on Llama-2 13B, whose
limit is 4096) still returns its number, as a yardstick, but emits a `ContextLengthWarning` naming
the model, the length and the limit. Passing `beyond_context=True` to the function (or running
inside `with beyond_context():`) says the yardstick is intended and silences the warning. The
command line refuses such a run unless `--beyond-context` is given.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import warnings

import numpy as np

from inferlab.core.boundary import enters
from inferlab.core.specs import ModelConfig

_ALLOWED = contextvars.ContextVar("inferlab_beyond_context", default=False)


class ContextLengthWarning(UserWarning):
    """A sequence longer than the model's maximum context: the number is a yardstick only."""


@contextlib.contextmanager
def beyond_context(allowed: bool = True):
    """Within this block, sequences beyond a model's maximum context are computed without a warning."""
    token = _ALLOWED.set(bool(allowed) or _ALLOWED.get())
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def context_message(model, tokens: int) -> str:
    """The warning's words, naming where the limit came from: data/models.toml for a registered model,
    the config's field (max_position_embeddings, or the RoPE scaling) for one read from a config.json."""
    where = model.max_context_source if getattr(model, "config_reader", "") and model.max_context_source else "data/models.toml"
    return (f"{tokens} tokens exceed the maximum context of {model.name} ({model.max_context_tokens} "
            f"tokens, {where}); the result is a yardstick for a model that cannot run it")


@enters(model=ModelConfig)
def within_context(model, tokens) -> bool:
    """True when every length in `tokens` is <= the model's max_context_tokens (or it has none)."""
    limit = model.max_context_tokens
    return limit is None or float(np.max(np.asarray(tokens, dtype=float))) <= limit


@enters(model=ModelConfig)
def check_context(model, tokens) -> bool:
    """Warn (ContextLengthWarning) when `tokens` exceeds the model's maximum context, unless inside
    beyond_context(); return whether it is within."""
    if within_context(model, tokens):
        return True
    if not _ALLOWED.get():
        longest = int(np.max(np.asarray(tokens, dtype=float)))
        # Attributed to "inferlab", not to a file and line: the same text on every machine (stored
        # notebook outputs compare equal), shown once per message under the default filter.
        warnings.warn_explicit(context_message(model, longest) + " (pass beyond_context=True if intended)",
                               ContextLengthWarning, "inferlab", 0, module="inferlab.core.context",
                               registry=_SHOWN)
    return False


_SHOWN: dict = {}  # the warnings registry of check_context


def context_flag(func):
    """Add a keyword-only `beyond_context: bool = False` to `func`: True runs it inside beyond_context()."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    flag = inspect.Parameter("beyond_context", inspect.Parameter.KEYWORD_ONLY, default=False)
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    params.insert(at, flag)

    @functools.wraps(func)
    def wrapper(*args, beyond_context: bool = False, **kwargs):
        if not isinstance(beyond_context, (bool, np.bool_)):
            raise ValueError(f"beyond_context must be True or False; got {beyond_context!r}")
        if not beyond_context:
            return func(*args, **kwargs)
        token = _ALLOWED.set(True)
        try:
            return func(*args, **kwargs)
        finally:
            _ALLOWED.reset(token)

    wrapper.__signature__ = sig.replace(parameters=params)
    return wrapper


def yardstick(func):
    """Run `func` (a plot or a claim sweeping past the context on purpose) inside beyond_context()."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with beyond_context():
            return func(*args, **kwargs)
    return wrapper
