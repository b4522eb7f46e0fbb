"""Rollouts in, a flat `{name: float}` out: reducers that read only `ludic_core.types`.

Below the envs, so an env can build its own table from them (reasoning-gym's
per-task accuracy); `ludic_core.eval` runs a policy and applies them.
"""

from ludic_core.metrics.per_task import episode_score, episode_task, per_task_metrics
from ludic_core.metrics.reducers import env_metrics, episode_metrics, group_key, pass_at_k

__all__ = ["pass_at_k", "episode_metrics", "env_metrics", "group_key", "per_task_metrics", "episode_task",
           "episode_score"]
