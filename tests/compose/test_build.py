"""Configs -> envs, agents, engines: bad input named at the first use; episodes that fail are counted."""

import asyncio

import pytest
from pydantic import ValidationError

from ludic_core.compose.build import build_agent, build_engine, check_env, episode_requests
from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.envs import SingleAgentEnv
from ludic_core.eval import evaluate_policy
from ludic_core.inference import ScriptedChatClient
from ludic_core.registry import ComponentError
from ludic_core.types import StepOutcome


class FlakyEnv(SingleAgentEnv):
    """Raises in reset on odd seeds: those episodes fail, the others go on."""

    def env_reset(self, seed=None):
        if seed % 2:
            raise RuntimeError(f"no puzzle for seed {seed}")
        return f"say {seed}", {}

    def env_step(self, action):
        return StepOutcome(obs=None, reward=float(action == str(self._seed_seen)), terminated=True)

    def reset(self, seed=None):
        self._seed_seen = seed
        return super().reset(seed)


def echo(messages: list) -> str:
    return messages[-1]["content"].split()[-1]


def test_env_config_checks_syntax_and_the_flow_start_checks_the_rest():
    with pytest.raises(ValidationError, match="neither a registered name nor an import path"):
        EnvConfig(name="bad name!")
    with pytest.raises(ComponentError, match="unknown env 'chess'"):
        check_env(EnvConfig(name="chess"))
    with pytest.raises(ComponentError, match="takes no parameter 'oponent'"):
        check_env(EnvConfig(name="tic_tac_toe", kwargs={"oponent": "random"}))
    with pytest.raises(ValueError, match="unknown opponent kind 'human'"):
        check_env(EnvConfig(name="tic_tac_toe", kwargs={"opponent": "human"}))
    check_env(EnvConfig(name="arithmetic", kwargs={"n": 5}))


def test_agent_config_builds_parser_context_and_tools():
    from ludic_core.agents import ToolAgent
    from ludic_core.context import SlidingWindowContext

    agent = build_agent(AgentConfig(parser=ComponentConfig(name="xml_tag", kwargs={"tag": "move"}),
                                    context=ComponentConfig(name="sliding_window", kwargs={"keep_last": 2})), None)
    assert isinstance(agent.context, SlidingWindowContext) and agent.parser("<move>7</move>").action == "7"
    tool_agent = build_agent(AgentConfig(tools=("tests.compose.test_build:echo",)), None)
    assert isinstance(tool_agent, ToolAgent) and list(tool_agent.tools) == ["echo"]
    with pytest.raises(ComponentError, match="parser 'xml_tag' needs parameter 'tag'"):
        build_agent(AgentConfig(parser=ComponentConfig(name="xml_tag")), None)


def test_an_env_that_raises_in_reset_fails_that_episode_and_it_is_counted():
    env = EnvConfig(name="tests.compose.test_build:FlakyEnv")
    metrics = evaluate_policy(ScriptedChatClient(echo), env, AgentConfig(max_turns=1), seeds=range(6))
    # seeds 1, 3, 5 raise in reset; 0, 2, 4 answer their own seed and succeed
    assert metrics["episodes"] == 6 and metrics["failed"] == 3 and metrics["failed_rate"] == 0.5
    assert metrics["success_rate"] == 1.0 and metrics["mean_return"] == 1.0


def test_engine_plays_any_env_with_the_agent_config():
    env, agent = EnvConfig(name="tests.compose.test_build:FlakyEnv"), AgentConfig(max_turns=1)
    engine = build_engine(env, agent, ScriptedChatClient(echo))
    rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, [2, 4]), max_steps=1))
    assert [r.total_reward for r in rollouts] == [1.0, 1.0]
    assert rollouts[0].steps[0].info["prompt_messages"] == [{"role": "user", "content": "say 2"}]


def test_a_multi_agent_env_seats_the_same_policy_in_every_seat():
    from ludic_core.envs.tic_tac_toe.players import minimax_teacher
    from ludic_core.recipes.tic_tac_toe import AGENT

    m = evaluate_policy(ScriptedChatClient(minimax_teacher()), EnvConfig(name="tic_tac_toe_duel"), AGENT,
                        seeds=range(4))
    # one rollout per seat per episode; perfect play against itself always draws (0.5 each)
    assert m["episodes"] == 8 and m["mean_return"] == 0.5 and m["failed"] == 0 and m["parse_error_rate"] == 0


def test_names_are_resolved_once_per_engine_not_per_episode(monkeypatch):
    """Resolving a name scans every installed distribution's entry points (~30 ms here):
    per episode it was 90% of a scripted teacher's time. An engine resolves each name once."""
    from ludic_core.envs.tic_tac_toe.players import minimax_teacher
    from ludic_core.registry import names

    scans = []
    real = names.entry_points
    monkeypatch.setattr(names, "entry_points", lambda **kw: scans.append(kw["group"]) or real(**kw))
    env = EnvConfig(name="tic_tac_toe", kwargs={"opponent": "random"})
    agent = AgentConfig(parser=ComponentConfig(name="xml_tag", kwargs={"tag": "move"}), max_turns=9)
    engine = build_engine(env, agent, ScriptedChatClient(minimax_teacher()))
    rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, range(12)), max_steps=9))
    assert len(rollouts) == 12 and not any(r.failed for r in rollouts)
    assert sorted(scans) == ["ludic.contexts", "ludic.envs", "ludic.parsers"]
