"""Launch vLLM's OpenAI server for a model directory, health-waited.

CPU or CUDA build, whichever the chosen interpreter has (see `vllm.setup`);
`vllm.preflight` checks that interpreter first (vLLM's torch pin, a CUDA torch
that sees a GPU), so a mismatch is one clear error, not a crash in the log.
The server is started with what ludic relies on:
  * `--logprobs-mode processed_logprobs`: log-probs of the distribution
    actually sampled from (after temperature / top-p), the convention
    `LocalChatClient` and the trainer's importance ratio use;
  * `--generation-config vllm`: the model's generation_config.json must not
    silently change sampling (every request states its own);
  * the RL routes (VLLM_SERVER_DEV_MODE=1) and the weight-transfer engine:
    vLLM's NCCL engine on CUDA, ludic's gloo engine (`vllm.plugin`) on CPU;
  * an API key on every route (vLLM guards only /v1..., our middleware the
    rest), handed over in VLLM_API_KEY so it never shows in `ps`;
  * bound to 127.0.0.1 unless told otherwise;
  * with `max_lora_rank`: LoRA serving (`--enable-lora`) and runtime adapter
    loading (VLLM_ALLOW_RUNTIME_LORA_UPDATING, which switches on
    /v1/load_lora_adapter and /v1/unload_lora_adapter), so a LoRA run
    publishes megabytes of adapter per step instead of the whole model.
The server runs in its own process group so `stop()` also ends the engine-core
and worker processes it spawns.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ludic_core.bounds import (MAX_CONCURRENCY, MAX_KV_CACHE_GIB, MAX_LORA_RANK, MAX_SECONDS, MAX_SEQ_LEN,
                               MAX_TOKEN_BUDGET, bounded)
from ludic_core.frozen import FrozenModel
from ludic_core.inference.errors import InferenceServerError
from ludic_core.lifetime import with_parent
from ludic_core.ports import free_port

__all__ = ["VLLMServerConfig", "VLLMServer", "start_vllm_server", "stop_server_pid", "detect_build",
           "resolve_python", "pid_alive", "served_lora_rank", "VLLM_LORA_RANKS", "START_MARK"]

#: The line each start writes into `server-PORT.log` before the server's own output: a server
#: restarted on its port (after a crash) appends to its predecessor's log, which it must not erase.
START_MARK = "===== ludic: vLLM server start"

#: The `--max-lora-rank` values vLLM accepts (`vllm.config.lora.MaxLoRARanks` in 0.27-0.32).
#: Its LoRA kernels are built for these; any other value is refused at start-up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def served_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds adapters of rank `rank`.

    `--max-lora-rank` sizes the server's adapter slots: an adapter of a lower
    rank is zero-padded into them, so rounding up only costs slot memory.
    """
    if rank < 1:
        raise ValueError(f"a LoRA rank is >= 1, got {rank}")
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise ValueError(f"LoRA rank {rank} is above the largest vLLM serves ({VLLM_LORA_RANKS[-1]}): "
                         "train a smaller adapter or publish merged weights (lora_publish: merged)")
    return fits[0]


class VLLMServerConfig(FrozenModel):
    """How to launch a vLLM server (the model directory is given separately)."""

    python: str | None = Field(None, description="interpreter with vLLM; default: $LUDIC_VLLM_PYTHON, "
                                                 "then .venv-vllm (see `ludic serve --setup`)")
    build: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="the vLLM build the interpreter must have; auto = whichever it has")
    host: str = Field("127.0.0.1", description="bind address; keep loopback unless the network is trusted")
    port: int = Field(0, ge=0, le=65535, description="0 = a free port")
    served_model_name: str = Field("policy", min_length=1, description="the `model` field of requests")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    max_model_len: int | None = bounded(None, ge=16, le=MAX_SEQ_LEN, description="None = the model's own")
    max_num_batched_tokens: int = bounded(16384, ge=256, le=MAX_TOKEN_BUDGET,
                                          description="large: avoids a seeded chunked-prefill crash on CPU")
    kv_cache_gib: int = bounded(1, ge=1, le=MAX_KV_CACHE_GIB, description="VLLM_CPU_KVCACHE_SPACE on the CPU build")
    worker_spin_s: float | None = Field(
        0.05, ge=0, le=1, description="CPU build: how long vLLM's worker spins after each message before it "
                                      "sleeps (vLLM's own: 1 s, a core busy after every batch); None = vLLM's")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="CUDA build only")
    enforce_eager: bool = Field(True, description="skip torch.compile: ~20 s faster start-up")
    weight_transfer: Literal["auto", "ludic_gloo", "nccl"] = Field(
        "auto", description="auto = nccl on the CUDA build, ludic_gloo on the CPU build")
    tool_call_parser: str | None = Field("hermes", description="None disables tool-call parsing")
    startup_timeout_s: float = bounded(300.0, gt=0, le=MAX_SECONDS, description="seconds to wait for a healthy server")
    log_dir: str = Field("runs/vllm", description="server logs go to LOG_DIR/server-PORT.log")
    max_lora_rank: int | None = bounded(
        None, ge=1, le=MAX_LORA_RANK,
        description="serve LoRA adapters up to this rank (--enable-lora, loadable at runtime); rounded up to a "
                    "rank vLLM accepts (1, 8, 16, 32, 64, 128, 256, 320, 512); None = no LoRA serving")
    max_loras: int = bounded(2, ge=1, le=MAX_CONCURRENCY,
                             description="adapters one batch can mix (--max-loras): 2 lets requests on the "
                                         "previous version finish beside the newest while a publish lands")
    max_cpu_loras: int | None = bounded(None, ge=1, le=MAX_CONCURRENCY,
                                        description="adapters cached in host memory (--max-cpu-loras); "
                                                    "None = vLLM's default (max_loras)")
    extra_args: tuple[str, ...] = Field((), description="more `vllm serve` flags, passed as given")

    @model_validator(mode="after")
    def _lora_settings_fit(self) -> VLLMServerConfig:
        if self.max_lora_rank is not None:
            served_lora_rank(self.max_lora_rank)  # above vLLM's largest: refused now, naming the rank
            if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
                raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}): "
                                 "vLLM caches at least the adapters one batch uses")
        return self


