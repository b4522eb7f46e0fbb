"""TextArena games through our protocols: real games from the `textarena` package,
scripted players and the tiny LLM, no mocks."""

from __future__ import annotations

import asyncio
import random
import sys

import pytest
import textarena as ta
from textarena.envs.TicTacToe.env import TicTacToeEnv as _TextArenaTicTacToe

from ludic_core.agents import Agent
from ludic_core.compose.build import build_engine, check_env, episode_requests
from ludic_core.compose.configs import AgentConfig, EnvConfig
from ludic_core.context import SlidingWindowContext
from ludic_core.envs.base import EnvError
from ludic_core.envs.textarena import (
    TextArenaEnv,
    TextArenaOpponentEnv,
    listed_moves,
    parse_tic_tac_toe_board,
    textarena_metrics,
    textarena_random,
    textarena_tic_tac_toe_minimax,
)
from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig, ScriptedChatClient
from ludic_core.interaction import MultiAgentProtocol, SingleAgentSyncProtocol
from ludic_core.registry import ComponentError


def _agent(policy, tok=None) -> Agent:
    return Agent(ScriptedChatClient(policy, tok))


def _self_play(env, policies, seed, tok=None):
    agents = {a: _agent(p, tok) for a, p in zip(env.agent_ids, policies, strict=True)}
    return asyncio.run(MultiAgentProtocol(agents).run(env, max_steps=30, env_seed=seed))


# ------------------------------------------------------------------ self-play


@pytest.mark.parametrize("game", ["TicTacToe-v0", "TicTacToe-v0-raw", "TicTacToe-v0-train"])
def test_self_play_gives_one_rollout_per_player_with_the_games_rewards(game, tiny_model_and_tokenizer):
    _, tok = tiny_model_and_tokenizer
    outcomes = set()
    for seed in range(6):
        env = TextArenaEnv(game)
        p0, p1 = _self_play(env, [textarena_random(seed), textarena_tic_tac_toe_minimax()], seed, tok)
        rewards = env.game.outcome.rewards  # what TextArena's close() said
        assert (p0.meta["agent_id"], p1.meta["agent_id"]) == ("player_0", "player_1")
        assert p0.meta["episode_id"] == p1.meta["episode_id"] and not p0.meta["truncated"]
        assert p0.total_reward == rewards[0] and p1.total_reward == rewards[1]
        assert p0.total_reward + p1.total_reward == sum(rewards.values()) == 0  # TicTacToe is zero-sum
        assert len(p0.steps) - len(p1.steps) in (0, 1)  # player 0 moves first, then they alternate
        assert p1.total_reward >= 0  # minimax never loses
        outcomes.add(p1.total_reward)
        for r, mark in ((p0, "'O'"), (p1, "'X'")):
            first_message = r.steps[0].info["prompt_messages"][0]["content"]
            assert f"you will be {mark}" in first_message  # TextArena's own prompt, to each seat at reset
            for s in r.steps:
                assert s.trace is not None and s.trace.prompt_token_ids  # traces from the tokenizer
                assert tok.decode(s.trace.completion_token_ids[:-1]) == s.action
    assert outcomes == {0.0, 1.0}  # wins and draws both happened


def test_raw_observations_are_the_new_messages_and_wrapped_ones_the_history():
    env = TextArenaEnv("TicTacToe-v0-raw")
    p0, _ = _self_play(env, [textarena_tic_tac_toe_minimax(), textarena_tic_tac_toe_minimax()], 0)
    second = p0.steps[1].prev_obs
    assert second.startswith("[Player 0] [4]") and "You are Player 0" not in second  # only what is new
    env = TextArenaEnv("TicTacToe-v0")
    p0, _ = _self_play(env, [textarena_tic_tac_toe_minimax(), textarena_tic_tac_toe_minimax()], 0)
    assert "You are Player 0" in p0.steps[1].prev_obs  # LLMObservationWrapper repeats the history


def test_an_invalid_move_gets_the_games_retry_then_loses_the_game():
    env = TextArenaEnv("TicTacToe-v0-raw")
    replies = iter(["I think the centre", "[4]", "[4]", "[9]"])  # P0 bad; P0 [4]; P1 taken; P1 out of range
    p0, p1 = _self_play(env, [lambda m: next(replies)] * 2, 0)
    bad, good = p0.steps
    assert bad.info["invalid_move"] and bad.reward == 0 and not bad.terminated
    assert "attempted an invalid move" in bad.next_obs  # TextArena's own message, and the same player again
    assert not good.info["invalid_move"]
    assert [s.info["invalid_move"] for s in p1.steps] == [True, True]
    assert p1.total_reward == -1 and p0.total_reward == 1  # the second invalid move in a row loses
    assert env.game.outcome.info[1]["invalid_move"] is True


