"""Rejection sampling as a task (idempotent: it rewrites its outputs, so it is retried)."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from ludic_core.compose.configs import AgentConfig, EnvConfig, SeedSchedule
from ludic_core.compose.policy import open_client
from ludic_core.rejection import KeepRule
from ludic_core.rejection_sampling import rejection_sample as sample
from tasks.retries import retry_unless_stopping


@task(name="rejection-sample", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1,
      retry_condition_fn=retry_unless_stopping)
def rejection_sample(teacher: Any, env: EnvConfig, agent: AgentConfig, *, student_path: str | None,
                     prompts: int, samples: int, schedule: SeedSchedule, keep: KeepRule, out_dir: str,
                     endpoint: dict | None = None, api_key: SecretStr | None = None) -> dict:
    tokenizer = None
    if student_path:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(student_path)
    ep = {**endpoint, "api_key": api_key.get_secret_value() if api_key else None} if endpoint else None
    client, fingerprint = open_client(teacher, tokenizer, ep)
    if tokenizer is not None and fingerprint is not None:
        from ludic_core.models import tokenizer_fingerprint

        fingerprint = fingerprint if fingerprint == tokenizer_fingerprint(tokenizer) else None
    result = sample(client, env, agent, seeds=schedule.seeds(prompts), samples=samples, keep=keep,
                    out_dir=out_dir, fingerprint=fingerprint if student_path else None)
    get_run_logger().info("kept %d of %d episodes (%s) -> %s", result["kept"], result["sampled"],
                          "token ids + messages" if result["token_ids"] else "messages only", result["dataset_path"])
    return result
