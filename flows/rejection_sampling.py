"""Rejection sampling: a teacher plays any env -> keep by a rule -> a chat dataset."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, get_run_logger
from pydantic import Field, model_validator

from flows.chains import ChainStage, chain_stage
from flows.common import SlotConfig, held, require_model_dir
from flows.policies import PolicyConfig, served
from ludic_core.bounds import MAX_EPISODES, MAX_GROUP, bounded
from ludic_core.compose.configs import AgentConfig, EnvConfig, SeedSchedule
from ludic_core.rejection import KeepRule
from tasks.artifacts import table_artifact
from tasks.rollouts import rejection_sample


class RejectionSamplingConfig(SlotConfig, ChainStage):
    """A teacher's episodes through the student's agent stack, filtered by a keep rule."""

    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    teacher: PolicyConfig = Field(description="scripted policy | model dir (in-process) | vLLM server")
    student_path: str | None = Field(
        None, description="the student's model dir: scripted replies are tokenised with its tokenizer, and exact "
                          "token ids are stored when the teacher's tokenizer is the same; None = messages only")
    prompts: int = bounded(4096, ge=1, le=MAX_EPISODES, description="env seeds (prompts) to sample")
    samples_per_prompt: int = bounded(1, ge=1, le=MAX_GROUP, description="episodes per prompt")
    schedule: SeedSchedule = Field(SeedSchedule(start=1), description="which env seeds")
    keep: KeepRule = Field(KeepRule(min_return=1.0), description="which episodes to keep")
    out_dir: str = Field("runs/rejection", description="where the dataset is written")

    @model_validator(mode="after")
    def _episodes_bounded(self) -> RejectionSamplingConfig:
        if self.prompts * self.samples_per_prompt > MAX_EPISODES:
            raise ValueError(f"prompts x samples_per_prompt = {self.prompts * self.samples_per_prompt:,} episodes; "
                             f"at most {MAX_EPISODES:,}")
        return self

    def preflight(self) -> None:
        from ludic_core.compose.build import check_agent, check_env
        from ludic_core.compose.policy import check_policy

        if self.student_path is not None:
            require_model_dir("student_path", self.student_path)
        for field in ("model_path",):
            path = getattr(self.teacher, field, None)
            if path is not None:
                require_model_dir(f"teacher.{field}", path)
        check_env(self.env)
        check_agent(self.agent)
        check_policy(self.teacher)


@flow(name="rejection_sampling")
def rejection_sampling(cfg: RejectionSamplingConfig) -> str:
    """Returns the dataset path. Skipped when a finished dataset already exists."""
    with held(cfg.slot), chain_stage(cfg, "rejection_sampling", {"student_path": str(cfg.student_path),
                                                                 "out_dir": cfg.out_dir}):
        return _rejection_sampling(cfg)


def _rejection_sampling(cfg: RejectionSamplingConfig) -> str:
    done = Path(cfg.out_dir) / "done.json"
    if done.exists():
        result = json.loads(done.read_text())
        get_run_logger().info("rejection sampling already done: %s", result["dataset_path"])
        return result["dataset_path"]
    cfg.preflight()
    with served(cfg.teacher) as (endpoint, key):
        result = rejection_sample(cfg.teacher, cfg.env, cfg.agent, student_path=cfg.student_path,
                                  prompts=cfg.prompts, samples=cfg.samples_per_prompt, schedule=cfg.schedule,
                                  keep=cfg.keep, out_dir=cfg.out_dir, endpoint=endpoint, api_key=key)
    table_artifact("rejection-sampling", [dict(result)], f"rejection sampling on {cfg.env.name}")
    done.write_text(json.dumps(result))
    return result["dataset_path"]
