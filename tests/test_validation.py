"""Bad input: every public function rejects it with a ValueError naming the parameter, the value
and what is allowed (unknown names come with the closest known ones)."""
import inspect
import math
import re

import numpy as np
import pytest

from inferlab.core import costs, deployment, latency, memory, parallel, roofline, specs
from inferlab.base import input_checks, units
from inferlab.core.deployment import Deployment
from inferlab.core.specs import BF16, Precision, get_model
from inferlab.base.input_checks import DoesNotFitError
from inferlab.core.specs import get_accelerator

A100_80GB = get_accelerator("a100-80gb")
B200 = get_accelerator("b200")
H100_SXM = get_accelerator("h100-sxm")
LLAMA_3_70B = get_model("llama-3-70b")

BOOK = get_model("llama-2-13b-book")
FC = costs.decode_costs(BOOK, 2, 16)

# One valid call per public function; each test below spoils one argument of it.
GOOD = {
    costs.linear_cost: dict(tokens=4, d_in=8, d_out=8, precision=BF16),
    costs.attention_pairs: dict(q_len=4, past_len=2),
    costs.forward_costs: dict(model=BOOK, batch=2, q_len=3, past_len=4, precision=BF16),
    costs.prefill_costs: dict(model=BOOK, batch=2, prompt_len=8, precision=BF16),
    costs.decode_costs: dict(model=BOOK, batch=2, context_len=8, precision=BF16),
    costs.chunked_prefill_costs: dict(model=BOOK, prompt_len=100, chunk_len=32, batch=1, precision=BF16),
    roofline.ridge_point: dict(accelerator=H100_SXM, dtype="bf16"),
    roofline.attainable_flops_per_s: dict(intensity=10.0, accelerator=H100_SXM, dtype="bf16", mfu=1.0, mbu=1.0),
    roofline.bound: dict(intensity=10.0, accelerator=H100_SXM, dtype="bf16"),
    roofline.roofline_time_s: dict(flops=1e9, bytes_moved=1e9, accelerator=H100_SXM, dtype="bf16",
                                   mfu=1.0, mbu=1.0),
    roofline.pass_time_s: dict(costs=FC, accelerator=H100_SXM, dtype="bf16", mfu=1.0, mbu=1.0,
                               overlap="per_operator"),
    roofline.operator_regimes: dict(costs=FC, accelerator=H100_SXM, dtype="bf16"),
    roofline.time_weighted_regime: dict(costs=FC, accelerator=H100_SXM, dtype="bf16"),
    memory.weight_bytes: dict(model=BOOK, precision=BF16, tp=1),
    memory.kv_cache_bytes_per_token: dict(model=BOOK, precision=BF16, tp=1),
    memory.weight_bytes_read: dict(model=BOOK, tokens=4, precision=BF16, tp=1),
    memory.kv_cache_bytes: dict(model=BOOK, seq_len=10, batch=2, precision=BF16, tp=1),
    memory.memory_budget: dict(model=BOOK, accelerator=H100_SXM, batch=2, seq_len=10, precision=BF16,
                               tp=1, reserved_bytes=0.0),
    memory.max_batch: dict(model=BOOK, accelerator=H100_SXM, seq_len=10, precision=BF16, tp=1,
                           reserved_bytes=0.0),
    parallel.check_tp: dict(model=BOOK, tp=2),
    parallel.tp_shard: dict(model=BOOK, tp=2),
    parallel.allreduce_time_s: dict(message_bytes=1e6, tp=2, accelerator=H100_SXM, latency_s=0.0),
    parallel.allreduce_latency_s: dict(accelerator=H100_SXM),
    parallel.allreduce_bus_bytes_per_s: dict(accelerator=H100_SXM),
    parallel.tp_communication_time_s: dict(model=BOOK, tokens=4, tp=2, accelerator=H100_SXM,
                                           precision=BF16, latency_s=0.0),
    Deployment: dict(accelerator=H100_SXM, precision=BF16, tp=2, mfu=1.0, mbu=1.0, overlap="per_operator",
                     allreduce=True, allreduce_latency_s=0.0),
    latency.prefill_time_s: dict(model=BOOK, deployment=H100_SXM, prompt_len=16, batch=1, precision=BF16),
    latency.decode_step_time_s: dict(model=BOOK, deployment=H100_SXM, context_len=16, batch=1, precision=BF16),
    latency.throughput_tokens_per_s: dict(model=BOOK, deployment=H100_SXM, context_len=16, batch=1,
                                          precision=BF16),
    latency.extend_time_s: dict(model=BOOK, deployment=H100_SXM, new_tokens=8, cached_tokens=16, batch=1,
                                precision=BF16),
    latency.chunked_prefill_time_s: dict(model=BOOK, deployment=H100_SXM, prompt_len=100, chunk_len=32,
                                         precision=BF16),
    memory.fit_advice: dict(model=BOOK, accelerator=H100_SXM, seq_len=10, precision=BF16),
    latency.kv_crossover_batch: dict(model=BOOK, context_len=16, precision=BF16, tp=1),
    latency.cost_per_1k_tokens_usd: dict(tokens_per_s=100.0, usd_per_gpu_hour=4.0, n_gpus=1),
    latency.prefill_flops_rule: dict(n_params=1e9, tokens=100, flops_per_param_token=2.0),
    latency.ttft_rule_s: dict(n_params=1e9, prompt_len=100, accelerator=H100_SXM, dtype="bf16", batch=1,
                              mfu=1.0, flops_per_param_token=2.0),
    latency.decode_step_rule_s: dict(weight_bytes_total=1e9, kv_bytes_per_seq=1e6, batch=2,
                                     accelerator=H100_SXM, mbu=1.0),
    specs.get_model: dict(name=BOOK),
    specs.model_variant: dict(model=BOOK, n_kv_heads=8),
    specs.get_accelerator: dict(name=H100_SXM),
    specs.resolve_model: dict(name_or_path="mixtral-8x7b-v0.1"),
    specs.from_hf_config: dict(path=specs.data_dir() / "hf-configs" / "mistral-7b-v0.1", name="mistral-7b-v0.1"),
    units.bytes_per_element: dict(dtype="bf16"),
    costs.group_costs: dict(costs=FC),
    roofline.memory_time_s: dict(bytes_moved=1e9, accelerator=H100_SXM),
    roofline.mlp_ridge_batch: dict(model=BOOK, accelerator=H100_SXM, precision=BF16, context_len=16,
                                   max_batch_searched=1024),
    memory.active_weight_bytes: dict(model=BOOK, precision=BF16, tp=1),
    memory.kv_cache_rule_bytes: dict(model=BOOK, seq_len=16, batch=2, precision=BF16),
    memory.weights_fit: dict(model=BOOK, accelerator=H100_SXM, precision=BF16, tp=1),
    memory.fit_limit: dict(model=BOOK, accelerator=H100_SXM, seq_len=16, precision=BF16),
    memory.kv_variants: dict(model=BOOK, precision=BF16, gqa_kv_heads=8),
    latency.weight_read_floor_s: dict(model=BOOK, accelerator=H100_SXM, precision=BF16, tokens=8),
    latency.throughput_ceiling_tokens_per_s: dict(model=BOOK, accelerator=H100_SXM, context_len=16, precision=BF16),
    latency.ttft_curve: dict(model=BOOK, deployment=H100_SXM, prompt_lens=np.array([16, 64]), batch=1, precision=BF16),
    latency.throughput_shape: dict(model=BOOK, accelerator=H100_SXM, context_len=16, precision=BF16, up_to=64),
    specs.accelerator_for_device: dict(device_name="NVIDIA H100 80GB HBM3"),
}

