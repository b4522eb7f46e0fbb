"""`MultiAgentProtocol`: agents act when the env says they are active.

Parse-failure semantics (kept from the seed): when an agent's output does not
parse, the env is NOT stepped for it. Instead the agent gets a synthetic step
with `info["parse_error"] = True`, the parser's reward (a penalty), and the
parser's feedback as the next observation, which is fed back to the agent so it
can try again. Every round (env step or failed attempt) counts towards
`max_steps`; running out records the episode as truncated, and so does a
prompt that outgrows the model's context (`meta["context_overflow"]`).
With `max_parse_failures=N`, an agent's N-th consecutive parse failure also
ends the episode as truncated (`meta["parse_failure_limit"]`): for envs where a
malformed reply should cost the game rather than buy another try.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from ludic_core.envs.base import LudicEnv
from ludic_core.inference.errors import ContextLengthError, InferenceServerError
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.interaction.base import step_seed
from ludic_core.interaction.collector import TraceCollector
from ludic_core.types import Rollout, StepOutcome

__all__ = ["MultiAgentProtocol"]

log = logging.getLogger(__name__)


class MultiAgentProtocol:
    """Drives a `LudicEnv` with one `Agent` per agent id."""

    def __init__(self, agents: dict[str, Any], *, system_prompt: str | None = None,
                 max_parse_failures: int | None = None) -> None:
        if not agents:
            raise ValueError("MultiAgentProtocol needs at least one agent")
        self.agents = dict(agents)
        self._set_options(system_prompt, max_parse_failures)

    def _set_options(self, system_prompt: str | None, max_parse_failures: int | None) -> None:
        if max_parse_failures is not None and max_parse_failures < 1:
            raise ValueError(f"max_parse_failures must be >= 1 or None, got {max_parse_failures}")
        self.system_prompt = system_prompt
        self.max_parse_failures = max_parse_failures

    def _seat(self, env: LudicEnv) -> dict[str, Any]:
        """The Agent that plays each of `env`'s agent ids; a ValueError naming any left without one."""
        missing = [a for a in env.agent_ids if a not in self.agents]
        if missing:
            raise ValueError(
                f"{type(env).__name__} has agents {env.agent_ids}; no Agent given for {missing}"
            )
        return self.agents

    async def run(
        self,
        env: LudicEnv,
        *,
        max_steps: int,
        env_seed: int | None = None,
        sampling_seed: int | None = None,
        inference: InferenceSpec | None = None,
    ) -> list[Rollout]:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        agents = self._seat(env)
        ids = list(env.agent_ids)
        col = TraceCollector(ids, {"env_seed": env_seed, "sampling_seed": sampling_seed})
        try:
            first = env.reset(seed=env_seed)
        except Exception as exc:  # noqa: BLE001 - recorded, never lost
            log.warning("env.reset failed: %r", exc)
            return col.rollouts(truncated=False, error=f"env.reset raised {exc!r}")
        for agent_id in ids:
            obs, info = first[agent_id]
            agent = agents[agent_id]
            # None: the env's suggestion; "": no system message at all
            agent.reset(env.suggested_sysprompt if self.system_prompt is None else self.system_prompt or None)
            agent.on_env_reset(obs, info)
            col.obs[agent_id] = obs
            col.reset_info[agent_id] = dict(info or {})
        for t in range(max_steps):
            active = env.active_agents()
            if not active:
                return col.rollouts(truncated=False, error=None)
            try:
                error = await self._round(env, agents, col, active, ids, t, sampling_seed, inference)
            except ContextLengthError as exc:
                col.meta["context_overflow"] = str(exc)
                return col.rollouts(truncated=True, error=None)
            if error is not None:
                return col.rollouts(truncated=False, error=error)
            if self._failure_limit_hit(col):
                col.meta["parse_failure_limit"] = True
                return col.rollouts(truncated=True, error=None)
        done = not env.active_agents()
        return col.rollouts(truncated=not done, error=None)

    async def _round(
        self, env: LudicEnv, agents: dict[str, Any], col: TraceCollector, active: list[str], ids: list[str],
        t: int, sampling_seed: int | None, inference: InferenceSpec | None,
    ) -> str | None:
        """One round: active agents act together; returns an error text or None."""
        try:
            acts = await asyncio.gather(*[
                agents[a].act(
                    inference=inference, sampling_seed=step_seed(sampling_seed, ids.index(a), t)
                )
                for a in active
            ])
        except (ContextLengthError, InferenceServerError):
            raise  # truncation is handled above; a gone server fails the batch, not this episode
        except Exception as exc:  # noqa: BLE001 - e.g. inference failure; keep the steps
            log.warning("agent act failed at round %d: %r", t, exc)
            return f"agent act raised {exc!r} at round {t}"
        actions: dict[str, str] = {}
        pending: dict[str, Any] = {}
        for agent_id, act in zip(active, acts):
            trace = act.trace  # the final call's, or None when that call carried no ids
            internal = act.traces[:-1] if trace is not None else act.traces
            if internal:  # tool turns before the final answer are policy output too
                act.info["internal_traces"] = [t.to_dict() for t in internal]
            if not act.parse.ok:
                info = {**act.info, "parse_error": True}
                col.add_step(agent_id, action=act.text, next_obs=act.parse.obs,
                             reward=act.parse.reward, outcome=None, trace=trace, info=info)
                agents[agent_id].on_after_step(act.parse.obs, info)
            else:
                actions[agent_id] = act.parse.action
                pending[agent_id] = (act, trace)
        if not actions:
            return None
        try:
            outcomes = env.step(actions)
            if inspect.isawaitable(outcomes):  # an env that waits on I/O (a sandbox) steps as a coroutine
                outcomes = await outcomes
        except Exception as exc:  # noqa: BLE001 - the episode is kept as failed
            log.warning("env.step failed at round %d: %r", t, exc)
            return f"env.step raised {exc!r} at round {t}"
        for agent_id, outcome in outcomes.items():
            if agent_id in pending:
                act, trace = pending[agent_id]
                self._record_action(col, agent_id, act, trace, outcome)
            else:
                col.add_passive(agent_id, outcome)
            agents[agent_id].on_after_step(outcome.obs, outcome.info)
        return None

    def _failure_limit_hit(self, col: TraceCollector) -> bool:
        n = self.max_parse_failures
        if n is None:
            return False
        for steps in col.steps.values():
            tail = steps[-n:]
            if len(tail) == n and all(s.info.get("parse_error") for s in tail):
                return True
        return False

    @staticmethod
    def _record_action(col: TraceCollector, agent_id: str, act: Any, trace: Any, outcome: StepOutcome) -> None:
        info = {
            **outcome.info,
            **act.info,
            "parsed_action": act.parse.action,
            "env_reward": outcome.reward,
            "format_reward": act.parse.reward,
        }
        col.add_step(agent_id, action=act.text, next_obs=outcome.obs,
                     reward=outcome.reward + act.parse.reward, outcome=outcome,
                     trace=trace, info=info)
