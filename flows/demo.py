"""The demo chain: rejection sampling -> SFT -> RL on tic-tac-toe, tiny model, CPU.

Each stage's output path is the next stage's input and is recorded in a
lineage artifact; evaluations before SFT, after SFT and after RL become a table
artifact and the flow's return value. Re-running after a crash skips the
stages whose outputs exist.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow
from pydantic import Field

from flows.common import FlowConfig
from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
from flows.rl_train import RLTrainConfig, rl_train
from flows.sft import SFTFlowConfig, sft
from ludic_core.config import GRPOConfig, TrainerConfig
from ludic_core.training.stage import TicTacToeRLData
from tasks.artifacts import lineage_artifact, table_artifact
from tasks.evaluation import evaluate_policy
from tasks.models import build_model


class DemoConfig(FlowConfig):
    run_dir: str = Field("runs/demo", description="everything the chain writes goes here")
    preset: Literal["tiny-1m", "tiny-10m"] = "tiny-1m"
    seed: int = 0
    teacher_games: int = Field(4096, ge=1)
    sft_steps: int = Field(400, ge=1)
    sft_lr: float = Field(2e-3, gt=0, description="peak SFT learning rate (cosine decay to 0)")
    rl_steps: int = Field(30, ge=1)
    rl_lr: float = Field(1e-4, gt=0)
    rl_temperature: float = Field(0.7, gt=0, description="sampling temperature of RL rollouts")
    group_size: int = Field(8, ge=2)
    eval_games: int = Field(200, ge=1, description="greedy games per mark per evaluation")
    launcher: Literal["in_process", "torchrun"] = "in_process"
    progress_bar: bool = Field(True, description="console progress bars for training stages")


def _row(stage: str, m: dict[str, float]) -> dict:
    return {"stage": stage, "X legal": round(m["X/legal_move_rate"], 3), "X win+draw": round(m["X/win_draw_rate"], 3),
            "O legal": round(m["O/legal_move_rate"], 3), "O win+draw": round(m["O/win_draw_rate"], 3)}


@flow(name="demo", log_prints=True)
def demo(cfg: DemoConfig) -> dict:
    run = cfg.run_dir
    model_path = build_model(f"{run}/models/{cfg.preset}", cfg.preset, cfg.seed)
    rows = [_row("before SFT", evaluate_policy(model_path, games_per_mark=cfg.eval_games))]
    dataset = rejection_sampling(RejectionSamplingConfig(
        model_path=model_path, out_dir=f"{run}/rejection", games=cfg.teacher_games, seed=cfg.seed + 1))
    sft_model = sft(SFTFlowConfig(
        model_path=model_path, dataset_path=dataset, out_dir=f"{run}/sft", steps=cfg.sft_steps,
        steps_per_stage=max(cfg.sft_steps // 4, 1), launcher=cfg.launcher, progress_bar=cfg.progress_bar,
        trainer=TrainerConfig(lr=cfg.sft_lr, warmup_steps=10, schedule="cosine", total_steps=cfg.sft_steps,
                              micro_token_budget=16384, max_seq_len=512)))
    rows.append(_row("after SFT", evaluate_policy(sft_model, games_per_mark=cfg.eval_games)))
    rl_model = rl_train(RLTrainConfig(
        model_path=sft_model, out_dir=f"{run}/rl", algorithm=GRPOConfig(group_size=cfg.group_size),
        data=TicTacToeRLData(group_size=cfg.group_size, temperature=cfg.rl_temperature), steps=cfg.rl_steps,
        trainer=TrainerConfig(lr=cfg.rl_lr, micro_token_budget=16384, max_seq_len=512),
        steps_per_stage=max(cfg.rl_steps // 2, 1), eval_games=0, launcher=cfg.launcher,
        progress_bar=cfg.progress_bar))
    rows.append(_row("after RL", evaluate_policy(rl_model, games_per_mark=cfg.eval_games)))
    table_artifact("demo-results", rows, f"tic-tac-toe vs random, {cfg.eval_games} greedy games per mark")
    lineage = {"model": model_path, "rejection sampling dataset": dataset, "SFT model": sft_model,
               "RL model": rl_model}
    lineage_artifact("demo-lineage", lineage)
    return {"rows": rows, "lineage": lineage}