COUNT = [0, -3, 2.5, "8", True, None, np.array([4, 0])]  # a batch, a length, a head count ...
NONNEG_COUNT = [-1, 0.5, "0", None, np.array([3, -1])]
AMOUNT = [-1.0, math.nan, math.inf, "1e9", None]  # FLOPs, bytes, seconds, dollars
FRACTION = [0, -0.1, 1.5, math.nan, "0.5"]
BAD = {
    "batch": COUNT, "seq_len": COUNT, "context_len": COUNT, "prompt_len": COUNT, "q_len": COUNT,
    "chunk_len": COUNT, "d_in": COUNT, "d_out": COUNT, "n_gpus": COUNT,
    "tp": [0, -2, 1.5, "2", True],
    "n_kv_heads": [0, -3, 2.5, "8", True],
    "past_len": NONNEG_COUNT,
    "tokens": [0, -1, 1.5, None],
    "n_params": AMOUNT, "tokens_per_s": AMOUNT, "usd_per_gpu_hour": AMOUNT, "flops_per_param_token": AMOUNT,
    "weight_bytes_total": AMOUNT, "kv_bytes_per_seq": [-1.0, math.nan, None],
    "intensity": [-1.0, math.nan, None], "flops": [-1.0, math.inf, None], "bytes_moved": [-1.0, math.nan],
    "message_bytes": [-1.0, math.nan], "latency_s": [-1e-6, math.inf],
    "allreduce_latency_s": [-1e-6, math.nan], "reserved_bytes": [-1.0, math.nan],
    "mfu": FRACTION, "mbu": FRACTION,
    "model": ["llama-2-13", "lama-3-8b", "gpt-4", None],
    "accelerator": ["h100", "h100-sxm5", "tpu-v5", None],
    "deployment": ["h100-sxm", None, 2],
    "dtype": ["bf17", "float16", None],
    "precision": ["bf16", None, 2],
    "costs": ["decode", None],
    "overlap": ["per-operator", "max", True, None],
}
# Flags that accept anything truthy; no bad value exists.
FLAGS = {"causal", "all_logits", "include_attention", "allreduce", "allow_zero", "kwargs", "beyond_context"}
# Parameters whose message uses another word for the same thing.
WORD = {("get_model", "name"): "model", ("get_accelerator", "name"): "accelerator",
        ("resolve_model", "name_or_path"): "model"}
