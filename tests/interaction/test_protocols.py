"""Interaction protocols with real agents: scripted players and the tiny LLM."""

import asyncio
import re

import pytest

from ludic_core.agents import Agent
from ludic_core.context import SlidingWindowContext
from ludic_core.envs import LudicEnv, TicTacToeDuelEnv, TicTacToeEnv, scripted_tic_tac_toe_policy
from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig, ScriptedChatClient
from ludic_core.interaction import MultiAgentProtocol, SingleAgentSyncProtocol
from ludic_core.parsers import ParseResult, xml_tag_parser
from ludic_core.types import StepOutcome


def first_digit_parser(text: str) -> ParseResult:
    """Lenient: the first digit 1-9 anywhere (lets an untrained model make moves)."""
    m = re.search(r"[1-9]", text)
    if m is None:
        return ParseResult(None, -0.5, "Answer with a cell number 1-9.")
    return ParseResult(m.group(0), 0.0)


def _scripted(kind: str, seed: int, tok=None) -> Agent:
    return Agent(ScriptedChatClient(scripted_tic_tac_toe_policy(kind, seed=seed), tok), parser=xml_tag_parser("move"))


def test_single_agent_minimax_beats_or_draws_random():
    results = []
    for seed in range(20):
        proto = SingleAgentSyncProtocol(_scripted("minimax", seed))
        (r,) = asyncio.run(proto.run(TicTacToeEnv(opponent="random"), max_steps=9, env_seed=seed))
        assert r.steps[-1].terminated and not r.meta["truncated"]
        assert all(not s.info.get("parse_error") for s in r.steps)
        results.append(r.total_reward)
    assert min(results) >= 0.5 and max(results) == 1.0


def test_parse_failure_is_a_synthetic_step_and_env_is_not_stepped():
    replies = iter(["no tags here", "<move>5</move>"])
    agent = Agent(ScriptedChatClient(lambda msgs: next(replies)), parser=xml_tag_parser("move", failure_penalty=-0.3))
    env = TicTacToeEnv(opponent="random")
    (r,) = asyncio.run(SingleAgentSyncProtocol(agent).run(env, max_steps=2, env_seed=0))
    bad, good = r.steps
    assert bad.info["parse_error"] is True and bad.reward == pytest.approx(-0.3)
    assert bad.next_obs.startswith("Invalid format")
    assert env.board.count("X") == 1  # only the second, valid move reached the env
    assert good.info["parsed_action"] == "5" and good.prev_obs == bad.next_obs
    # the synthetic observation was fed back to the agent as a user message
    assert r.meta["truncated"] is True and good.truncated is True


def test_max_steps_truncation_is_recorded():
    agent = Agent(ScriptedChatClient(lambda msgs: "garbage"), parser=xml_tag_parser("move", failure_penalty=-1.0))
    (r,) = asyncio.run(SingleAgentSyncProtocol(agent).run(TicTacToeEnv(), max_steps=3, env_seed=1))
    assert r.length == 3 and r.meta["truncated"] and r.steps[-1].truncated
    assert r.total_reward == pytest.approx(-3.0)


def test_single_agent_protocol_rejects_multi_agent_env():
    with pytest.raises(ValueError, match="MultiAgentProtocol"):
        asyncio.run(SingleAgentSyncProtocol(_scripted("random", 0)).run(TicTacToeDuelEnv(), max_steps=3))


def test_duel_of_scripted_minimax_players_is_a_draw_seen_from_both_sides():
    agents = {"X": _scripted("minimax", 1), "O": _scripted("minimax", 2)}
    rx, ro = asyncio.run(MultiAgentProtocol(agents).run(TicTacToeDuelEnv(), max_steps=12))
    assert (rx.meta["agent_id"], ro.meta["agent_id"]) == ("X", "O")
    assert rx.meta["episode_id"] == ro.meta["episode_id"]
    assert rx.length == 5 and ro.length == 4  # X makes 5 moves, O 4
    assert rx.total_reward == 0.5 and ro.total_reward == 0.5  # O's draw arrives on X's last move
    assert all("You are X" in s.prev_obs for s in rx.steps)
    assert all("You are O" in s.prev_obs for s in ro.steps)


def test_two_llm_agents_play_each_other(format_tuned_model_dir):
    """The tiny LLM as both players: two rollouts per episode, each agent's own view."""
    client = LocalChatClient(format_tuned_model_dir)
    spec = InferenceSpec(sampling=SamplingConfig(temperature=1.0, max_tokens=20))

    async def play(seed):
        agents = {
            m: Agent(client, parser=first_digit_parser, inference=spec, context=SlidingWindowContext(1))
            for m in ("X", "O")
        }
        return await MultiAgentProtocol(agents).run(TicTacToeDuelEnv(), max_steps=8, sampling_seed=seed)

    async def many():
        return await asyncio.gather(*[play(s) for s in range(16)])

    episodes = asyncio.run(many())
    moves = 0
    for rx, ro in episodes:
        assert rx.meta["agent_id"] == "X" and ro.meta["agent_id"] == "O"
        for r, mark in ((rx, "X"), (ro, "O")):
            for s in r.steps:
                assert f"You are {mark}" in s.prev_obs or s.info.get("parse_error") or (
                    r.steps[s.index - 1].info.get("parse_error")
                )
                assert s.trace is not None and len(s.trace.completion_logprobs) == len(s.trace.completion_token_ids) > 0
                moves += "parsed_action" in s.info
        if not rx.meta["truncated"]:
            results = {rx.steps[-1].info.get("result"), ro.steps[-1].info.get("result")} if ro.steps else set()
            assert rx.steps[-1].terminated
            assert results <= {"win", "loss", "draw", "illegal", "opponent_illegal", None}
    assert moves >= 4  # the LLMs really moved, not only failed to parse
    assert client.stats["max_batch"] >= 2  # concurrent episodes shared decode batches


