"""The serving lab's figures: one function per experiment of `serving.lab`, each returning a
`plots.Plot` (the figure, its plotted points as a rounded text table for nbval, the points)."""
from __future__ import annotations

import numpy as np

from inferlab.notebook.plots import WIDE, Plot, _figure, legend_below
from inferlab.notebook.lab import Capacity, LongPrompt, PrefixSweep, Sweep
from inferlab.base.text_tables import text_table

MS = 1e3  # seconds -> milliseconds, for display only


def _slo_line(ax, y_ms, what):
    ax.axhline(y_ms, color="tab:red", ls=":", lw=1.2, label=f"SLO: {what} < {y_ms:g} ms")


def policy_plot(sweep: Sweep) -> Plot:
    """Output tokens/s and median end-to-end latency against the request rate, one line per policy."""
    fig, (a, b) = _figure(WIDE, 2)
    rows = []
    for label in sweep.labels:
        thr = sweep.column(label, "throughput_output_tokens_per_s")
        e2e = sweep.column(label, "e2e_s", "p50") * MS
        ttft = sweep.column(label, "ttft_s", "p99") * MS
        a.plot(sweep.rates, thr, marker="o", label=label)
        b.plot(sweep.rates, e2e, marker="o", label=label)
        rows += [(r, label, t, e, f) for r, t, e, f in zip(sweep.rates, thr, e2e, ttft)]
    a.set(xlabel="request rate (requests/s)", ylabel="output tokens/s", title="throughput", ylim=(0, None))
    b.set(xlabel="request rate (requests/s)", ylabel="median end-to-end latency (ms)", yscale="log",
          title="latency")
    legend_below(fig)
    table = text_table(("rate/s", "policy", "output tok/s", "p50 E2E ms", "p99 TTFT ms"), rows,
                       (".3g", "s", ".4g", ".4g", ".4g"))
    return Plot(fig, table, {"sweep": sweep})


def tail_plot(sweep: Sweep) -> Plot:
    """p99 TTFT and p99 ITL against the request rate, one line per policy, with the SLO targets."""
    fig, (a, b) = _figure(WIDE, 2)
    rows = []
    for label in sweep.labels:
        ttft = sweep.column(label, "ttft_s", "p99") * MS
        itl = sweep.column(label, "itl_s", "p99") * MS
        att = sweep.column(label, "slo_attainment")
        a.plot(sweep.rates, ttft, marker="o", label=label)
        b.plot(sweep.rates, itl, marker="o", label=label)
        rows += [(r, label, t, i, x * 100) for r, t, i, x in zip(sweep.rates, ttft, itl, att)]
    if sweep.slo.ttft_s:
        _slo_line(a, sweep.slo.ttft_s * MS, "TTFT")
    if sweep.slo.tpot_s:
        _slo_line(b, sweep.slo.tpot_s * MS, "ITL")
    a.set(xlabel="request rate (requests/s)", ylabel="p99 TTFT (ms)", yscale="log", title="time to first token")
    b.set(xlabel="request rate (requests/s)", ylabel="p99 ITL (ms)", title="inter-token latency")
    legend_below(fig)
    table = text_table(("rate/s", "policy", "p99 TTFT ms", "p99 ITL ms", "in SLO %"), rows,
                       (".3g", "s", ".4g", ".4g", ".3g"))
    return Plot(fig, table, {"sweep": sweep})


def long_prompt_plot(lp: LongPrompt, itl_slo_s: float | None = 0.05) -> Plot:
    """The others' largest ITL and the long request's TTFT against the chunk size, the unchunked
    values as dashed lines."""
    fig, ax = _figure()
    c = np.array(lp.chunks)
    labels = [f"C={x}" for x in lp.chunks]
    ax.plot(c, [lp.others_max_itl_s[k] * MS for k in labels], marker="o", color="tab:blue",
            label="largest ITL of the others, chunked")
    ax.plot(c, [lp.long_ttft_s[k] * MS for k in labels], marker="s", color="tab:orange",
            label="TTFT of the long prompt, chunked")
    ax.axhline(lp.others_max_itl_s["unchunked"] * MS, color="tab:blue", ls="--",
               label="largest ITL of the others, unchunked")
    ax.axhline(lp.long_ttft_s["unchunked"] * MS, color="tab:orange", ls="--", label="TTFT of the long prompt, unchunked")
    if itl_slo_s:
        _slo_line(ax, itl_slo_s * MS, "ITL")
    ax.set_xscale("log", base=2)
    ax.set_xticks(c, [str(x) for x in lp.chunks])
    ax.set(xlabel="chunk size C (tokens per step)", ylabel="ms", ylim=(0, None),
           title=f"a {lp.long_tokens:,}-token prompt into {lp.rate_per_s:g} requests/s")
    legend_below(fig)
    rows = [(k, lp.others_max_itl_s[k] * MS, lp.others_p99_itl_s[k] * MS, lp.others_p99_ttft_s[k] * MS,
             lp.long_ttft_s[k] * MS) for k in lp.labels]
    table = text_table(("schedule", "others max ITL ms", "others p99 ITL ms", "others p99 TTFT ms", "long TTFT ms"),
                       rows, ("s", ".4g", ".4g", ".4g", ".4g"))
    return Plot(fig, table, {"long_prompt": lp})