BAD_NAME = {("get_model", "name"): BAD["model"], ("get_accelerator", "name"): BAD["accelerator"],
            ("resolve_model", "name_or_path"): [*BAD["model"], "", "no/such/config.json"],
            # a path to no config, a folder without one, not a path at all; `name` is a label (any string)
            ("from_hf_config", "path"): ["no/such/config.json", "/", "", None, 3],
            ("from_hf_config", "name"): [],
            ("roofline_time_s", "overlap"): ["max", True, False],
            # a quantized part's stored bytes per weight (scales included): > 0, at most 8 (fp64)
            ("linear_cost", "bytes_per_weight"): [0, -1, math.nan, math.inf, 9.0, "1", True],
            # the bytes a convention lets a deployment use (core.usable_memory): > 0, a number
            **{(f, "usable_bytes"): [0, -1, math.nan, math.inf, "72e9", True] for f in ("memory_budget", "max_batch")},  # one vocabulary with pass_time_s
            # an efficiency or a step overhead is an object (efficiency.MeasuredKernels(), kernels.StepOverhead)
            ("Deployment", "efficiency"): ["measured", 0.5, True],
            ("Deployment", "step_overhead"): [0.001, "vidur-a100"],
            # None is the deployment's own precision (BF16 beside a bare Accelerator)
            **{(f, "precision"): ["bf16", 2] for f in ("prefill_time_s", "decode_step_time_s", "throughput_tokens_per_s",
                                                       "extend_time_s", "chunked_prefill_time_s")},
            # tokens may be fractional or 0 (B* solves for a real batch): only negative or not a number
            ("weight_bytes_read", "tokens"): [-1, -0.5, math.nan, math.inf, None, "4"],
            ("extend_time_s", "new_tokens"): COUNT, ("extend_time_s", "cached_tokens"): NONNEG_COUNT,
            ("mlp_ridge_batch", "max_batch_searched"): COUNT, ("kv_variants", "gqa_kv_heads"): [0, -3, 2.5, "8", True],
            ("ttft_curve", "prompt_lens"): COUNT, ("ttft_curve", "precision"): ["bf16", 2],
            ("throughput_shape", "up_to"): [0, -3, 2.5, "8", True],
            # None reads every weight; a fractional or zero token count is a real input (weight_bytes_read)
            ("weight_read_floor_s", "tokens"): [-1, math.nan, "4"],
            ("accelerator_for_device", "device_name"): [None, 3]}
