"""`SingleAgentSyncProtocol`: one agent, one env, strictly alternating turns."""

from __future__ import annotations

from typing import Any

from ludic_core.envs.base import LudicEnv
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.interaction.multi_agent import MultiAgentProtocol
from ludic_core.types import Rollout

__all__ = ["SingleAgentSyncProtocol"]


class SingleAgentSyncProtocol:
    """The multi-agent loop specialised to an env with exactly one agent id.

    Same parse-failure and truncation semantics as `MultiAgentProtocol`.
    """

    def __init__(self, agent: Any, *, system_prompt: str | None = None,
                 max_parse_failures: int | None = None) -> None:
        self.agent = agent
        self.system_prompt = system_prompt
        self.max_parse_failures = max_parse_failures

    async def run(
        self,
        env: LudicEnv,
        *,
        max_steps: int,
        env_seed: int | None = None,
        sampling_seed: int | None = None,
        inference: InferenceSpec | None = None,
    ) -> list[Rollout]:
        if len(env.agent_ids) != 1:
            raise ValueError(
                f"SingleAgentSyncProtocol needs a single-agent env; "
                f"{type(env).__name__} has agents {env.agent_ids} (use MultiAgentProtocol)"
            )
        inner = MultiAgentProtocol({env.agent_ids[0]: self.agent}, system_prompt=self.system_prompt,
                                   max_parse_failures=self.max_parse_failures)
        return await inner.run(
            env, max_steps=max_steps, env_seed=env_seed,
            sampling_seed=sampling_seed, inference=inference,
        )