def test_max_steps_truncates_a_game_that_is_not_over():
    env = TextArenaEnv("TicTacToe-v0-raw")
    agents = {a: _agent(textarena_random(i)) for i, a in enumerate(env.agent_ids)}
    p0, p1 = asyncio.run(MultiAgentProtocol(agents).run(env, max_steps=3, env_seed=0))
    assert p0.meta["truncated"] and p0.steps[-1].truncated and p0.total_reward == p1.total_reward == 0
    assert textarena_metrics([p0, p1])["unfinished_rate"] == 1.0


def test_an_episode_with_no_parsed_move_still_counts_for_its_seat():
    """A reply that never parses ends the episode before the env saw a move (no env
    info on any step): the seat comes from TextArena's prompt ("You are Player 1")."""
    from ludic_core.parsers import xml_tag_parser

    env = TextArenaOpponentEnv("TicTacToe-v0-raw", seat=1)
    agent = Agent(ScriptedChatClient(lambda m: "[4]"), parser=xml_tag_parser("move"))
    (r,) = asyncio.run(SingleAgentSyncProtocol(agent, max_parse_failures=1).run(env, max_steps=9, env_seed=0))
    assert r.steps[0].info.get("parse_error") and "seat" not in r.steps[0].info
    m = textarena_metrics([r])
    assert m["P1/games"] == 1 and m["P1/unfinished_rate"] == 1 and m["invalid_move_rate"] == 1


# ------------------------------------------------------------ fixed opponent


def test_minimax_never_loses_to_the_random_opponent_in_either_seat():
    env = TextArenaOpponentEnv("TicTacToe-v0-raw", opponent="textarena_random", seat="alternate")
    proto = SingleAgentSyncProtocol(_agent(textarena_tic_tac_toe_minimax()))
    rollouts = [asyncio.run(proto.run(env, max_steps=9, env_seed=s))[0] for s in range(16)]
    m = textarena_metrics(rollouts)
    assert m["P0/games"] == m["P1/games"] == 8
    assert m["loss_rate"] == 0 and m["win_rate"] >= 0.75 and m["invalid_move_rate"] == 0
    assert {r.steps[-1].reward for r in rollouts} <= {0.0, 1.0}
    # the random opponent really played: its moves are recorded and differ between seeds
    openings = {tuple(r.steps[0].info["opponent_moves"]) for r in rollouts if r.steps[0].info["seat"] == 1}
    assert len(openings) > 1


def test_the_minimax_opponent_never_loses_to_a_random_agent():
    env = TextArenaOpponentEnv("TicTacToe-v0-raw", opponent="textarena_tic_tac_toe_minimax", seat=1)
    rollouts = [asyncio.run(SingleAgentSyncProtocol(_agent(textarena_random(s))).run(env, max_steps=9, env_seed=s))[0]
                for s in range(10)]
    assert all(r.steps[0].info["seat"] == 1 for r in rollouts)
    assert all(r.total_reward in (-1.0, 0.0) for r in rollouts) and min(r.total_reward for r in rollouts) == -1.0


def _first_listed(messages):
    return listed_moves(messages[-1]["content"])[0]


def test_a_seed_fixes_a_game_even_when_episodes_interleave():
    """TextArena draws from the global `random` (KuhnPoker shuffles its deck every
    round); each game has its own stream, so the same seed deals the same cards
    whatever the order episodes interleave in, and the caller's global state stays."""
    env = EnvConfig(name="textarena_vs_opponent", kwargs={"game": "KuhnPoker-v0-raw", "seat": 0})
    agent = AgentConfig(max_turns=12)

    async def first_listed(messages):
        await asyncio.sleep(0)  # let the other episodes run: they interleave as with a model server
        return _first_listed(messages)

    def transcripts(seeds):
        engine = build_engine(env, agent, ScriptedChatClient(first_listed))
        rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, seeds), max_steps=12))
        assert not any(r.failed for r in rollouts)
        return {r.meta["env_seed"]: [s.prev_obs for s in r.steps] for r in rollouts}

    random.seed(123)
    before = random.random()
    random.seed(123)
    forward = transcripts(list(range(8)))
    assert random.random() == before
    assert forward == transcripts(list(range(7, -1, -1)))
    assert len({str(t) for t in forward.values()}) > 4  # the seeds deal different games