# Helpers outside the contract: display conversions, listings, aggregation and the checkers themselves.
EXEMPT = {"function_name", "function_label", "wrong_type", "as_deployment", "check_model", "check_accelerator", "check_precision", "data_dir", "list_models", "list_accelerators", "list_hf_configs", "book_scenario", "to_gb", "to_ms", "total_cost", "as_precision",
          "positive_int", "nonneg_int", "positive_float", "fraction", "choice", "writable_file", "writable_dir", "finite_result", "scalar"}


def public_functions():
    for module in (costs, roofline, memory, parallel, deployment, latency, specs, units, input_checks):
        for name, obj in vars(module).items():
            if (inspect.isfunction(obj) and obj.__module__ == module.__name__
                    and not name.startswith("_") and name not in EXEMPT):
                yield obj


def cases():
    for func, good in GOOD.items():
        for param in inspect.signature(func).parameters:
            for value in BAD_NAME.get((func.__name__, param), BAD.get(param, [])):
                ident = f"{func.__name__}-{param}={value!r}".replace(" ", "")
                yield pytest.param(func, good, param, value, id=ident)


def test_every_public_function_and_parameter_is_covered():
    missing = [f.__name__ for f in public_functions() if f not in GOOD]
    assert not missing, f"add a valid call to GOOD for {missing}"
    for func in GOOD:
        for param in inspect.signature(func).parameters:
            assert param in FLAGS or param in BAD or (func.__name__, param) in BAD_NAME, (
                f"{func.__name__}({param}=...) has no bad values to try")


@pytest.mark.parametrize("func, good", [pytest.param(f, g, id=f.__name__) for f, g in GOOD.items()])
def test_the_valid_calls_succeed(func, good):
    """Each valid call returns a finite result (no NaN, inf or None): the baseline the bad values spoil."""
    out = func(**good)
    assert out is not None
    if hasattr(out, "total"):
        out = out.total
    if hasattr(out, "flops"):
        out = [out.flops, out.bytes]
    if hasattr(out, "free_bytes"):  # a MemoryBudget
        out = [out.free_bytes, out.used_bytes]
    if hasattr(out, "remedies"):    # a FitAdvice
        out = [out.max_batch, out.weight_gb, out.memory_gb]
    if hasattr(out, "rule_s"):      # a TTFTCurve
        out = [out.with_attention_s, out.without_attention_s, out.rule_s]
    if hasattr(out, "b_star"):      # a ThroughputShape
        out = [out.b_star, out.tokens_per_s_at_b_star, out.ceiling_tokens_per_s]
    if isinstance(out, (str, dict)) or hasattr(out, "name") or isinstance(out, Deployment):
        return  # a regime, a table of regimes, a model, accelerator or deployment: checked by their own tests
    assert np.all(np.isfinite(np.asarray(out, dtype=float))), out


# The core takes objects: anything else given for these is a wrong type (TypeError), named with the
# function, the parameter, the value and the resolver to call. Only specs.get_model/get_accelerator
# take names (and reject unknown ones with a ValueError, above).
OBJECTS = {"model": "ModelConfig", "accelerator": "Accelerator", "precision": "Precision",
           "deployment": "Deployment or Accelerator"}
