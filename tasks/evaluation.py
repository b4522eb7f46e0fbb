"""Evaluation task: any policy on any env -> a flat metrics dict."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from ludic_core.compose.configs import AgentConfig, EnvConfig
from ludic_core.compose.policy import open_client
from ludic_core.eval import evaluate_policy as evaluate
from tasks.retries import retry_unless_stopping


@task(name="evaluate-policy", cache_policy=NO_CACHE, retries=1,
      retry_condition_fn=retry_unless_stopping)
def evaluate_policy(policy: Any, env: EnvConfig, agent: AgentConfig, *, seeds: list[int], samples: int = 1,
                    temperature: float | None = 0.0, success_threshold: float = 1.0, endpoint: dict | None = None,
                    api_key: SecretStr | None = None) -> dict[str, float]:
    ep = {**endpoint, "api_key": api_key.get_secret_value() if api_key else None} if endpoint else None
    client, _ = open_client(policy, None, ep)  # a scripted policy needs no tokenizer to be scored
    return evaluate(client, env, agent, seeds=seeds, samples=samples, temperature=temperature,
                    success_threshold=success_threshold)
