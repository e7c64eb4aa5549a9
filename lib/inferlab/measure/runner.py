"""The model under measurement and how one step of it runs: random weights built in place,
random KV caches and tokens (never zeros), and the decode step as eager code, one CUDA graph,
or torch.compile (the CPU default: inductor with freezing), with a clean fallback."""
from __future__ import annotations

import gc
import math

from inferlab.measure.ceilings import fill_random_, generator, torch_dtype

WEIGHT_SCALE = 0.02 * math.sqrt(3.0)  # uniform noise with the std (0.02) of build_model's normal init


def random_model(cfg, device: str, dtype: str, seed: int = 0):
    """inferlab.measure.model's Transformer with uniform random weights, built in place on `device`
    (made on the meta device first, so no default initialisation runs and nothing is copied)."""
    import torch

    from inferlab.measure.model import build_model

    model = build_model(cfg, device="meta", dtype=torch_dtype(dtype)).to_empty(device=device)
    gen = generator(device, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                fill_random_(p, gen, WEIGHT_SCALE)
    if cfg.tied_embeddings:
        model.output.weight = model.tok_embeddings.weight
    return model.eval()


def fill_kv_cache_(model, gen) -> None:
    """Random K and V in every cache slot (never zeros). A large CPU cache is tiled from one
    random block: the values do not change the time, and fresh noise for gigabytes would
    take seconds on two cores."""
    import torch

    block = 1 << 22
    for layer in model.layers:
        cache = layer.attention.kv_cache
        for buf in (cache.k_cache, cache.v_cache):
            flat = buf.view(-1)
            if flat.numel() <= block or flat.device.type != "cpu":
                fill_random_(flat, gen)
                continue
            src = fill_random_(torch.empty(block, dtype=flat.dtype), gen)
            for start in range(0, flat.numel(), block):
                n = min(block, flat.numel() - start)
                flat[start:start + n].copy_(src[:n])


def drop_kv_cache(model, kind: str) -> None:
    import torch

    for layer in model.layers:
        layer.attention.kv_cache = None
    gc.collect()
    if kind == "cuda":
        torch.cuda.empty_cache()


def token_pool(cfg, batch: int, length: int, n: int, device: str, gen):
    """n random token tensors [batch, length]: fresh inputs for each repeat."""
    import torch

    return [torch.randint(0, cfg.vocab_size, (batch, length), generator=gen, device=device)
            for _ in range(n)]


RECOMPILE_LIMIT = 32  # graphs per frame: B = 1 and B > 1 at a few cache shapes stay well inside it


def compile_options(kind: str, freezing: bool = True) -> dict:
    """torch.compile's arguments for the decode step on `kind`. GPU: CUDA graphs (mode
    reduce-overhead). CPU: inductor with freezing (weights folded into the graph as constants
    and pre-packed for the CPU's GEMM/GEMV kernels; needs inference mode), dynamic shapes so
    that every position, and every batch > 1, shares one graph (B = 1 is specialised).
    freezing=False: the same without freezing (the fallback when a frozen step fails its check)."""
    if kind == "cuda":
        return {"mode": "reduce-overhead", "dynamic": True}
    return {"dynamic": True, "options": {"freezing": True}} if freezing else {"dynamic": True}


# How far a compiled step's logits may stray from the eager step's on the same input, as a share of the largest
# eager logit: max |compiled - eager| <= STEP_TOLERANCE x max |eager|. fp32: the compiled graph only reorders
# sums (seen: ~1e-6); half types round every intermediate to 8 or 11 bits, so a fused graph differs by more.
STEP_TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 5e-2}


def step_mismatch(out, ref) -> str | None:
    """Why `out` (a compiled step's logits) cannot stand for `ref` (the eager step's on the same input): not
    finite, or further than STEP_TOLERANCE of the dtype from it; None when it can."""
    import torch

    if out.shape != ref.shape:
        return f"logits of shape {tuple(out.shape)}, eager's {tuple(ref.shape)}"
    name = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(ref.dtype, "fp32")
    out, ref = out.float(), ref.float()
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        return f"{bad} of {out.numel()} logits not finite"
    if not bool(torch.isfinite(ref).all()):
        return "the eager step's logits are not finite: nothing to check the compiled step against"
    scale = float(ref.abs().max()) or 1.0
    err = float((out - ref).abs().max()) / scale
    if err > STEP_TOLERANCE[name]:
        return (f"logits differ from the eager step's by {err:.2g} of the largest "
                f"(tolerance {STEP_TOLERANCE[name]:g} in {name})")
    return None


def _compiled(model, kind: str, freezing: bool = True):
    """The model's torch.compile wrapper, made once and kept on the model itself (so it dies
    with the model; object.__setattr__ keeps nn.Module from registering it as a submodule)."""
    import torch

    compiled = model.__dict__.get("_inferlab_compiled")
    if compiled is None:
        dyn = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):  # the name changed across releases
            if hasattr(dyn, name):
                setattr(dyn, name, max(getattr(dyn, name), RECOMPILE_LIMIT))
        compiled = torch.compile(model, **compile_options(kind, freezing))
        object.__setattr__(model, "_inferlab_compiled", compiled)
    return compiled