def resolve_python(cfg: VLLMServerConfig) -> str:
    from ludic_core.vllm.setup import env_python

    python = cfg.python or os.environ.get("LUDIC_VLLM_PYTHON") or str(env_python())
    if not Path(python).exists():
        raise FileNotFoundError(f"no vLLM interpreter at {python}; run `ludic serve --setup` "
                                "(or set python / LUDIC_VLLM_PYTHON)")
    return python


def detect_build(python: str) -> Literal["cpu", "cuda"]:
    """Which vLLM distribution `python` has, without importing vLLM (slow).
    No checks: `start_vllm_server` runs the full `vllm.preflight` instead."""
    from ludic_core.vllm.preflight import gather_facts, installed_build

    build = installed_build(gather_facts(python, gpu=False))
    if build is None:
        raise FileNotFoundError(f"{python} has no vLLM installed; run `ludic serve --setup`")
    return build


def build_command(model_path: str, cfg: VLLMServerConfig, *, python: str, port: int,
                  build: str) -> tuple[list[str], dict[str, str]]:
    """The server's argv and the environment additions (no secrets)."""
    from ludic_core.vllm.plugin import EXTENSION_CLS, PLUGIN_DIR, SPIN_ENV

    backend = cfg.weight_transfer if cfg.weight_transfer != "auto" else ("nccl" if build == "cuda" else "ludic_gloo")
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
           "--served-model-name", cfg.served_model_name, "--host", cfg.host, "--port", str(port),
           "--dtype", cfg.dtype, "--max-num-batched-tokens", str(cfg.max_num_batched_tokens),
           "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
           "--worker-extension-cls", EXTENSION_CLS,
           "--weight-transfer-config", json.dumps({"backend": backend}),
           "--middleware", "ludic_vllm_auth.require_api_key"]
    if cfg.max_model_len:
        cmd += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.enforce_eager:
        cmd.append("--enforce-eager")
    if cfg.tool_call_parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", cfg.tool_call_parser]
    if build == "cuda":
        cmd += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    env = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(PLUGIN_DIR)}
    if build == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.kv_cache_gib)
        if cfg.worker_spin_s is not None:
            env[SPIN_ENV] = str(cfg.worker_spin_s)
    if cfg.max_lora_rank is not None:
        cmd += lora_flags(cfg)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # vLLM's documented switch for the load/unload routes
    return cmd + list(cfg.extra_args), env


def lora_flags(cfg: VLLMServerConfig) -> list[str]:
    """`vllm serve` flags for LoRA serving (`cfg.max_lora_rank` set)."""
    assert cfg.max_lora_rank is not None
    flags = ["--enable-lora", "--max-lora-rank", str(served_lora_rank(cfg.max_lora_rank)),
             "--max-loras", str(cfg.max_loras)]
    if cfg.max_cpu_loras is not None:
        flags += ["--max-cpu-loras", str(cfg.max_cpu_loras)]
    return flags


