"""Make data/deepgemm/ from ../shared/published-kernels/ (DeepSeek's DeepGEMM README timings, MIT).

Keeps what the FP8 kernel model uses: the layout, the group count, the rows per group (M), N, K and the
TFLOPS the README prints (time = 2 M N K groups / TFLOPS, recovered by the library when it loads them);
drops the GB/s column (the same time, another way) and the speed-up over CUTLASS (their own baseline).

    python tools/vendor_deepgemm_fp8.py [--src ../shared/published-kernels] [--out data/deepgemm]
"""
from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_COMMIT = "55ab91f72f76e8a6db0e86282c3169a88d93df1b"
KEEP = ["layout", "groups", "m_per_group", "n", "k", "tflops"]

README = f"""# Vendored: DeepGEMM's published FP8 matrix-product timings on an H800 SXM5

Facts measured by someone else, on a real GPU; nothing here was measured on this project's machines.

- Source: DeepSeek's DeepGEMM, <https://github.com/deepseek-ai/DeepGEMM>, README.md, section "Performance",
  at commit `{SOURCE_COMMIT}` (2025-03-25).
- Licence: MIT, copyright DeepSeek; the notice is in `LICENSE` beside this file.
- Made by `tools/vendor_deepgemm_fp8.py` from a copy of that table (`../shared/published-kernels/`):
  the columns the library uses, every row.

`fp8_gemm.csv`: FP8 (e4m3) x FP8 -> BF16 products with fine-grained scaling (1 x 128 activation tiles,
128 x 128 weight blocks), measured on an H800 SXM5 with NVCC 12.8. Columns: `layout` (`dense`, one product;
`grouped-contiguous`, one M-concatenated product over `groups` experts, as a mixture of experts' prefill
runs), `groups`, `m_per_group` (rows of each group, M), `n`, `k` (the weight is K x N), `tflops` as printed
(2 M N K groups / time). The shapes are DeepSeek-V3/R1's own, without tensor parallelism.

An H800 SXM5 has an H100 SXM5's SMs, clocks, HBM3 (3.35 TB/s) and dense peaks (989 TFLOP/s bf16,
1,979 TFLOP/s fp8); only its NVLink is narrower. The library fits its FP8 curve on these rows and uses
it for `h100-sxm` and `h800` (docs/kernels.md).
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT.parent / "shared" / "published-kernels"))
    ap.add_argument("--out", default=str(ROOT / "data" / "deepgemm"))
    args = ap.parse_args(argv)
    src, out = Path(args.src), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (src / "deepgemm-h800-fp8.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    with (out / "fp8_gemm.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(KEEP)
        w.writerows([row[c] for c in KEEP] for row in rows)
    shutil.copyfile(src / "LICENSE-DeepGEMM", out / "LICENSE")
    (out / "README.md").write_text(README)


if __name__ == "__main__":
    main()
