"""Evaluate any policy on any env: N episodes x k samples -> a table artifact."""

from __future__ import annotations

from typing import ClassVar

from prefect import flow
from pydantic import Field, model_validator

from flows.chains import ChainStage, chain_stage
from flows.common import SlotConfig, held, require_model_dir
from flows.policies import PolicyConfig, served
from ludic_core.bounds import MAX_EPISODES, MAX_GROUP, MAX_SEED, bounded
from ludic_core.compose.configs import AgentConfig, EnvConfig
from tasks.artifacts import table_artifact
from tasks.evaluation import evaluate_policy

MAX_COMPARED = 64  # adapters one evaluate run compares


class EvaluateConfig(SlotConfig, ChainStage):
    chain_dir_field: ClassVar[str | None] = None  # it writes no directory: its table is an artifact

    policy: PolicyConfig = Field(description="model dir (in-process) | vLLM server | scripted policy (a baseline)")
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    episodes: int = bounded(200, ge=1, le=MAX_EPISODES, description="prompts (env seeds from `seed`)")
    samples: int = bounded(1, ge=1, le=MAX_GROUP, description="samples per prompt; pass@k is reported for k = samples")
    seed: int = bounded(100_000, ge=0, le=MAX_SEED, description="first env seed")
    temperature: float | None = Field(0.0, ge=0.0, description="0 = greedy; None = the agent's sampling temperature")
    success_threshold: float = Field(1.0, description="an episode succeeds when its return is >= this")
    compare_adapters: tuple[str, ...] = Field(
        (), max_length=MAX_COMPARED, description="LoRA adapters (names the server serves, or adapter directories) "
        "played one after another over the vllm policy's one server in this run, on the same seeds: one table, "
        "a row per adapter; empty = the policy alone")

    @model_validator(mode="after")
    def _episodes_bounded(self) -> EvaluateConfig:
        runs = self.episodes * self.samples * max(len(self.compare_adapters), 1)
        if runs > MAX_EPISODES:
            raise ValueError(f"episodes x samples{' x adapters' if self.compare_adapters else ''} = {runs:,} "
                             f"episodes; at most {MAX_EPISODES:,}")
        if self.compare_adapters and (self.policy.kind != "vllm" or self.policy.adapter is not None):
            raise ValueError("compare_adapters plays adapters over a vllm policy's base: the policy must be kind "
                             "'vllm' without an adapter of its own")
        if len(set(self.compare_adapters)) != len(self.compare_adapters):
            raise ValueError(f"compare_adapters names an adapter twice: {list(self.compare_adapters)}")
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
        if self.compare_adapters:
            from ludic_core.lora.adapter_dir import is_adapter_dir

            for adapter in self.compare_adapters:  # a served name has no "/"; a path must be an adapter
                if "/" in adapter and not is_adapter_dir(adapter):
                    raise FileNotFoundError(f"compare_adapters: {adapter!r} is not an adapter directory "
                                            "(adapter_config.json + adapter_model.safetensors)")


@flow(name="evaluate")
def evaluate(cfg: EvaluateConfig) -> dict[str, float]:
    policy = getattr(cfg.policy, "model_path", None) or getattr(cfg.policy, "policy", None) or cfg.policy.kind
    with held(cfg.slot), chain_stage(cfg, "evaluate", {"policy": str(policy)}):
        return _evaluate(cfg)


def _evaluate(cfg: EvaluateConfig) -> dict[str, float]:
    cfg.preflight()
    if cfg.compare_adapters:
        return _compare_adapters(cfg)
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


def _compare_adapters(cfg: EvaluateConfig) -> dict[str, float]:
    """Each adapter in turn over one server (started once, or the block's): a directory is
    loaded for its turn and unloaded after it. Returns {"ADAPTER/METRIC": value}."""
    from ludic_core.compose.serving import served_adapter, widest_adapter

    policy = cfg.policy.model_copy(update={"adapter": widest_adapter(cfg.compare_adapters)})
    results: dict[str, dict[str, float]] = {}
    with served(policy, load_adapter=False) as (endpoint, key):
        root_url = endpoint["base_url"].removesuffix("/v1")
        for adapter in cfg.compare_adapters:
            with served_adapter(root_url, key.get_secret_value() if key else None, adapter) as name:
                results[adapter] = evaluate_policy(
                    cfg.policy, cfg.env, cfg.agent, seeds=list(range(cfg.seed, cfg.seed + cfg.episodes)),
                    samples=cfg.samples, temperature=cfg.temperature, success_threshold=cfg.success_threshold,
                    endpoint={**endpoint, "model": name}, api_key=key)
    rows = [{"adapter": adapter, **{k: round(v, 4) for k, v in metrics.items()}} for adapter, metrics in results.items()]
    base = cfg.policy.model_path or cfg.policy.endpoint_block
    table_artifact("adapter-comparison", rows, f"{len(rows)} adapters over {base} on {cfg.env.name}, "
                                               f"seeds {cfg.seed}..{cfg.seed + cfg.episodes - 1}")
    return {f"{adapter}/{k}": v for adapter, metrics in results.items() for k, v in metrics.items()}
