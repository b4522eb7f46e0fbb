"""vLLM inference for training flows: which server, and what to do when it dies.

A flow either starts its own server for the run (stopped at the end, whatever
happens) or uses a running one named by an `InferenceEndpoint` block. Stages
then roll out through it and push weights into it. Prefect's own task retry
cannot help when the server has died (every retry would hit the same dead
port), so a stage is retried here instead: before each attempt the server is
health-checked and, if it is ours, restarted on the same port; the retried
stage resumes from the last checkpoint and first republishes those weights.
A LoRA run publishes its adapter (`lora`), so a server the flow starts for
it serves LoRA adapters at the run's rank (`compose.serving`).
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from typing import Callable, Iterator

from prefect import get_run_logger
from pydantic import SecretStr

from flows.policies import endpoint_from_block
from ludic_core.compose.serving import server_for_run
from ludic_core.config import LoRAConfig, VLLMConfig, VLLMEndpoint
from ludic_core.lazy import renamed_exports
from ludic_core.stages.run import StageSpec
from ludic_core.vllm.publisher import AdapterLoadError, WeightPushError
from tasks.inference import ensure_server, start_server, stop_server, watch_server
from tasks.training import train_stage

__all__ = ["vllm_inference"]

KEY_ENV = "LUDIC_VLLM_API_KEY"


#: renamed in issue 56: the flows' vLLM settings are now the one vLLM config, with the same fields
__getattr__ = renamed_exports(__name__, {"VLLMSettings": "ludic_core.config:VLLMConfig"})


@contextmanager
def vllm_inference(settings: VLLMConfig, model_path: str, *, launcher: str, nproc: int,
                   lora: LoRAConfig | None = None) -> Iterator[tuple[VLLMEndpoint, Callable[[StageSpec], dict]]]:
    """Yields (endpoint for StageSpec.vllm, run_one for run_stages). `lora`: the run's
    trainer.lora (None = a full fine-tune)."""
    log = get_run_logger()
    state: dict = {"server": None}
    server_cfg = server_for_run(settings.server, lora, settings.lora)
    if settings.endpoint_block:
        endpoint = endpoint_from_block(settings.endpoint_block)
        base_url, model, key = endpoint["base_url"], endpoint["model"], endpoint["api_key"]
    else:
        key = secrets.token_urlsafe(24)
        state["server"] = start_server(model_path, server_cfg, SecretStr(key))
        base_url, model = state["server"]["base_url"], settings.server.served_model_name
    previous_key = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = key or ""  # stages (and torchrun children) read the key from here

    def run_one(spec: StageSpec) -> dict:
        for attempt in range(1, settings.stage_attempts + 1):
            if state["server"] is not None:
                state["server"] = ensure_server(state["server"], model_path, server_cfg, SecretStr(key))
            try:
                return train_stage.with_options(retries=0)(spec, launcher=launcher, nproc=nproc)
            except (WeightPushError, AdapterLoadError):
                raise  # a refused push (wrong shape, missing parameter) fails the same way every time
            except Exception as exc:
                if attempt == settings.stage_attempts:
                    if state["server"] is not None:
                        with watch_server(state["server"]):
                            raise
                    raise
                log.warning("stage to step %d failed (attempt %d of %d: %s); retrying from the last checkpoint",
                            spec.until_step, attempt, settings.stage_attempts, exc)
        raise AssertionError("unreachable")

    try:
        yield settings.endpoint(base_url, model, KEY_ENV), run_one
    finally:
        if previous_key is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = previous_key
        if state["server"] is not None:
            stop_server(state["server"]["pid"])
