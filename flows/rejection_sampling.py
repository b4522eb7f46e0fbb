"""Rejection sampling: teacher rollouts -> keep by reward -> a `datasets` dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from prefect import flow, get_run_logger
from pydantic import Field

from flows.common import FlowConfig
from tasks.artifacts import table_artifact
from tasks.rollouts import rejection_sample


class RejectionSamplingConfig(FlowConfig):
    """Games by a scripted minimax teacher through the LLM stack, filtered by return."""

    model_path: str = Field(description="model dir whose tokenizer renders the traces")
    out_dir: str = Field("runs/demo/rejection", description="where the dataset is written")
    games: int = Field(4096, ge=1, description="teacher games to sample")
    min_reward: float = Field(1.0, description="keep episodes with return >= this (1 = wins)")
    opponent: Literal["random", "minimax"] = "random"
    tie_break: Literal["preference", "random"] = Field(
        "preference", description="teacher's choice among equally good moves (preference: centre, corners, edges)")
    seed: int = 1


@flow(name="rejection_sampling", log_prints=True)
def rejection_sampling(cfg: RejectionSamplingConfig) -> str:
    """Returns the dataset path. Skipped when a finished dataset already exists."""
    done = Path(cfg.out_dir) / "done.json"
    if done.exists():
        result = json.loads(done.read_text())
        get_run_logger().info("rejection sampling already done: %s", result["dataset_path"])
        return result["dataset_path"]
    result = rejection_sample(cfg.model_path, cfg.out_dir, games=cfg.games, seed=cfg.seed,
                              min_reward=cfg.min_reward, opponent=cfg.opponent, tie_break=cfg.tie_break)
    table_artifact("rejection-sampling", [{k: v for k, v in result.items()}], "rejection sampling outcome")
    done.write_text(json.dumps(result))
    return result["dataset_path"]
