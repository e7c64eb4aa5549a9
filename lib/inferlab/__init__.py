"""inferlab: the executable companion to chapter 15, "The Inference Workload".

Everything is in SI base units (FLOPs, bytes, seconds); conversion happens only at display time.
"""
from inferlab.core.specs import (
    Accelerator, ModelConfig, Precision, from_hf_config, get_accelerator, get_model,
    list_accelerators, list_hf_configs, list_models, resolve_model,
)
from inferlab.base.units import bytes_per_element, DTYPES
from inferlab.base.input_checks import DoesNotFitError

__version__ = "0.1.0"
