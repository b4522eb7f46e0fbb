"""Evaluate a policy: tic-tac-toe legal-move and win/draw rates as X and O."""

from __future__ import annotations

from typing import Literal

from prefect import flow
from pydantic import Field

from flows.common import FlowConfig
from ludic_core.config import LocalInferenceConfig
from tasks.artifacts import table_artifact
from tasks.evaluation import evaluate_policy


class EvaluateConfig(FlowConfig):
    model_path: str = Field(description="HF model dir (a checkpoint's model/ works)")
    games_per_mark: int = Field(200, ge=1)
    opponent: Literal["random", "minimax"] = "random"
    temperature: float = Field(0.0, ge=0.0, description="0 = greedy")
    local: LocalInferenceConfig = Field(LocalInferenceConfig(), description="where the policy decodes")


@flow(name="evaluate", log_prints=True)
def evaluate(cfg: EvaluateConfig) -> dict[str, float]:
    metrics = evaluate_policy(cfg.model_path, games_per_mark=cfg.games_per_mark, opponent=cfg.opponent,
                              temperature=cfg.temperature, local=cfg.local)
    rows = [{"mark": m, **{k.split("/", 1)[1]: round(v, 4) for k, v in metrics.items() if k.startswith(m)}}
            for m in ("X", "O")]
    table_artifact("evaluation", rows, f"{cfg.model_path} vs {cfg.opponent}")
    return metrics
