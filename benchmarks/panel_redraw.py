"""Redraw time of the chapter notebooks' interactive panels (inferlab.notebook.panel), one change at a time.

Run it on an otherwise idle machine: on a shared one the wall times measure the other processes.
A redraw is what a control change costs in the kernel: recompute the section's curve through the
library, redraw the figure and encode the PNG the panel shows (the widget front end's own
rendering is not included). Prints the median and worst time per panel over a sequence of
changes that touch every control; the target is <= 150 ms per change on a 2-core machine.

    .venv/bin/python benchmarks/panel_redraw.py
"""
from __future__ import annotations

import statistics
import time

from inferlab.notebook import panel
from inferlab.core.specs import BF16

CHANGES = [dict(batch=8), dict(tokens=4096), dict(model="llama-3-8b"), dict(accelerator="h200"),
           dict(weights="int8"), dict(kv="int8"), dict(batch=32), dict(tokens=1024),
           dict(model="llama-2-70b"), dict(accelerator="mi300x"), dict(model="llama-2-13b"),
           dict(accelerator="h100-sxm"), dict(weights="bf16"), dict(kv="bf16")]
PANELS = {
    "15.1.1 prefill": lambda: panel.prefill_panel("llama-2-13b", "h100-sxm", BF16, prompt=2048, batch=1),
    "15.1.2 decode": lambda: panel.decode_panel("llama-2-13b", "h100-sxm", BF16, context=1000, batch=16),
    "15.2.1 latency": lambda: panel.latency_panel("llama-2-13b", "h100-sxm", BF16, prompt=1024, batch=1),
    "15.2.2 batching": lambda: panel.batching_panel("llama-2-13b", "h100-sxm", BF16, context=1024, batch=16),
}


def main() -> None:
    print(f"{'panel':<16} {'median ms':>9} {'worst ms':>9} {'CPU ms':>7}  (wall, of {len(CHANGES)} changes; "
          "target <= 150 ms; CPU = median process time, what the redraw costs without contention)")
    for name, make in PANELS.items():
        p = make()
        p.update(batch=2)  # warm-up: first draw of fonts and caches
        times, cpu = [], []
        for change in CHANGES:
            t0, c0 = time.perf_counter(), time.process_time()
            p.update(**change)
            times.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
        print(f"{name:<16} {statistics.median(times):9.1f} {max(times):9.1f} {statistics.median(cpu):7.1f}")


if __name__ == "__main__":
    main()
