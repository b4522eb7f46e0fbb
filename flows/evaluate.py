"""Evaluate any policy on any env: N episodes x k samples -> a table artifact."""

from __future__ import annotations

from prefect import flow
from pydantic import Field, model_validator

from flows.common import SlotConfig, held, require_model_dir
from flows.policies import PolicyConfig, served
from ludic_core.bounds import MAX_EPISODES, MAX_GROUP, MAX_SEED, bounded
from ludic_core.compose.configs import AgentConfig, EnvConfig
from tasks.artifacts import table_artifact
from tasks.evaluation import evaluate_policy


class EvaluateConfig(SlotConfig):
    policy: PolicyConfig = Field(description="model dir (in-process) | vLLM server | scripted policy (a baseline)")
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    episodes: int = bounded(200, ge=1, le=MAX_EPISODES, description="prompts (env seeds from `seed`)")
    samples: int = bounded(1, ge=1, le=MAX_GROUP, description="samples per prompt; pass@k is reported for k = samples")
    seed: int = bounded(100_000, ge=0, le=MAX_SEED, description="first env seed")
    temperature: float | None = Field(0.0, ge=0.0, description="0 = greedy; None = the agent's sampling temperature")
    success_threshold: float = Field(1.0, description="an episode succeeds when its return is >= this")

    @model_validator(mode="after")
    def _episodes_bounded(self) -> EvaluateConfig:
        if self.episodes * self.samples > MAX_EPISODES:
            raise ValueError(f"episodes x samples = {self.episodes * self.samples:,} episodes; "
                             f"at most {MAX_EPISODES:,}")
        return self

    def preflight(self) -> None:
        from ludic_core.compose.build import check_agent, check_env
        from ludic_core.compose.policy import check_policy

        path = getattr(self.policy, "model_path", None)
        if path is not None:
            require_model_dir("policy.model_path", path)
        check_env(self.env)
        check_agent(self.agent)
        check_policy(self.policy)


@flow(name="evaluate")
def evaluate(cfg: EvaluateConfig) -> dict[str, float]:
    with held(cfg.slot):  # runs naming the same slot never overlap
        return _evaluate(cfg)


def _evaluate(cfg: EvaluateConfig) -> dict[str, float]:
    cfg.preflight()
    with served(cfg.policy) as (endpoint, key):
        metrics = evaluate_policy(cfg.policy, cfg.env, cfg.agent,
                                  seeds=list(range(cfg.seed, cfg.seed + cfg.episodes)), samples=cfg.samples,
                                  temperature=cfg.temperature, success_threshold=cfg.success_threshold,
                                  endpoint=endpoint, api_key=key)
    rows = [{"metric": k, "value": round(v, 4)} for k, v in metrics.items()]
    subject = getattr(cfg.policy, "model_path", None) or getattr(cfg.policy, "policy", None) or cfg.policy.kind
    if getattr(cfg.policy, "adapter", None):
        subject = f"{subject} + adapter {cfg.policy.adapter}"
    table_artifact("evaluation", rows, f"{subject} on {cfg.env.name}")
    return metrics
