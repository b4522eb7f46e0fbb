"""RL training on any env: rollouts from the current policy -> credit -> train,
in checkpointed stages, with an evaluation after every stage."""

from __future__ import annotations

from contextlib import nullcontext
from typing import ClassVar, Literal

from prefect import flow, get_run_logger
from pydantic import Field, model_validator

from flows.chains import ChainStage, chain_stage
from flows.common import SCHEDULE_FOLLOWS_STEPS, MultiNodeLaunchConfig, held, require_model_dir
from flows.loggers import wandb_spec
from flows.staging import run_stages
from flows.vllm_inference import vllm_inference
from ludic_core.bounds import MAX_BATCH, MAX_EPISODES, MAX_SEED, MAX_STEPS, bounded
from ludic_core.compose.configs import BRANCH_HELP, AgentConfig, BranchConfig, EnvConfig, SeedSchedule
from ludic_core.compose.policy import ModelPolicy
from ludic_core.compose.serving import server_for_run
from ludic_core.config import (RL_TRAINER, AlgorithmConfig, GRPOConfig, LocalInferenceConfig, TrainerConfig,
                               VLLMConfig, VLLMEndpoint, group_size_of)
from ludic_core.stages.run import RolloutData, StageSpec
from tasks.artifacts import adapters_artifact, learning_curve_artifact, table_artifact
from tasks.evaluation import evaluate_policy


class RLTrainConfig(MultiNodeLaunchConfig, ChainStage):
    follows: ClassVar[dict[str, str]] = SCHEDULE_FOLLOWS_STEPS

    model_path: str = Field(description="initial policy (e.g. the SFT model dir)")
    out_dir: str = Field("runs/rl", description="checkpoints and metrics")
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    algorithm: AlgorithmConfig = Field(GRPOConfig(group_size=8),
                                       description="its group_size is the samples per prompt (stated only here)")
    requests_per_step: int = bounded(8, ge=1, le=MAX_BATCH, description="prompts (env seeds) per step")
    schedule: SeedSchedule = Field(SeedSchedule(start=1_000), description="env seeds of consecutive steps")
    branch: BranchConfig | None = Field(None, description=BRANCH_HELP)
    steps: int = bounded(20, ge=1, le=MAX_STEPS, description="optimizer steps")
    steps_per_stage: int = bounded(10, ge=1, le=MAX_STEPS, description="each stage ends in a checkpoint")
    trainer: TrainerConfig = Field(
        RL_TRAINER,
        description="optimisation settings: a partial mapping changes only what it names; total_steps follows steps")
    inference: Literal["local", "vllm"] = Field(
        "local", description="local = in-process LocalChatClient (no server); vllm = a vLLM server, see `vllm`")
    vllm: VLLMConfig = Field(VLLMConfig(), description="the vLLM server (inference: vllm only)")
    local: LocalInferenceConfig = Field(
        LocalInferenceConfig(), description="the in-process engine: rollouts (inference: local) and evaluation")
    eval_env: EnvConfig | None = Field(None, description="env of the evaluations after each stage (None = env)")
    eval_episodes: int = bounded(100, ge=0, le=MAX_EPISODES, description="greedy episodes after each stage (0 = off)")
    eval_seed: int = bounded(100_000, ge=0, le=MAX_SEED, description="first env seed of those evaluations")
    progress_bar: bool = Field(False, description="console progress bars for the stages")
    wandb_block: str | None = Field(None, description="name of a WandbSettings block: log the stages to wandb")

    @model_validator(mode="after")
    def _group_size_stated(self) -> RLTrainConfig:
        group_size_of(self.algorithm)  # a group algorithm without group_size fails here, naming it
        if self.nodes.nnodes > 1 and self.inference == "vllm" and self.vllm.endpoint_block is None:
            raise ValueError("nodes.nnodes > 1 with inference vllm: a server this run starts listens on loopback; "
                             "name an InferenceEndpoint block (vllm.endpoint_block) every node can reach")
        if self.inference == "vllm":  # a LoRA run's adapters need a server with LoRA serving at its rank
            server_for_run(self.vllm.server, self.trainer.lora, self.vllm.lora)
        return self

    def preflight(self) -> None:
        from ludic_core.batching.branching import check_branching
        from ludic_core.compose.build import check_agent, check_algorithm, check_env
        from ludic_core.registry import resolve

        require_model_dir("model_path", self.model_path)
        check_env(self.env)
        check_agent(self.agent)
        check_algorithm(self.algorithm)
        if self.branch is not None:
            check_branching(self.env.name, resolve("env", self.env.name), group_size_of(self.algorithm))
        if self.eval_env is not None:
            check_env(self.eval_env)


