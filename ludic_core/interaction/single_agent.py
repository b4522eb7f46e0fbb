"""`SingleAgentSyncProtocol`: one agent, one env, strictly alternating turns."""

from __future__ import annotations

from typing import Any

from ludic_core.envs.base import LudicEnv
from ludic_core.interaction.multi_agent import MultiAgentProtocol

__all__ = ["SingleAgentSyncProtocol"]


class SingleAgentSyncProtocol(MultiAgentProtocol):
    """The multi-agent loop specialised to an env with exactly one agent id.

    Same `run`, parse-failure and truncation semantics as `MultiAgentProtocol`;
    the agent plays whatever id the env names, so one protocol serves any
    single-agent env.
    """

    def __init__(self, agent: Any, *, system_prompt: str | None = None,
                 max_parse_failures: int | None = None) -> None:
        self.agent = agent  # no agents dict: `_seat` gives the agent whatever id the env names
        self._set_options(system_prompt, max_parse_failures)

    def _seat(self, env: LudicEnv) -> dict[str, Any]:
        if len(env.agent_ids) != 1:
            raise ValueError(
                f"SingleAgentSyncProtocol needs a single-agent env; "
                f"{type(env).__name__} has agents {env.agent_ids} (use MultiAgentProtocol)"
            )
        return {env.agent_ids[0]: self.agent}