@dataclass
class VLLMServer:
    """A running server: where it listens and how to stop it."""

    pid: int
    host: str
    port: int
    log_path: str
    model_name: str
    build: str
    startup_seconds: float = 0.0
    process: subprocess.Popen | None = None
    lora_rank: int | None = None  # the largest adapter rank it serves (--max-lora-rank); None = no LoRA

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (what `openai.OpenAI(base_url=...)` takes)."""
        return f"{self.root_url}/v1"

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return pid_alive(self.pid) and _runs_vllm(self.pid)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        return self.alive() and _health_ok(self.root_url, timeout_s)

    def responsive(self, *, tries: int = 3, timeout_s: float = 5.0, pause_s: float = 1.0) -> bool:
        """Healthy within a few probes. A live server busy decoding on 2 cores can
        miss one short probe; restarting it for that would throw away a good server."""
        for attempt in range(tries):
            if not self.alive():
                return False
            if _health_ok(self.root_url, timeout_s):
                return True
            if attempt + 1 < tries:
                time.sleep(pause_s)
        return False

    def stop(self, timeout_s: float = 20.0) -> None:
        stop_server_pid(self.pid, timeout_s=timeout_s)
        if self.process is not None:
            try:
                self.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def wait_for_health(base_url: str, timeout_s: float, pause_s: float = 1.0) -> float:
    """Block until the server at `base_url` (its OpenAI root, `.../v1`) answers
    /health, e.g. while its owner restarts it; returns the seconds waited."""
    root, start = base_url.rstrip("/").removesuffix("/v1"), time.monotonic()
    while not _health_ok(root, min(5.0, timeout_s)):
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"the vLLM server at {base_url} did not answer /health within {timeout_s:.0f} s")
        time.sleep(pause_s)
    return time.monotonic() - start


def _health_ok(root_url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(f"{root_url}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _runs_vllm(pid: int) -> bool:
    """False when /proc shows `pid` running something other than vLLM: a saved PID
    of a server that died long ago may belong to an unrelated process by now."""
    try:
        return b"vllm" in Path(f"/proc/{pid}/cmdline").read_bytes().lower()  # titles say "VLLM::..."
    except OSError:  # gone, or no /proc here: callers handle "gone" themselves
        return True


def stop_server_pid(pid: int, *, timeout_s: float = 20.0) -> bool:
    """SIGTERM the server's process group, SIGKILL it after `timeout_s`.
    Returns False when the server itself was not running (or the PID now belongs
    to another program, which is left alone). Only that group is signalled."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        # The leader is gone (and reaped), but its engine-core / worker children may
        # still run in its group; the kernel keeps a group's id from being reused as
        # a pid while any member lives, so this reaches only those stragglers.
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return False
    if not _runs_vllm(pid):
        return False
    leader = pgid if pgid == pid else None  # not a group leader we started: signal the process alone
    kill = (lambda sig: os.killpg(leader, sig)) if leader else (lambda sig: os.kill(pid, sig))
    try:
        kill(signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    try:
        kill(signal.SIGKILL)  # the group's stragglers (engine core, workers) too
    except ProcessLookupError:
        pass
    return True


def start_vllm_server(model_path: str | Path, cfg: VLLMServerConfig | None = None, *,
                      api_key: str | None = None) -> tuple[VLLMServer, str]:
    """Start a server and wait until /health answers; returns (server, api_key).

    Without `api_key` a random one is made: the server never runs open.
    Raises VLLMEnvironmentError before launching when the interpreter cannot
    serve (see `vllm.preflight`), InferenceServerError (with the log's tail) if
    the server exits or does not become healthy within `startup_timeout_s`;
    nothing is left running then.
    """
    from ludic_core.vllm.preflight import preflight

    cfg = cfg or VLLMServerConfig()
    if not Path(model_path, "config.json").exists():
        raise FileNotFoundError(f"{model_path} is not a model directory (no config.json)")
    python = resolve_python(cfg)
    build = preflight(python, build=cfg.build)["build"]
    port = cfg.port or free_port(cfg.host)
    api_key = api_key or secrets.token_urlsafe(24)
    cmd, extra_env = build_command(str(Path(model_path).resolve()), cfg, python=python, port=port, build=build)
    log_dir = Path(cfg.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"server-{port}.log"
    env = {**os.environ, **extra_env, "VLLM_API_KEY": api_key}
    env.pop("VIRTUAL_ENV", None)
    start = time.perf_counter()
    # Its own session: stopped by process group. It gets SIGTERM (and shuts its engine
    # down) when this process dies, however it dies (a cancelled or SIGKILLed flow run).
    with open(log_path, "ab") as log:
        log.write(f"{START_MARK} {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {model_path} on port {port} =====\n"
                  .encode())
        log.flush()
        proc = subprocess.Popen(with_parent(cmd, forward=False), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    server = VLLMServer(proc.pid, cfg.host, port, str(log_path), cfg.served_model_name, build, process=proc,
                        lora_rank=served_lora_rank(cfg.max_lora_rank) if cfg.max_lora_rank else None)
    deadline = time.monotonic() + cfg.startup_timeout_s
    try:
        while not _health_ok(server.root_url, 2.0):
            if not server.alive():
                raise InferenceServerError(f"vLLM server for {model_path} exited with code {proc.poll()} "
                                           f"during start-up; log {log_path}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise InferenceServerError(f"vLLM server on port {port} not healthy after "
                                           f"{cfg.startup_timeout_s:.0f} s; log {log_path}:\n{server.log_tail()}")
            time.sleep(0.5)
    except BaseException:  # incl. Ctrl-C / a cancelled task: the engine-core children of a dead
        server.stop()      # API server can outlive it, and a retry must start clean
        raise
    server.startup_seconds = time.perf_counter() - start
    return server, api_key
