"""`SingleAgentEnv`: the common one-agent case with a smaller surface."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from ludic_core.envs.base import LudicEnv
from ludic_core.types import StepOutcome

__all__ = ["SingleAgentEnv", "DEFAULT_AGENT_ID"]

DEFAULT_AGENT_ID = "agent_0"


class SingleAgentEnv(LudicEnv):
    """Subclasses implement `env_reset` and `env_step`; the multi-agent
    plumbing (`reset`/`step`/`active_agents`) is derived."""

    agent_ids = [DEFAULT_AGENT_ID]

    def __init__(self) -> None:
        self._done = False

    @abstractmethod
    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode; return (observation, info)."""

    @abstractmethod
    def env_step(self, action: str) -> StepOutcome:
        """Apply one parsed action."""

    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        self._done = False
        return {DEFAULT_AGENT_ID: self.env_reset(seed)}

    def active_agents(self) -> list[str]:
        return [] if self._done else [DEFAULT_AGENT_ID]

    def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        if DEFAULT_AGENT_ID not in actions:
            raise KeyError(f"{type(self).__name__}.step needs an action for {DEFAULT_AGENT_ID!r}")
        outcome = self.env_step(actions[DEFAULT_AGENT_ID])
        self._done = outcome.terminated or outcome.truncated
        return {DEFAULT_AGENT_ID: outcome}
