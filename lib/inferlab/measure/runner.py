"""The model under measurement and how one step of it runs: random weights built in place,
random KV caches and tokens (never zeros), and the decode step as eager code, one CUDA graph,
or torch.compile (the CPU default: inductor with freezing), with a clean fallback."""
from __future__ import annotations

import gc
import math

from inferlab.measure.ceilings import fill_random_, generator, torch_dtype

WEIGHT_SCALE = 0.02 * math.sqrt(3.0)  # uniform noise with the std (0.02) of build_model's normal init


def random_model(cfg, device: str, dtype: str, seed: int = 0):
    """inferlab.model's Transformer with uniform random weights, built in place on `device`
    (made on the meta device first, so no default initialisation runs and nothing is copied)."""
    import torch

    from inferlab.model import build_model

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


def compile_options(kind: str) -> dict:
    """torch.compile's arguments for the decode step on `kind`. GPU: CUDA graphs (mode
    reduce-overhead). CPU: inductor with freezing (weights folded into the graph as constants
    and pre-packed for the CPU's GEMM/GEMV kernels; needs inference mode), dynamic shapes so
    that every position, and every batch > 1, shares one graph (B = 1 is specialised)."""
    if kind == "cuda":
        return {"mode": "reduce-overhead", "dynamic": True}
    return {"dynamic": True, "options": {"freezing": True}}


def _compiled(model, kind: str):
    """The model's torch.compile wrapper, made once and kept on the model itself (so it dies
    with the model; object.__setattr__ keeps nn.Module from registering it as a submodule)."""
    import torch

    compiled = model.__dict__.get("_inferlab_compiled")
    if compiled is None:
        dyn = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):  # the name changed across releases
            if hasattr(dyn, name):
                setattr(dyn, name, max(getattr(dyn, name), RECOMPILE_LIMIT))
        compiled = torch.compile(model, **compile_options(kind))
        object.__setattr__(model, "_inferlab_compiled", compiled)
    return compiled


def decode_runner(model, pool, start_pos: int, mode: str, kind: str):
    """(fn(tokens), mode used, note) running one forward at `start_pos` for pool-shaped tokens.
    eager: the module as written. graph (CUDA): one CUDA graph captured for this shape and
    replayed, as gpt-fast's compiled decode is, so kernel launches cost nothing. compile:
    torch.compile (compile_options: CUDA graphs on a GPU; inductor with freezing and dynamic
    shapes on a CPU). The first call compiles (untimed: here). A mode that fails here falls
    back to graph, then eager, and the note says why."""
    import torch

    def eager(tok):
        return model(tok, start_pos, all_logits=False)

    failed = model.__dict__.setdefault("_inferlab_failed", {})  # a mode that failed once stays off
    if mode == "compile":
        if "compile" not in failed:
            try:
                compiled = _compiled(model, kind)

                def fn(tok):
                    return compiled(tok, start_pos, all_logits=False)
                fn(pool[0])
                return fn, "compile", None
            except Exception as err:  # noqa: BLE001 - any compiler failure means: use another mode
                model.__dict__.pop("_inferlab_compiled", None)
                failed["compile"] = (f"torch.compile unavailable ({type(err).__name__}: "
                                     f"{(str(err).splitlines() or [''])[0][:120]})")
        fn, used, note = decode_runner(model, pool, start_pos, "graph" if kind == "cuda" else "eager", kind)
        return fn, used, "; ".join(n for n in (failed["compile"], note) if n)
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