RESOLVER = {"model": "inferlab.core.specs.get_model", "accelerator": "inferlab.core.specs.get_accelerator",
            "precision": "inferlab.core.specs.Precision(", "deployment": "inferlab.core.specs.get_accelerator"}


@pytest.mark.parametrize("func, good, param, value", list(cases()))
def test_bad_argument_is_rejected_by_name(func, good, param, value):
    if param in OBJECTS and func not in (specs.get_model, specs.get_accelerator):
        with pytest.raises(TypeError) as info:
            func(**{**good, param: value})
        msg = str(info.value)
        assert msg.startswith(f"{func.__module__.removeprefix('inferlab.core.').removeprefix('inferlab.')}.{func.__name__}({param}=...): "
                              f"expected {OBJECTS[param]}, got {type(value).__name__} {value!r}; "), msg
        assert RESOLVER[param] in msg and "\n" not in msg, msg
        return
    with pytest.raises(ValueError) as info:
        func(**{**good, param: value})
    msg = str(info.value)
    word = WORD.get((func.__name__, param), param)
    assert word in msg, msg
    if isinstance(value, np.ndarray):
        assert f"array of shape {value.shape}" in msg and f"min {value.min()}" in msg, msg
    else:
        assert repr(value) in msg, msg
    assert re.search(r"allowed|must|>=|> 0|<=", msg), msg
    assert "\n" not in msg


@pytest.mark.parametrize("func, param, value, suggestion", [
    (specs.get_model, "name", "llama-2-13", "llama-2-13b"),
    (specs.get_model, "name", "Llama-3-8B", "llama-3-8b"),
    (specs.get_accelerator, "name", "h100", "h100-sxm"),
    (specs.get_accelerator, "name", "mi300", "mi300x"),
    (roofline.ridge_point, "dtype", "bf17", "bf16"),
    (units.bytes_per_element, "dtype", "in8", "int8"),
])
def test_unknown_names_suggest_the_closest(func, param, value, suggestion):
    good = GOOD[func]
    with pytest.raises(ValueError, match=r"Did you mean .*" + re.escape(repr(suggestion))):
        func(**{**good, param: value})


def test_unknown_names_list_what_is_allowed():
    with pytest.raises(ValueError) as info:
        specs.get_model("gpt-4")
    for name in specs.list_models():
        assert name in str(info.value)


