"""Evaluate any policy on any env: N prompts x k samples -> one flat table.

The env is named by an `EnvConfig` and played through the same agent stack as
training (`AgentConfig`), so the numbers are the ones a rollout would see.
Generic reducers always run; the env's own (e.g. tic-tac-toe's X/O table)
are added when its factory has `episode_metrics`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ludic_core.compose.build import build_engine, env_factory, episode_requests
from ludic_core.compose.configs import AgentConfig, EnvConfig
from ludic_core.metrics.reducers import env_metrics, episode_metrics
from ludic_core.rollout import GRPORequestStrategy

__all__ = ["evaluate_policy"]


def evaluate_policy(client: Any, env: EnvConfig, agent: AgentConfig, *, seeds: Sequence[int], samples: int = 1,
                    temperature: float | None = None, success_threshold: float = 1.0) -> dict[str, float]:
    """Play each seed `samples` times with `client`; return the reducers' metrics.

    `temperature` overrides the agent's (0 = greedy); pass@k is reported for
    k = `samples` (unbiased estimator over each seed's samples).
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    sampling = agent.sampling if temperature is None else agent.sampling.model_copy(update={"temperature": temperature})
    engine = build_engine(env, agent, client)
    requests = episode_requests(env, agent, list(seeds), sampling=sampling)
    strategy = GRPORequestStrategy(samples, seed=0) if samples > 1 else None
    rollouts = asyncio.run(engine.generate_rollouts(requests, max_steps=agent.max_turns, strategy=strategy))
    out = episode_metrics(rollouts, k=samples, success_threshold=success_threshold)
    out.update(env_metrics(env_factory(env), rollouts))
    return out