def test_context_overflow_ends_the_episode_truncated_not_failed(tiny_model_dir):
    """An untrained model never answers in format; its dialog grows until it no
    longer fits the 1024-token context. That is a truncation, steps kept."""
    client = LocalChatClient(tiny_model_dir)
    spec = InferenceSpec(sampling=SamplingConfig(max_tokens=200, seed=0))
    agent = Agent(client, parser=xml_tag_parser("move"), inference=spec)
    (r,) = asyncio.run(SingleAgentSyncProtocol(agent).run(TicTacToeEnv(), max_steps=50, env_seed=0))
    assert not r.failed and r.meta["truncated"]
    assert "context" in r.meta["context_overflow"]
    assert 2 <= r.length < 50 and r.steps[-1].truncated


def test_max_parse_failures_ends_the_episode_truncated():
    agent = Agent(ScriptedChatClient(lambda msgs: "no move"), parser=xml_tag_parser("move", failure_penalty=-1.0))
    proto = SingleAgentSyncProtocol(agent, max_parse_failures=2)
    (r,) = asyncio.run(proto.run(TicTacToeEnv(), max_steps=9, env_seed=0))
    assert r.length == 2 and r.meta["parse_failure_limit"] and r.meta["truncated"]
    assert r.total_reward == pytest.approx(-2.0)
    with pytest.raises(ValueError, match="max_parse_failures"):
        MultiAgentProtocol({"a": agent}, max_parse_failures=0)


@pytest.mark.parametrize("system_prompt, expected", [
    (None, TicTacToeEnv(opponent="random").suggested_sysprompt),  # the env's suggestion
    ("Play well.", "Play well."),
    ("", None),  # no system message at all (a model trained from scratch gains nothing from one)
])
def test_system_prompt_none_is_the_envs_and_empty_is_none(system_prompt, expected):
    seen = []

    def reply(messages):
        seen.append(messages)
        return "<move>5</move>"

    agent = Agent(ScriptedChatClient(reply), parser=xml_tag_parser("move"))
    asyncio.run(SingleAgentSyncProtocol(agent, system_prompt=system_prompt).run(
        TicTacToeEnv(opponent="random"), max_steps=1, env_seed=0))
    system = [m["content"] for m in seen[0] if m["role"] == "system"]
    assert system == ([] if expected is None else [expected])
    assert seen[0][-1]["role"] == "user" and "Board" in seen[0][-1]["content"]


def test_a_malformed_try_leaves_a_0_1_envs_return_in_0_1():
    """A 0/1 env with the default parser penalty: one malformed reply, then the right
    answer, is a return of 1 and a success; only-malformed replies are 0, not negative.
    Parse errors are still reported, as their own rate."""
    from ludic_core.envs.arithmetic import ArithmeticEnv, arithmetic_oracle
    from ludic_core.metrics.reducers import episode_metrics

    oracle = arithmetic_oracle()

    def late(messages):  # malformed first, then the oracle's answer to the question (the first user message)
        question = next(i for i, m in enumerate(messages) if m["role"] == "user")
        return oracle(messages[:question + 1]) if messages[-1]["content"].startswith("Invalid") else "not sure"

    def run(reply):
        agent = Agent(ScriptedChatClient(reply), parser=xml_tag_parser("answer"))
        return asyncio.run(SingleAgentSyncProtocol(agent).run(ArithmeticEnv(n=10, seed=0), max_steps=2, env_seed=3))

    (late_right,) = run(late)
    (never,) = run(lambda messages: "no tags")
    assert [s.info.get("parse_error", False) for s in late_right.steps] == [True, False]
    assert late_right.total_reward == 1.0 and never.total_reward == 0.0
    m = episode_metrics([late_right, never])
    assert m["mean_return"] == 0.5 and m["success_rate"] == 0.5 and m["parse_error_rate"] == 0.75


class _EchoEnv(LudicEnv):
    """One agent, named by the env, that wins by saying the env's word."""

    def __init__(self, agent_id: str, word: str) -> None:
        self.agent_ids = [agent_id]
        self.word = word
        self.done = False

    def reset(self, seed=None):
        self.done = False
        return {self.agent_ids[0]: (f"Say {self.word}.", {})}

    def active_agents(self):
        return [] if self.done else list(self.agent_ids)

    def step(self, actions):
        self.done = True
        return {a: StepOutcome(obs=None, reward=float(text == self.word), terminated=True)
                for a, text in actions.items()}


def test_one_single_agent_protocol_plays_envs_that_name_their_agent_differently():
    words = iter(["<move>red</move>", "<move>blue</move>"])
    agent = Agent(ScriptedChatClient(lambda messages: next(words)), parser=xml_tag_parser("move"))
    proto = SingleAgentSyncProtocol(agent)
    first = asyncio.run(proto.run(_EchoEnv("solo", "red"), max_steps=1))
    second = asyncio.run(proto.run(_EchoEnv("player", "blue"), max_steps=1))
    assert [(r.meta["agent_id"], r.total_reward) for r in first + second] == [("solo", 1.0), ("player", 1.0)]
    with pytest.raises(ValueError, match="max_parse_failures must be >= 1 or None, got 0"):
        SingleAgentSyncProtocol(agent, max_parse_failures=0)
