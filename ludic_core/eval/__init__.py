"""Evaluation: generic reducers, env-contributed ones, and a runner for any env."""

from ludic_core.eval.evaluate import evaluate_policy
from ludic_core.eval.per_task import per_task_metrics
from ludic_core.eval.reducers import env_metrics, episode_metrics, pass_at_k
from ludic_core.eval.tic_tac_toe import tic_tac_toe_metrics

__all__ = ["evaluate_policy", "pass_at_k", "episode_metrics", "env_metrics", "tic_tac_toe_metrics",
           "per_task_metrics"]
