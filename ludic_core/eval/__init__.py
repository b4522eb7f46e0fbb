"""Evaluation: play a policy on any env, then reduce (`ludic_core.metrics`: generic and env-contributed)."""

from ludic_core.eval.evaluate import evaluate_policy
from ludic_core.metrics import env_metrics, episode_metrics, pass_at_k, per_task_metrics

__all__ = ["evaluate_policy", "pass_at_k", "episode_metrics", "env_metrics", "per_task_metrics"]