def test_a_bad_opponent_is_named_when_the_env_is_built():
    with pytest.raises(ComponentError, match="no_such_player"):
        check_env(EnvConfig(name="textarena_vs_opponent", kwargs={"opponent": "no_such_player"}))
    with pytest.raises(ComponentError, match="seat"):
        check_env(EnvConfig(name="textarena_vs_opponent", kwargs={"seat": 2}))



def test_built_directly_the_env_resolves_its_own_players_and_takes_a_resolver_for_others():
    """The env never imports the config layer: any policy but its own comes through `policies`."""
    from ludic_core.compose.policy import seeded_policy

    path = "ludic_core.envs.textarena.players:textarena_random"
    with pytest.raises(ValueError, match="policies"):
        TextArenaOpponentEnv("TicTacToe-v0-raw", opponent=path)
    with pytest.raises(TypeError):
        TextArenaOpponentEnv("TicTacToe-v0-raw", opponent="textarena_random", opponent_kwargs={"nope": 1})
    env = TextArenaOpponentEnv("TicTacToe-v0-raw", opponent=path, seat=0, policies=seeded_policy)
    assert env.reset(seed=0)["agent_0"][1]["seat"] == 0


# ----------------------------------------------------- library failures recorded


class _BuggyTicTacToe(_TextArenaTicTacToe):
    """TextArena's TicTacToe with bugs planted in the library's step: a move to cell 8
    raises, an opening move to cell 7 calls `sys.exit`."""

    def step(self, action):
        if "[8]" in action:
            raise KeyError("planted bug")
        if "[7]" in action and self.state.turn == 0:
            sys.exit("planted exit")
        return super().step(action)


ta.register(id="BuggyTicTacToe-v0-raw", entry_point=_BuggyTicTacToe)


def test_an_exception_in_the_library_is_a_recorded_error_and_keeps_the_batch():
    env = EnvConfig(name="textarena", kwargs={"game": "BuggyTicTacToe-v0-raw"})
    agent = AgentConfig(max_turns=12)
    engine = build_engine(env, agent, ScriptedChatClient(textarena_random(3)))
    rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, range(16)), max_steps=12))
    failed = [r for r in rollouts if r.failed]
    ok = [r for r in rollouts if not r.failed]
    assert len(rollouts) == 32 and failed and ok  # two rollouts per game, some games hit a bug
    for r in failed:
        assert "BuggyTicTacToe-v0-raw" in r.meta["error"]
        assert ("[8]" in r.meta["error"] and "planted bug" in r.meta["error"]) or (
            "[7]" in r.meta["error"] and "SystemExit" in r.meta["error"])  # the action that crashed it, and how
    assert {"[7]" in r.meta["error"] for r in failed} == {True, False}  # both bugs were hit
    assert any(r.steps for r in failed)  # the moves before the crash are kept
    assert all(r.steps[-1].terminated for r in ok)
    with pytest.raises(EnvError, match="step after the game ended"):
        done = TextArenaEnv("TicTacToe-v0-raw")
        _self_play(done, [textarena_tic_tac_toe_minimax()] * 2, 0)
        done.game.step("[0]")


def test_a_game_that_needs_downloads_fails_its_episode_not_the_run():
    """Codenames needs nltk's word lists (a download): its episode is recorded failed."""
    env = TextArenaEnv("Codenames-v0-raw", num_players=4)
    agents = {a: _agent(textarena_random(0)) for a in env.agent_ids}
    rollouts = asyncio.run(MultiAgentProtocol(agents).run(env, max_steps=4, env_seed=0))
    assert len(rollouts) == 4 and all(r.failed for r in rollouts)
    assert "Codenames-v0-raw" in rollouts[0].meta["error"] and "LookupError" in rollouts[0].meta["error"]


# ------------------------------------------------------------- scripted players


