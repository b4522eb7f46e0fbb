"""RL training: rollouts from the current policy -> credit -> train, in
checkpointed stages, with an evaluation after every stage."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Literal

from prefect import flow, get_run_logger
from pydantic import Field

from flows.common import FlowConfig
from flows.staging import run_stages
from flows.vllm_inference import VLLMSettings, vllm_inference
from ludic_core.config import AlgorithmConfig, GRPOConfig, LocalInferenceConfig, TrainerConfig
from ludic_core.training.stage import StageSpec, TicTacToeRLData
from tasks.artifacts import learning_curve_artifact, table_artifact
from tasks.evaluation import evaluate_policy


class RLTrainConfig(FlowConfig):
    model_path: str = Field(description="initial policy (e.g. the SFT model dir)")
    out_dir: str = Field("runs/demo/rl", description="checkpoints and metrics")
    algorithm: AlgorithmConfig = GRPOConfig(group_size=8)
    data: TicTacToeRLData = TicTacToeRLData()
    steps: int = Field(20, ge=1)
    steps_per_stage: int = Field(10, ge=1)
    trainer: TrainerConfig = TrainerConfig(lr=1e-4, micro_token_budget=16384, max_seq_len=512)
    inference: Literal["local", "vllm"] = Field(
        "local", description="local = in-process LocalChatClient (no server); vllm = a vLLM server, see `vllm`")
    vllm: VLLMSettings = Field(VLLMSettings(), description="the vLLM server (inference: vllm only)")
    local: LocalInferenceConfig = Field(
        LocalInferenceConfig(), description="the in-process engine: rollouts (inference: local) and evaluation")
    eval_games: int = Field(100, ge=0, description="greedy games per mark after each stage (0 = off)")
    launcher: Literal["in_process", "torchrun"] = "in_process"
    nproc: int = Field(2, ge=1)
    progress_bar: bool = Field(False, description="console progress bars for the stages")


@flow(name="rl_train", log_prints=True)
def rl_train(cfg: RLTrainConfig) -> str:
    """Returns the final checkpoint's model directory. Evaluation runs in-process
    on each stage's checkpoint, whichever inference the rollouts use."""
    serving = (vllm_inference(cfg.vllm, cfg.model_path, launcher=cfg.launcher, nproc=cfg.nproc)
               if cfg.inference == "vllm" else nullcontext((None, None)))
    with serving as (endpoint, run_one):
        spec = StageSpec(model_path=cfg.model_path, checkpoint_dir=f"{cfg.out_dir}/checkpoints",
                         algorithm=cfg.algorithm, trainer=cfg.trainer, data=cfg.data, until_step=cfg.steps,
                         metrics_path=f"{cfg.out_dir}/metrics.jsonl", progress_bar=cfg.progress_bar, vllm=endpoint,
                         local=cfg.local)
        return _train_and_evaluate(cfg, spec, run_one)


def _train_and_evaluate(cfg: RLTrainConfig, spec: StageSpec, run_one) -> str:
    evals = []
    for target in list(range(cfg.steps_per_stage, cfg.steps, cfg.steps_per_stage)) + [cfg.steps]:
        result = run_stages(spec, total_steps=target, steps_per_stage=cfg.steps_per_stage,
                            launcher=cfg.launcher, nproc=cfg.nproc, title=f"RL to step {target}", run_one=run_one)
        if cfg.eval_games:
            m = evaluate_policy(result["model_path"], games_per_mark=cfg.eval_games, local=cfg.local)
            evals.append({"step": result["step"], **{k: round(v, 3) for k, v in m.items() if "rate" in k}})
            get_run_logger().info("eval at step %d: X win+draw %.3f, O win+draw %.3f",
                                  result["step"], m["X/win_draw_rate"], m["O/win_draw_rate"])
    if evals:
        table_artifact("rl-evaluations", evals, "greedy evaluation after each RL stage")
    learning_curve_artifact("rl-learning-curve", spec.metrics_path, fields=("loss", "reward_mean"))
    return result["model_path"]
