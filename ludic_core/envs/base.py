"""`LudicEnv`: the multi-agent environment interface.

An env is a turn-based world shared by named agents. At each point only
`active_agents()` are expected to act; `step` takes one action string per active
agent and returns a `StepOutcome` for every agent whose view changed (the
actors, and usually the others too, so each agent can keep its own dialog).
Actions are the *parsed* strings the agent's parser produced, never raw model
output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol

from ludic_core.types import StepOutcome

__all__ = ["LudicEnv", "EnvError", "PolicyResolver"]


class PolicyResolver(Protocol):
    """How an env that plays scripted seats turns a policy named in its config
    (a registered name or `pkg.module:factory`, plus keywords) into players: a
    function of the seed returning a fresh `policy(messages) -> reply`, checked
    when resolved. `ludic_core.compose` passes the registry's to any env factory
    with a `policies` parameter, so envs stay below the layer that builds them."""

    def __call__(self, name: str, kwargs: dict[str, Any]) -> Callable[[int | None], Callable[[list[Any]], str]]: ...


class EnvError(RuntimeError):
    """Raised by protocols when an env misbehaves (wraps the original error)."""


class LudicEnv(ABC):
    """Base class for all environments (single-agent ones included)."""

    #: Stable names of the agents taking part, e.g. ["X", "O"].
    agent_ids: list[str] = []

    @property
    def suggested_sysprompt(self) -> str | None:
        """A system prompt that explains the task; agents may use or ignore it."""
        return None

    @abstractmethod
    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """Start an episode; return (observation, info) for every agent."""

    @abstractmethod
    def active_agents(self) -> list[str]:
        """Agents expected to act now (empty once the episode is over)."""

    @abstractmethod
    def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        """Apply the active agents' actions; return each affected agent's outcome.
        An env that waits on I/O (e.g. code in a sandbox) may define `step` as a
        coroutine: the protocols await it, so it blocks only its own episode."""
