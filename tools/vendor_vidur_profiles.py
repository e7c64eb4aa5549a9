"""Make data/vidur/ from ../shared/vidur-profiles/ (Microsoft Vidur's published profiles, MIT).

Keeps the columns the kernel model uses, medians only, one row per profiled point (rows profiled
twice, num_tokens 2048 and 4096, are merged by the median of their medians). Times stay in
milliseconds as published; the library converts them to seconds when it loads them.

    python tools/vendor_vidur_profiles.py [--src ../shared/vidur-profiles] [--out data/vidur]
"""
from __future__ import annotations

import argparse
import csv
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
CPU_OVERHEAD_COMMIT = "6d98aa8"
# The profiles' accelerator directories and the library's names for them (the A100 variant is not
# stated in the source; it is taken as the 80 GB SXM card).
ACCELERATORS = {"h100": "h100-sxm", "a100": "a100-80gb"}
SHAPE = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
         "num_tensor_parallel_workers"]
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
CPU_STAGES = ["schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs"]


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def compute(src: Path, out: Path) -> None:
    rows_out = []
    for acc_dir, acc_name in ACCELERATORS.items():
        for path in sorted((src / "compute" / acc_dir).glob("*/*/mlp.csv")):
            model = path.parent.name
            groups = defaultdict(list)
            with path.open() as fh:
                for row in csv.DictReader(fh):
                    key = tuple(row[c] for c in SHAPE)
                    groups[key].append([float(row[f"time_stats.{op}.median"]) for op in OPS])
            for key, vals in sorted(groups.items(), key=lambda kv: (int(kv[0][7]), int(kv[0][6]))):
                med = [statistics.median(v[i] for v in vals) for i in range(len(OPS))]
                rows_out.append([acc_name, model, *key, *(_fmt(m) for m in med)])
    with (out / "compute.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["accelerator", "model", *SHAPE, *(f"{op}_ms" for op in OPS)])
        w.writerows(rows_out)


def network(src: Path, out: Path) -> None:
    rows_out = []
    for collective in ("all_reduce", "send_recv"):
        for path in sorted((src / "network").glob(f"*/{collective}.csv")):
            node = path.parent.name
            groups = defaultdict(list)
            with path.open() as fh:
                for row in csv.DictReader(fh):
                    key = (int(row["num_workers"]), int(row["devices_per_node"]), int(float(row["size"])))
                    # One node only (the model prices tensor parallelism inside a node); send/recv
                    # keeps its across-node row too (devices_per_node 1: pipeline stages on two nodes).
                    if collective == "all_reduce" and key[0] != key[1]:
                        continue
                    groups[key].append(float(row[f"time_stats.{collective}.median"]))
            for (workers, per_node, size), vals in sorted(groups.items()):
                rows_out.append([node, collective, workers, per_node, size, _fmt(statistics.median(vals))])
    with (out / "network.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["node", "collective", "num_workers", "devices_per_node", "size_bytes", "median_ms"])
        w.writerows(rows_out)


def cpu_overheads(src: Path, out: Path) -> None:
    rows_out = []
    with (src / "cpu_overheads" / "a100" / "cpu_overheads.csv").open() as fh:
        for row in csv.DictReader(fh):
            rows_out.append([row["model_name"], row["batch_size"], row["tensor_parallel_degree"],
                             *(_fmt(float(row[f"{s}_median"])) for s in CPU_STAGES)])
    rows_out.sort(key=lambda r: (r[0], int(r[2]), int(r[1])))
    with (out / "cpu_overheads.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["model", "batch_size", "tensor_parallel_degree", *(f"{s}_median_ms" for s in CPU_STAGES)])
        w.writerows(rows_out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", type=Path, default=ROOT.parent / "shared" / "vidur-profiles")
    p.add_argument("--out", type=Path, default=ROOT / "data" / "vidur")
    a = p.parse_args(argv)
    if not (a.src / "compute").is_dir():
        raise SystemExit(f"--src: no Vidur profiles at {a.src} (expected compute/, network/, cpu_overheads/)")
    a.out.mkdir(parents=True, exist_ok=True)
    compute(a.src, a.out)
    network(a.src, a.out)
    cpu_overheads(a.src, a.out)
    shutil.copyfile(a.src / "LICENSE", a.out / "LICENSE")


if __name__ == "__main__":
    main()