def decode_step(model) -> dict:
    """Which decode step `model`'s decode_runner calls returned last, and why: {'timed': 'compile (frozen)' |
    'compile (not frozen)' | 'graph' | 'eager', 'why': the failed checks or None}. What a run's config records."""
    return dict(model.__dict__.get("_inferlab_step") or {"timed": "eager", "why": None})


def _compiled_step(model, pool, start_pos: int, kind: str, failed: dict):
    """fn(tokens) of the first compiled variant (frozen, then not frozen; on a GPU one variant) whose logits on
    pool[0] are finite and match the eager step's (step_mismatch), or None; a variant that fails is recorded in
    `failed` and not tried again on this model."""
    def eager(tok):
        return model(tok, start_pos, all_logits=False)

    for freezing in ((True, False) if kind == "cpu" else (False,)):
        key = "compile" if freezing or kind != "cpu" else "compile-unfrozen"
        if key in failed:
            continue
        what = "torch.compile" if kind != "cpu" else ("the frozen compiled step" if freezing
                                                      else "the compiled step without freezing")
        try:
            compiled = _compiled(model, kind, freezing)

            def fn(tok, compiled=compiled):
                return compiled(tok, start_pos, all_logits=False)
            fn(pool[0])  # compiles (untimed); writes the cache slot at start_pos, as eager does below
            why = step_mismatch(fn(pool[0]), eager(pool[0]))
            if why is None:
                label = "compile" if kind != "cpu" else f"compile ({'frozen' if freezing else 'not frozen'})"
                return fn, label
            failed[key] = f"{what} failed its check against the eager step ({why}); not timed"
        except Exception as err:  # noqa: BLE001 - any compiler failure means: use another mode
            failed[key] = (f"torch.compile unavailable ({type(err).__name__}: "
                           f"{(str(err).splitlines() or [''])[0][:120]})")
        model.__dict__.pop("_inferlab_compiled", None)
    return None


def decode_runner(model, pool, start_pos: int, mode: str, kind: str):
    """(fn, mode used, note) running one forward at `start_pos` for pool-shaped tokens.
    eager: the module as written. graph (CUDA): one CUDA graph captured for this shape and
    replayed, as gpt-fast's compiled decode is, so kernel launches cost nothing. compile:
    torch.compile (compile_options: CUDA graphs on a GPU; inductor with freezing and dynamic
    shapes on a CPU). The first call compiles (untimed: here). A compiled step is checked before
    use: its logits on pool[0] must be finite and within STEP_TOLERANCE of the eager step's
    (step_mismatch). A frozen step that fails is recompiled without freezing; a mode that fails
    falls back to graph, then eager; the note says why, and decode_step(model) says which step."""
    failed = model.__dict__.setdefault("_inferlab_failed", {})  # a mode that failed once stays off
    if mode == "compile":
        found = _compiled_step(model, pool, start_pos, kind, failed)
        reasons = [failed[k] for k in ("compile", "compile-unfrozen") if k in failed]
        if found is not None:
            fn, label = found
            object.__setattr__(model, "_inferlab_step", {"timed": label, "why": "; ".join(reasons) or None})
            return fn, "compile", "; ".join(reasons) or None
        fn, used, note = _uncompiled(model, pool, start_pos, "graph" if kind == "cuda" else "eager", kind, failed)
        why = "; ".join(n for n in (*reasons, note) if n)
        object.__setattr__(model, "_inferlab_step", {"timed": used, "why": why or None})
        return fn, used, why
    fn, used, note = _uncompiled(model, pool, start_pos, mode, kind, failed)
    object.__setattr__(model, "_inferlab_step", {"timed": used, "why": note})
    return fn, used, note


def _uncompiled(model, pool, start_pos: int, mode: str, kind: str, failed: dict):
    """decode_runner's graph and eager modes: (fn, mode used, note)."""
    import torch

    def eager(tok):
        return model(tok, start_pos, all_logits=False)

    if mode == "graph":
        if kind != "cuda":
            return eager, "eager", "CUDA graphs need a CUDA device; eager decode"
        if "graph" in failed:
            return eager, "eager", failed["graph"]
        try:
            static = pool[0].clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    eager(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = eager(static)

            def fn(tok):
                static.copy_(tok)
                graph.replay()
                return out
            fn.graph = graph  # keep it alive with the closure
            return fn, "graph", None
        except Exception as err:  # noqa: BLE001
            failed["graph"] = f"CUDA graph capture failed ({type(err).__name__}: {str(err)[:120]}); eager decode"
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - the failure is already recorded
                pass
            return eager, "eager", failed["graph"]
    return eager, "eager", None
