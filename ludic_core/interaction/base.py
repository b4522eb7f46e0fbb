"""The `InteractionProtocol` seam: how agents and an env take turns."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ludic_core.envs.base import LudicEnv
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.types import Rollout

__all__ = ["InteractionProtocol", "step_seed"]


@runtime_checkable
class InteractionProtocol(Protocol):
    """Runs one episode and returns one `Rollout` per participating agent.

    Never raises for an env failure: the episode comes back with
    `meta["failed"] = True`, `meta["error"]` and the steps collected so far.
    """

    async def run(
        self,
        env: LudicEnv,
        *,
        max_steps: int,
        env_seed: int | None = None,
        sampling_seed: int | None = None,
        inference: InferenceSpec | None = None,
    ) -> list[Rollout]: ...


def step_seed(sampling_seed: int | None, agent_index: int, step: int) -> int | None:
    """A distinct, reproducible sampling seed for each agent turn of an episode."""
    if sampling_seed is None:
        return None
    return (sampling_seed * 1_000_003 + agent_index * 10_007 + step) % (1 << 62)
