"""Which data/accelerators.toml row a live device is: each row's device_name_pattern, searched in the
name torch reports (torch.cuda.get_device_name). A new accelerator is one data row, pattern included."""
import dataclasses

import pytest

from inferlab.core import specs
from inferlab.core.specs import accelerator_for_device, get_accelerator

# Names as torch.cuda.get_device_name prints them (nvidia-smi's product names; ROCm's for AMD).
REPORTED = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": None,            # the 94 GB NVL card has no row: never taken for the SXM one
    "NVIDIA H200": "h200",
    "NVIDIA A100-SXM4-80GB": "a100-80gb",
    "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA A100 80GB PCIe": None,      # the PCIe A100 has no row
    "NVIDIA L4": "l4",
    "NVIDIA L40S": None,                # not an L4
    "AMD Instinct MI300X": "mi300x",
    "NVIDIA B200": "b200",
    "Intel(R) Xeon(R) Platinum": None,
}


@pytest.mark.parametrize("reported, row", REPORTED.items())
def test_reported_names_find_their_row(reported, row):
    assert accelerator_for_device(reported) == row


def test_the_live_probe_reads_the_same_data():
    from inferlab.measure import device
    assert device.datasheet_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert not hasattr(device, "DATASHEET_PATTERNS")     # no second list in code


def _with_rows(monkeypatch, extra: dict):
    table = dict(specs._load("accelerators"))
    table.update(extra)
    real = specs._load
    monkeypatch.setattr(specs, "_load", lambda kind: table if kind == "accelerators" else real(kind))


def test_a_new_accelerator_is_one_data_row(monkeypatch):
    row = {k: v for k, v in specs._load("accelerators")["h100-sxm"].items()
           if k in {f.name for f in dataclasses.fields(specs.Accelerator)}}
    _with_rows(monkeypatch, {"gb200": dict(row, description="made up for the test", device_name_pattern="GB200")})
    assert accelerator_for_device("NVIDIA GB200") == "gb200"
    assert get_accelerator("gb200").device_name_pattern == "GB200"


def test_two_rows_matching_one_name_is_an_error_in_the_data(monkeypatch):
    row = dict(specs._load("accelerators")["h200"], device_name_pattern="H1")   # also matches every H100
    _with_rows(monkeypatch, {"h1-anything": row})
    with pytest.raises(ValueError, match="h100-sxm, h1-anything"):
        accelerator_for_device("NVIDIA H100 80GB HBM3")


def test_a_pattern_that_is_no_regular_expression_is_refused():
    with pytest.raises(ValueError, match="device_name_pattern of 'x' must be a regular expression"):
        dataclasses.replace(get_accelerator("h100-sxm"), name="x", device_name_pattern="H100(")
