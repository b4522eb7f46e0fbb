"""Per-agent step bookkeeping: one `Rollout` per agent out of a shared episode."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ludic_core.types import Rollout, Step, StepOutcome, TokenTrace

__all__ = ["TraceCollector"]


def _json_values(info: dict[str, Any]) -> dict[str, Any]:
    """The entries of `info` that are plain JSON: rollouts are written as JSON lines."""
    out = {}
    for key, value in info.items():
        try:
            json.dumps({key: value}, allow_nan=False)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


class TraceCollector:
    """Collects each agent's own steps; builds their rollouts at the end.

    A reward that reaches an agent while it is not acting (e.g. O learns it lost
    on X's move) is added to that agent's last step, which also takes the
    terminal flags, so `Rollout.total_reward` is the agent's episode return.
    """

    def __init__(self, agent_ids: list[str], meta: dict[str, Any]) -> None:
        self.episode_id = uuid.uuid4().hex
        self.steps: dict[str, list[Step]] = {a: [] for a in agent_ids}
        self.obs: dict[str, str] = {a: "" for a in agent_ids}
        self.meta = dict(meta)
        self.unattributed: dict[str, float] = {}
        #: each agent's info from `env.reset`, kept on its rollout (`meta["reset_info"]`): what the
        #: episode played (a task, a dataset row) stays known even when no step reached the env
        self.reset_info: dict[str, dict[str, Any]] = {}

    def add_step(
        self, agent_id: str, *, action: str, next_obs: str | None, reward: float,
        outcome: StepOutcome | None, trace: TokenTrace | None, info: dict[str, Any],
    ) -> Step:
        steps = self.steps[agent_id]
        step = Step(
            index=len(steps),
            prev_obs=self.obs[agent_id],
            action=action,
            next_obs=next_obs,
            reward=float(reward),
            truncated=bool(outcome and outcome.truncated),
            terminated=bool(outcome and outcome.terminated),
            info=info,
            trace=trace,
        )
        steps.append(step)
        if next_obs is not None:
            self.obs[agent_id] = next_obs
        return step

    def add_passive(self, agent_id: str, outcome: StepOutcome) -> None:
        """An outcome for an agent that did not act this round."""
        if outcome.obs is not None:
            self.obs[agent_id] = outcome.obs
        steps = self.steps[agent_id]
        if not steps:
            if outcome.reward:
                self.unattributed[agent_id] = self.unattributed.get(agent_id, 0.0) + outcome.reward
            return
        last = steps[-1]
        last.reward += float(outcome.reward)
        last.terminated = last.terminated or outcome.terminated
        last.truncated = last.truncated or outcome.truncated
        if outcome.info:
            last.info.setdefault("passive_info", []).append(outcome.info)

    def rollouts(self, *, truncated: bool, error: str | None) -> list[Rollout]:
        out = []
        for agent_id, steps in self.steps.items():
            if truncated and steps and not steps[-1].terminated:
                steps[-1].truncated = True
            meta = {
                **self.meta,
                "agent_id": agent_id,
                "episode_id": self.episode_id,
                "truncated": truncated,
                "failed": error is not None,
            }
            if error is not None:
                meta["error"] = error
            if self.reset_info.get(agent_id):
                meta["reset_info"] = _json_values(self.reset_info[agent_id])
            if agent_id in self.unattributed:
                meta["unattributed_reward"] = self.unattributed[agent_id]
            out.append(Rollout(steps=steps, meta=meta))
        return out