@flow(name="rl_train")
def rl_train(cfg: RLTrainConfig) -> str:
    """Returns the final checkpoint's model directory. Evaluation runs in-process
    on each stage's checkpoint, whichever inference the rollouts use."""
    with held(cfg.slot), chain_stage(cfg, "rl_train", {"model_path": cfg.model_path, "out_dir": cfg.out_dir}):
        return _rl_train(cfg)


def _rl_train(cfg: RLTrainConfig) -> str:
    cfg.preflight()
    serving = (vllm_inference(cfg.vllm, cfg.model_path, launcher=cfg.launcher, nproc=cfg.nproc,
                              lora=cfg.trainer.lora)
               if cfg.inference == "vllm" else nullcontext((None, None)))
    with serving as (endpoint, run_one):
        return _train_and_evaluate(cfg, stage_spec(cfg, endpoint), run_one)


def stage_spec(cfg: RLTrainConfig, endpoint: VLLMEndpoint | None = None) -> StageSpec:
    """What each of the run's training stages runs (up to `cfg.steps`; `run_stages` sets each
    stage's end): fresh rollouts of `cfg.env`, credit and loss from `cfg.algorithm`."""
    return StageSpec(model_path=cfg.model_path, checkpoint_dir=f"{cfg.out_dir}/checkpoints",
                     algorithm=cfg.algorithm, trainer=cfg.trainer, until_step=cfg.steps,
                     data=RolloutData(env=cfg.env, agent=cfg.agent, requests_per_step=cfg.requests_per_step,
                                      schedule=cfg.schedule, branch=cfg.branch),
                     metrics_path=f"{cfg.out_dir}/metrics.jsonl", progress_bar=cfg.progress_bar,
                     title=f"RL ({cfg.algorithm.type})", vllm=endpoint, local=cfg.local, nodes=cfg.nodes,
                     wandb=wandb_spec(cfg.wandb_block, run_name=f"rl:{cfg.out_dir}", directory=cfg.out_dir))


def _train_and_evaluate(cfg: RLTrainConfig, spec: StageSpec, run_one) -> str:
    evals = []
    for target in list(range(cfg.steps_per_stage, cfg.steps, cfg.steps_per_stage)) + [cfg.steps]:
        result = run_stages(spec, total_steps=target, steps_per_stage=cfg.steps_per_stage,
                            launcher=cfg.launcher, nproc=cfg.nproc, title=f"RL to step {target}", run_one=run_one)
        if cfg.eval_episodes:
            m = evaluate_policy(ModelPolicy(model_path=result["model_path"], local=cfg.local), cfg.eval_env or cfg.env,
                                cfg.agent, seeds=list(range(cfg.eval_seed, cfg.eval_seed + cfg.eval_episodes)))
            evals.append({"step": result["step"], **{k: round(v, 4) for k, v in m.items()}})
            get_run_logger().info("eval at step %d: mean return %.3f, success rate %.3f",
                                  result["step"], m["mean_return"], m["success_rate"])
    if evals:
        table_artifact("rl-evaluations", evals, "greedy evaluation after each RL stage")
    if spec.vllm is not None and spec.vllm.lora.publishes_adapters(spec.trainer.lora):
        adapters_artifact(spec.vllm.lora.directory(spec.checkpoint_dir))
    learning_curve_artifact("rl-learning-curve", spec.metrics_path, fields=("loss", "reward_mean"))
    return result["model_path"]