def test_scripted_players_read_textarena_text():
    text = ("[GAME] Current Board:\n\n O | 1 | 2 \n---+---+---\n 3 | X | 5 \n---+---+---\n 6 | 7 | O \n\n"
            "Available Moves: '[1]', '[2]', '[3]', '[5]', '[6]', '[7]'")
    assert parse_tic_tac_toe_board(text) == ("O...X...O", "X")
    assert listed_moves(text) == ["[1]", "[2]", "[3]", "[5]", "[6]", "[7]"]
    assert listed_moves("For example, '[4]' places your mark") == []  # an example is not a move list
    assert listed_moves("[GAME] Your available actions are: '[check]', '[bet]'") == ["[check]", "[bet]"]
    msgs = [{"role": "user", "content": text}]
    assert textarena_tic_tac_toe_minimax()(msgs) in ("[1]", "[3]", "[5]", "[7]")  # X must block... an edge
    assert textarena_random(0)(msgs) in listed_moves(text)
    with pytest.raises(ValueError, match="lists no moves"):
        textarena_random(0)([{"role": "user", "content": "no moves here"}])


# -------------------------------------------------------------- the tiny LLM


@pytest.fixture(scope="module")
def bracket_model_dir(tiny_model_and_tokenizer, tmp_path_factory):
    """The tiny model after a few seconds of cross-entropy on "[k]<eos>" replies.

    An untrained byte-level model almost never emits eos, so its every reply is
    cut at max_tokens and never reaches the game. Training on the last 24 prompt
    tokens before each minimax reply is enough to make it answer in TextArena's
    format (legal or not) and keeps this fixture cheap.
    """
    import copy

    import torch

    model, tok = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    env = TextArenaOpponentEnv("TicTacToe-v0-raw")
    agent = Agent(ScriptedChatClient(textarena_tic_tac_toe_minimax(), tok), context=SlidingWindowContext(1))
    traces = [s.trace for seed in range(12)
              for s in asyncio.run(SingleAgentSyncProtocol(agent).run(env, max_steps=9, env_seed=seed))[0].steps]
    seqs = [(t.prompt_token_ids[-24:], t.completion_token_ids) for t in traces]
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(30):
        batch = [seqs[(step * 16 + i) % len(seqs)] for i in range(16)]
        ids = torch.tensor([p + c for p, c in batch])
        labels = torch.tensor([[-100] * len(p) + c for p, c in batch])
        loss = model(input_ids=ids.to(model.device), labels=labels.to(model.device)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = tmp_path_factory.mktemp("models") / "bracket-tuned"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_llm_self_play_on_tictactoe_v0_end_to_end(bracket_model_dir):
    """TicTacToe-v0 with the tiny LLM in both seats through MultiAgentProtocol: two
    rollouts per game, rewards as the game says, and every step's token trace is the
    tokenizer's rendering with sampling log-probs. The "-raw" id: with TextArena's
    default wrapper the history in every observation outgrows the tiny model's
    1024-token context within three moves."""
    client = LocalChatClient(bracket_model_dir)
    tok = client.tokenizer
    spec = InferenceSpec(sampling=SamplingConfig(temperature=1.0, max_tokens=8))

    async def play(seed):
        env = TextArenaEnv("TicTacToe-v0-raw")
        agents = {a: Agent(client, context=SlidingWindowContext(1), inference=spec) for a in env.agent_ids}
        rollouts = await MultiAgentProtocol(agents, system_prompt="").run(env, max_steps=24, env_seed=seed,
                                                                          sampling_seed=seed)
        return env, rollouts

    async def many():
        return await asyncio.gather(*[play(s) for s in range(6)])

    finished = 0
    for env, (p0, p1) in asyncio.run(many()):
        assert (p0.meta["agent_id"], p1.meta["agent_id"]) == ("player_0", "player_1") and not p0.failed
        for r in (p0, p1):
            for s in r.steps:
                t = s.trace
                text = tok.apply_chat_template(s.info["prompt_messages"], add_generation_prompt=True, tokenize=False)
                assert t.prompt_token_ids == tok.encode(text, add_special_tokens=False)
                assert len(t.completion_logprobs) == len(t.completion_token_ids) > 0
                assert tok.decode(t.completion_token_ids, skip_special_tokens=True) == s.action
        if env.game.outcome is not None:
            finished += 1
            rewards = env.game.outcome.rewards
            # a player whose game ended before its first move has no step to carry its reward
            got = [r.total_reward + r.meta.get("unattributed_reward", 0.0) for r in (p0, p1)]
            assert got == [rewards[0], rewards[1]] and sum(got) == 0
    assert finished >= 3  # the model's moves (legal or not) reached the game, which ended them
