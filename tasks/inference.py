"""Inference-server tasks: start a vLLM server (retried), make sure it is up, stop it.

The server outlives the tasks (a process of its own); tasks hand around a small
dict (pid, URLs, log path), never a process object, and never the API key:
the key goes in as a `SecretStr` (masked wherever Prefect records inputs).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from ludic_core.inference.errors import InferenceServerError
from ludic_core.vllm.server import VLLMServer, VLLMServerConfig, start_vllm_server, stop_server_pid
from tasks.retries import retry_unless_stopping


def _handle(server: dict) -> VLLMServer:
    return VLLMServer(server["pid"], server["host"], server["port"], server["log_path"], server["model"],
                      server["build"])


def death_notice(server: dict) -> str | None:
    """None while the server process lives; else what a person needs to know:
    which server died and the end of its log (an OOM kill, a CUDA error...)."""
    handle = _handle(server)
    if handle.alive():
        return None
    return (f"the vLLM server (pid {server['pid']}, {server['base_url']}) exited while the run was using it; "
            f"last lines of its log {server['log_path']}:\n{handle.log_tail()}")


@contextmanager
def watch_server(server: dict) -> Iterator[None]:
    """Turn an error raised while `server` is in use into an `InferenceServerError`
    naming the dead server and quoting its log, when the server is what died
    (the client alone only sees a refused connection)."""
    try:
        yield
    except Exception as exc:
        notice = death_notice(server)
        if notice is None:
            raise
        raise InferenceServerError(notice) from exc


def _describe(server: VLLMServer) -> dict:
    return {"pid": server.pid, "base_url": server.base_url, "root_url": server.root_url,
            "host": server.host, "port": server.port, "log_path": server.log_path,
            "model": server.model_name, "build": server.build, "startup_s": round(server.startup_seconds, 1),
            "lora_rank": server.lora_rank}


@task(name="start-vllm-server", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2,
      retry_condition_fn=retry_unless_stopping)
def start_server(model_path: str, cfg: VLLMServerConfig, api_key: SecretStr) -> dict:
    """Start and health-wait; a failed start leaves nothing running, so a retry is clean."""
    server, _ = start_vllm_server(model_path, cfg, api_key=api_key.get_secret_value())
    get_run_logger().info("vLLM (%s) serving %s at %s, pid %d, healthy after %.0f s%s; log %s", server.build,
                          model_path, server.base_url, server.pid, server.startup_seconds,
                          f", LoRA adapters up to rank {server.lora_rank}" if server.lora_rank else "", server.log_path)
    return _describe(server)


@task(name="ensure-vllm-server", cache_policy=NO_CACHE)
def ensure_server(server: dict, model_path: str, cfg: VLLMServerConfig, api_key: SecretStr) -> dict:
    """The same server if it answers /health, else a fresh one on the same port."""
    if _handle(server).responsive():
        return server
    get_run_logger().warning("vLLM server pid %d at %s is gone; restarting it", server["pid"], server["base_url"])
    stop_server_pid(server["pid"])  # whatever is left of its process group
    return start_server(model_path, cfg.model_copy(update={"port": server["port"]}), api_key)


@task(name="stop-vllm-server", cache_policy=NO_CACHE)
def stop_server(pid: int) -> bool:
    """Idempotent: False when it was not running any more."""
    stopped = stop_server_pid(pid)
    get_run_logger().info("vLLM server pid %d %s", pid, "stopped" if stopped else "was not running")
    return stopped