def capacity_plot(cap: Capacity) -> Plot:
    """SLO-meeting requests per dollar for each deployment (bars), its GPUs and capacity beside."""
    fig, ax = _figure()
    labels = [f"{d.label} ({d.gpus} GPU{'s' if d.gpus > 1 else ''})" for d in cap.deployments]
    per_usd = np.array(cap.requests_per_usd)
    y = np.arange(len(labels))[::-1]
    colors = ["tab:green" if i == cap.best() else "tab:gray" for i in range(len(labels))]
    ax.barh(y, per_usd / 1e3, color=colors)
    ax.set_yticks(y, labels)
    for i, (yi, v, r) in enumerate(zip(y, per_usd, cap.rate_per_s)):
        note = f"{r:.3g}/s" if cap.fits[i] else cap.status(i)  # a deployment that does not fit says so
        ax.annotate(note, (v / 1e3, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    ax.set(xlabel=f"thousand requests in the SLO per dollar (${cap.usd_per_gpu_hour:g} per GPU-hour)",
           title=f"capacity at {cap.attainment:.0%} SLO attainment, per dollar")
    ax.set_xlim(0, max(per_usd.max(), 1e3) / 1e3 * 1.25 if cap.all_fit else max(per_usd.max(), 1e3) / 1e3 * 1.8)
    if cap.all_fit:
        rows = [(d.label, d.gpus, r, g, u) for d, r, g, u in zip(cap.deployments, cap.rate_per_s, cap.per_gpu, per_usd)]
        table = text_table(("deployment", "GPUs", "capacity req/s", "req/s per GPU", "req per $"), rows,
                           ("s", "d", ".3g", ".3g", ".4g"))
    else:
        rows = [(d.label, d.gpus, r, g, u, cap.status(i)) for i, (d, r, g, u)
                in enumerate(zip(cap.deployments, cap.rate_per_s, cap.per_gpu, per_usd))]
        table = text_table(("deployment", "GPUs", "capacity req/s", "req/s per GPU", "req per $", "memory"), rows,
                           ("s", "d", ".3g", ".3g", ".4g", "s"))
    return Plot(fig, table, {"capacity": cap})


def prefix_plot(ps: PrefixSweep, ttft_slo_s: float | None = 0.5) -> Plot:
    """Median TTFT and SLO attainment against the rate, prefix caching off and on."""
    fig, (a, b) = _figure(WIDE, 2)
    names = {"off": "no prefix caching", "on": "prefix caching"}
    for k, name in names.items():
        a.plot(ps.rates, np.array(ps.p50_ttft_s[k]) * MS, marker="o", label=name)
        b.plot(ps.rates, np.array(ps.attainment[k]) * 100, marker="o", label=name)
    if ttft_slo_s:
        _slo_line(a, ttft_slo_s * MS, "TTFT")
    a.set(xlabel="request rate (requests/s)", ylabel="median TTFT (ms)", yscale="log", title="time to first token")
    b.set(xlabel="request rate (requests/s)", ylabel="requests within the SLO (%)", ylim=(0, 105),
          title="SLO attainment")
    legend_below(fig)
    rows = [(r, names[k], ps.p50_ttft_s[k][i] * MS, ps.p99_ttft_s[k][i] * MS, ps.p50_tpot_s[k][i] * MS,
             ps.attainment[k][i] * 100, ps.kv_mean_fraction[k][i] * 100) for k in names for i, r in enumerate(ps.rates)]
    table = text_table(("rate/s", "", "p50 TTFT ms", "p99 TTFT ms", "p50 TPOT ms", "in SLO %", "KV in use %"), rows,
                       (".3g", "s", ".4g", ".4g", ".4g", ".3g", ".3g"))
    return Plot(fig, table, {"prefix": ps})
