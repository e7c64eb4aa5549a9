"""One matrix product of a pass, dense or grouped, in the operand format it runs in: the 16-bit curve
(`kernels.linear`, Vidur's profiles) or the FP8 W8A8 one (`kernels.fp8`, DeepGEMM's table)."""
from __future__ import annotations

import numpy as np

from inferlab.base.input_checks import choice, finite_result, positive_float, positive_int
from inferlab.core.kernels.fp8 import fp8_fit
from inferlab.core.kernels.linear import linear_fit
from inferlab.core.kernels.measured import check_measured

PRODUCT_DTYPES = ("bf16", "fp16", "fp8")  # operand formats with measured products (fp8: weights and inputs)


def product_times_s(accelerator, groups, rows_per_group, k, n, dtype: str = "bf16"):
    """Seconds of one product of `groups` k x n weights over `rows_per_group` rows each, in one kernel
    (groups 1: a dense product; a mixture of experts' routed experts: the expected experts touched, which may
    be fractional). rows_per_group 0: 0 seconds (an operator that does not run). Arrays broadcast."""
    acc = check_measured(accelerator)
    positive_int("k", k)
    positive_int("n", n)
    positive_int("rows_per_group", rows_per_group, minimum=0)
    positive_float("groups", groups)
    choice("dtype", dtype, PRODUCT_DTYPES)
    fit = fp8_fit(acc) if dtype == "fp8" else linear_fit(acc)
    out = fit.grouped_time_s(groups, rows_per_group, k, n)
    finite_result("product_times_s", out, rows_per_group=rows_per_group, k=k, n=n)
    return out if np.ndim(out) else float(out)
