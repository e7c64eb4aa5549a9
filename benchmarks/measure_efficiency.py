"""MBU at B = 1 and MFU at the largest prefill, as ratios to ceilings measured in the same run.

    python benchmarks/measure_efficiency.py                 # measure here (CPU: see README, "Measuring it live")
    python benchmarks/measure_efficiency.py --from run.json # the summary of a recorded suite run

MBU = bytes the library says one decode step moves / step time / measured read-only stream
(a decode step reads weights and KV cache); against the copy bandwidth it is printed beside.
MFU = FLOPs the library counts for the prefill / its time / measured matmul FLOP/s.
Each round measures each ceiling right before and right after the kernel it divides and uses
the median of the two (their mean), so a machine whose speed drifts moves ceiling and kernel
together and one estimate caught in a burst does not set the ratio. On a CPU the decode step
runs compiled (inductor with freezing) unless --decode-mode says otherwise. On a CPU a round counts only if other processes took < 5 % of the
CPUs it uses meanwhile (read from /proc/stat); rounds go on until --rounds clean ones exist (at most
--max-rounds). The medians over the clean rounds are printed.
Targets (issue #5): CPU MBU >= 0.8, MFU >= 0.7; H100/H200 with 13B shapes MBU >= 0.85 at B = 1,
MFU >= 0.7 at S = 2048. Exit status 0 whether or not a target is met: this script reports.
"""
from __future__ import annotations

import argparse
import sys

from inferlab.base.units import GB


def _verdict(value, target):
    if target is None:
        return ""
    return f"  (target >= {target}: {'met' if value >= target else 'BELOW'})"


def from_file(path) -> int:
    from inferlab.measure import SuiteResult

    r = SuiteResult.load(path)
    s, c = r.summary, r.data["config"]
    tgt = s.get("targets") or {}
    print(f"recorded run {path}: {c['model']['name']} {c['dtype']} on {r.device['name']} ({r.data['created']})")
    print(f"MBU at B = 1 (context {s['mbu_context']}): {s['mbu_b1']:.3f}{_verdict(s['mbu_b1'], tgt.get('mbu'))}")
    print(f"MFU at prefill S = {s['mfu_prompt_len']}: {s['mfu_prefill']:.3f}"
          f"{_verdict(s['mfu_prefill'], tgt.get('mfu'))}")
    for p in r.points("ttft"):
        if p["prompt_len"] == 2048 and s["mfu_prompt_len"] != 2048:
            print(f"MFU at prefill S = 2048: {p['mfu']:.3f}{_verdict(p['mfu'], tgt.get('mfu'))}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="from_", default=None, help="print the summary of a suite JSON instead")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "mps", "cpu"))
    ap.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    ap.add_argument("--model", default=None, help="preset or models.toml name (default: sized to the device)")
    ap.add_argument("--rounds", type=int, default=3, help="clean rounds wanted (CPU: others took < 5%% of our CPUs)")
    ap.add_argument("--max-rounds", type=int, default=None, help="rounds at most (default 3 x --rounds)")
    ap.add_argument("--prompt-len", type=int, default=None, help="prefill length (default: the plan's largest)")
    ap.add_argument("--context-len", type=int, default=None, help="decode context (default: the plan's batch context)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--decode-mode", default="auto", choices=("auto", "eager", "graph", "compile"))
    args = ap.parse_args(argv)
    if args.from_:
        return from_file(args.from_)

    from inferlab.measure.efficiency import EfficiencyConfig, measure_efficiency

    try:
        r = measure_efficiency(EfficiencyConfig(device=args.device, dtype=args.dtype, model=args.model,
                                                rounds=args.rounds, max_rounds=args.max_rounds,
                                                prompt_len=args.prompt_len, context_len=args.context_len,
                                                threads=args.threads, decode_mode=args.decode_mode,
                                                log=lambda t: print(t, flush=True)))
    except ValueError as err:
        print(f"measure_efficiency: error: {err}", file=sys.stderr)
        return 2
    tgt = r["targets"] or {}
    rounds = r["rounds"]
    print(f"decode step moves {r['decode_bytes'] / GB:.3f} GB (library: weights + KV + activations); "
          f"prefill S = {r['prompt_len']} is {r['prefill_flops'] / 1e12:.3f} TFLOP")
    used = [x for x in rounds if x["clean"]] or rounds
    mbus = ", ".join(f"{x['mbu']:.2f}" for x in used)
    mfus = ", ".join(f"{x['mfu']:.2f}" for x in used)
    which = (f"median of {len(used)} clean round(s)" if r["clean_rounds"]
             else f"median of all {len(used)} rounds: none was clean, other processes competed")
    print(f"{r['dtype']} ({r['dtype_reason']}), {r['threads']} threads, decode {r['decode_mode']}; {which}")
    print(f"MBU at B = 1 (context {r['context_len']}): {r['mbu']:.3f} against the read-only stream "
          f"(against the copy: {r['mbu_copy']:.3f}) [rounds: {mbus}]{_verdict(r['mbu'], tgt.get('mbu'))}")
    print(f"MFU at prefill S = {r['prompt_len']}: {r['mfu']:.3f} [rounds: {mfus}]"
          f"{_verdict(r['mfu'], tgt.get('mfu'))}")
    if r["note"]:
        print(f"note: {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
