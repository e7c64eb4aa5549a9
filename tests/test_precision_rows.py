"""The FP8 and H200 rows of the "same on a real GPU" sections (inferlab.notebook.precision_rows)."""
import pytest

from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.latency import decode_step_time_s
from inferlab.core.specs import Precision, get_accelerator, get_model
from inferlab.notebook import precision_rows

pytestmark = pytest.mark.core

M = get_model("llama-2-13b")


def test_rows_are_the_library_times_on_the_named_deployments():
    rows = {(r.accelerator, r.dtype): r for r in precision_rows.rows(M, 2048, 1024, 1)}
    assert set(rows) == {("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("h200", "bf16"), ("h200", "fp8")}
    fp8 = Precision(weights="fp8", activations="fp8", kv="fp8")
    on = Deployment(get_accelerator("h200"), fp8, efficiency=MeasuredKernels())
    assert rows["h200", "fp8"].itl_measured_s == pytest.approx(decode_step_time_s(M, on, 1024), rel=1e-12)


def test_fp8_and_h200_move_the_times_the_way_their_resources_say():
    rows = {(r.accelerator, r.dtype): r for r in precision_rows.rows(M, 2048, 1024, 1)}
    h100, h100_8, h200 = rows["h100-sxm", "bf16"], rows["h100-sxm", "fp8"], rows["h200", "bf16"]
    # Ideal: FP8 halves a B = 1 decode step (every byte halves) and a prefill (the peak doubles).
    assert h100_8.itl_ideal_s == pytest.approx(h100.itl_ideal_s / 2, rel=0.01)
    assert h100_8.ttft_ideal_s == pytest.approx(h100.ttft_ideal_s / 2, rel=0.01)
    # Ideal: the H200's decode step is the H100's x 3.35 / 4.8 (memory-bound); its prefill the same (same peak).
    assert h200.itl_ideal_s == pytest.approx(h100.itl_ideal_s * 3.35 / 4.8, rel=0.01)
    assert h200.ttft_ideal_s == pytest.approx(h100.ttft_ideal_s, rel=0.01)
    # Measured kernels are slower than the ideal in every row, and FP8 still faster than bf16 as measured.
    for r in rows.values():
        assert r.itl_measured_s > r.itl_ideal_s and r.ttft_measured_s > r.ttft_ideal_s
    assert h100_8.itl_measured_s < 0.7 * h100.itl_measured_s


def test_markdown_has_one_line_per_row():
    text = precision_rows.markdown(M, 2048, 1024, 1)
    assert len(text.splitlines()) == 2 + 4 and "FP8 W8A8" in text and "h200" in text