@pytest.mark.parametrize("field, value, pattern", [
    ("n_heads", 40.5, r"n_heads must be a positive integer; got 40\.5"),
    ("n_kv_heads", 8.0, r"n_kv_heads must be a positive integer; got 8\.0"),
    ("n_kv_heads", 0, r"n_kv_heads must be an integer >= 1; got 0"),
    ("n_kv_heads", 7, r"n_kv_heads must divide n_heads; got n_heads=40, n_kv_heads=7 \(allowed: a divisor of 40\)"),
    ("n_layers", -1, r"n_layers must be an integer >= 1; got -1"),
    ("d_model", "5120", r"d_model must be a positive integer; got '5120'"),
    ("head_dim", True, r"head_dim must be a positive integer; got True"),
])
def test_model_config_rejects_bad_shapes(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        get_model(BOOK).with_(**{field: value})


@pytest.mark.parametrize("field", ["weights", "activations", "kv", "compute"])
def test_precision_rejects_unknown_dtypes(field):
    with pytest.raises(ValueError, match=rf"unknown {field} dtype 'bf17'; allowed: .*Did you mean 'bf16'"):
        Precision(**{field: "bf17"})


def test_dtype_without_a_peak_on_that_accelerator():
    with pytest.raises(ValueError, match=r"dtype 'fp8' has no peak on accelerator 'a100-80gb'; allowed: "):
        roofline.ridge_point(A100_80GB, "fp8")
    with pytest.raises(ValueError, match=r"dtype 'fp32' has no peak on accelerator 'b200'"):
        latency.decode_step_time_s(BOOK, B200, 16, precision=Precision(activations="fp32"))


@pytest.mark.parametrize("func", [parallel.tp_shard, parallel.check_tp, memory.weight_bytes,
                                  latency.kv_crossover_batch])
def test_tp_that_does_not_divide_the_heads(func):
    with pytest.raises(ValueError, match=r"tp must divide n_heads=40 and d_ff=20480 .*got tp=3"):
        func(**{**GOOD[func], "tp": 3})


def test_a_deployments_tp_that_does_not_divide_the_heads():
    # a Deployment does not know the model: its tp meets the model's heads in the time functions
    with pytest.raises(ValueError, match=r"tp must divide n_heads=40 and d_ff=20480 .*got tp=3"):
        latency.decode_step_time_s(BOOK, Deployment(H100_SXM, tp=3), 16)


def test_accelerator_without_a_link_cannot_run_tp():
    l4 = specs.get_accelerator("l4")
    island = specs.Accelerator("island", l4.memory_bytes, l4.hbm_bytes_per_s, dict(l4.peak_flops_per_s))
    with pytest.raises(ValueError, match="'island' has no interconnect bandwidth for tp=2"):
        parallel.allreduce_time_s(1e6, 2, island)
    assert parallel.allreduce_time_s(1e6, 1, island) == 0


@pytest.mark.parametrize("field, value", [("memory_bytes", 0), ("hbm_bytes_per_s", -1.0),
                                          ("interconnect_bytes_per_s", -5.0)])
def test_accelerator_rejects_bad_numbers(field, value):
    kwargs = dict(name="x", memory_bytes=1e9, hbm_bytes_per_s=1e12, peak_flops_per_s={"bf16": 1e14})
    with pytest.raises(ValueError, match=rf"{field} must be .*got {value!r}"):
        specs.Accelerator(**{**kwargs, field: value})
    with pytest.raises(ValueError, match=r"unknown dtype 'bf17'"):
        specs.Accelerator(**{**kwargs, "peak_flops_per_s": {"bf17": 1e14}})


def test_does_not_fit_is_a_value_error_with_a_way_out():
    with pytest.raises(DoesNotFitError, match=r"use more devices \(tp\), a smaller weight dtype"):
        memory.max_batch(LLAMA_3_70B, H100_SXM, 1000)
    with pytest.raises(ValueError, match=r"shorten seq_len, quantise the KV cache or add devices"):
        memory.max_batch(BOOK, H100_SXM, 10**6)


def test_validation_helpers():
    assert input_checks.positive_int("n", 3) == 3
    assert input_checks.positive_int("n", np.array([1.0, 2.0])) is not None
    assert input_checks.nonneg_int("n", 0) == 0
    assert input_checks.positive_float("x", 0.0, allow_zero=True) == 0.0
    assert input_checks.fraction("mfu", 1.0) == 1.0
    assert input_checks.choice("c", "a", ["a", "b"]) == "a"
    with pytest.raises(ValueError, match=r"x must be a finite number > 0 and <= 2; got 3"):
        input_checks.positive_float("x", 3, maximum=2)
    with pytest.raises(ValueError, match=r"n must be an integer >= 1; got an empty array of shape \(0,\)"):
        input_checks.positive_int("n", np.array([], dtype=int))
    with pytest.raises(ValueError, match=r"unknown c 'zzz'; allowed: a, b\.$"):
        input_checks.choice("c", "zzz", ["a", "b"])


@pytest.mark.parametrize("typed, first", [("h100", "h100-sxm"), ("llama-2-13", "llama-2-13b"),
                                          ("LLAMA-3-8B", "llama-3-8b"), ("mistral", "mistral-7b"),
                                          ("h100-sxm5", "h100-sxm")])
def test_first_suggestion_is_the_nearest_name(typed, first):
    with pytest.raises(ValueError, match=rf"Did you mean {re.escape(repr(first))}[,?]"):
        input_checks.choice("model", typed, specs.list_models() + specs.list_accelerators())
