"""TextArena games as `LudicEnv`s: every seat an agent, or one agent against scripted seats.

`TextArenaEnv` gives each player its own agent id ("player_0", "player_1", ...), so
`MultiAgentProtocol` plays self-play (one policy in every seat, each with its own
dialog) or policy against policy, and returns one rollout per player. An agent sees
TextArena's own observation text and answers in the game's own action format
("[4]"); its reply goes to the game unchanged, so the game's parser judges it.

Rewards are the game's: 0 on every move, and each player's reward from
`close()` on the move that ends the game (TicTacToe: +1 / -1, 0 each for a draw).
An invalid move is handled the game's way (TextArena gives one more try and ends
the game on the second; the step's `info["invalid_move"]` says so), never as an
exception. An exception inside the library fails the episode with a recorded
error (`EnvError`), and the protocol keeps the steps played so far.

`TextArenaOpponentEnv` is the single-agent form for training against a fixed
opponent: the agent plays one seat (fixed, or alternating with the seed) and
scripted policies (`ludic.policies`, e.g. `textarena_random`) play the others
inside `step`, with their own dialogs. Names resolve through `policies`, which
the config layer (`ludic_core.compose`) passes in: an env never imports the
layer that builds it.
"""

from __future__ import annotations

import inspect
import random
from typing import Any, Callable, Iterable, Literal

from ludic_core.envs.base import EnvError, LudicEnv, PolicyResolver
from ludic_core.envs.textarena.game import TextArenaGame
from ludic_core.envs.textarena.metrics import textarena_metrics
from ludic_core.envs.textarena.players import textarena_random, textarena_tic_tac_toe_minimax
from ludic_core.types import StepOutcome

__all__ = ["TextArenaEnv", "TextArenaOpponentEnv", "player_id"]

#: Scripted moves in a row before the env gives up on an opponent that never ends its turn.
MAX_OPPONENT_MOVES = 64


def player_id(player: int) -> str:
    """The agent id of TextArena player `player`."""
    return f"player_{player}"


def _final(game: TextArenaGame, player: int, info: dict[str, Any]) -> StepOutcome:
    """The terminal outcome for `player`: its reward from the game, its result and why."""
    outcome = game.outcome
    assert outcome is not None
    reward = outcome.rewards.get(player, 0.0)
    info = info | {"result": outcome.result(player), "game_reward": reward, "seat": player}
    return StepOutcome(obs=outcome.reason(player), reward=reward, terminated=True, info=info)


class TextArenaEnv(LudicEnv):
    """A TextArena game (`textarena.make(game)`) with one agent per player."""

    def __init__(self, game: str = "TicTacToe-v0", num_players: int = 2,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        self.game = TextArenaGame(game, num_players, env_kwargs)
        self.agent_ids = [player_id(p) for p in range(num_players)]

    @staticmethod
    def episode_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
        """Win / draw / loss and invalid-move rates, overall and per seat."""
        return textarena_metrics(rollouts)

    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        self.game.reset(seed)
        first, obs = self.game.observe()
        info = {"game": self.game.game_id}
        # a waiting player starts from its own prompt too; later messages arrive with its turn
        return {player_id(p): (obs if p == first else self.game.observe_waiting(p), info | {"seat": p})
                for p in range(self.game.num_players)}

    def active_agents(self) -> list[str]:
        player = self.game.current_player
        return [] if player is None else [player_id(player)]

    def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        mover = self.game.current_player
        if mover is None:
            raise EnvError(f"TextArena {self.game.game_id!r}: no game in progress; call reset() first")
        if set(actions) != {player_id(mover)}:
            raise EnvError(f"TextArena {self.game.game_id!r}: it is {player_id(mover)!r}'s turn, "
                           f"got actions for {sorted(actions)}")
        info = self.game.step(actions[player_id(mover)]) | {"seat": mover}
        if self.game.done:
            return {player_id(p): _final(self.game, p, info if p == mover else {})
                    for p in range(self.game.num_players)}
        nxt, obs = self.game.observe()
        # the mover's next observation arrives with its next turn (unless it moves again)
        out = {player_id(mover): StepOutcome(obs=None, reward=0.0, info=info)}
        out[player_id(nxt)] = StepOutcome(obs=obs, reward=0.0, info=info if nxt == mover else {})
        return out


PolicyFn = Callable[[list[dict[str, Any]]], str]

#: the players of this package, by their registered names: what an env built without a config resolves
_OWN_PLAYERS: dict[str, Callable[..., PolicyFn]] = {"textarena_random": textarena_random,
                                                    "textarena_tic_tac_toe_minimax": textarena_tic_tac_toe_minimax}


def _own_player(name: str, kwargs: dict[str, Any]) -> Callable[[int | None], PolicyFn]:
    """seed -> a fresh player of this package, its keywords checked now. Any other
    policy (an entry point, `pkg.module:factory`) is the registry's business, which
    the config layer passes in as `policies`."""
    if name not in _OWN_PLAYERS:
        raise ValueError(f"opponent {name!r}: without `policies` only {sorted(_OWN_PLAYERS)} resolve; build the env "
                         "from an EnvConfig or pass policies=ludic_core.compose.policy.seeded_policy")
    factory = _OWN_PLAYERS[name]
    seeded = "seed" in inspect.signature(factory).parameters and "seed" not in kwargs
    inspect.signature(factory).bind(**({**kwargs, "seed": 0} if seeded else kwargs))  # a bad keyword: TypeError now
    return lambda seed: factory(**({**kwargs, "seed": seed} if seeded else kwargs))


class TextArenaOpponentEnv(LudicEnv):
    """One agent ("agent_0") in one seat of a TextArena game; scripted policies play the rest.

    `seat`: the agent's player id, or "alternate" (player `seed % num_players`), so
    one config trains and scores every seat. The opponent policy is built per
    episode (with a seed derived from the env seed when it takes one) and answers
    from its own dialog: TextArena's observations to its seat as user messages,
    its replies as assistant messages.
    """

    agent_ids = ["agent_0"]

    def __init__(self, game: str = "TicTacToe-v0", opponent: str = "textarena_random",
                 opponent_kwargs: dict[str, Any] | None = None, seat: int | Literal["alternate"] = "alternate",
                 num_players: int = 2, env_kwargs: dict[str, Any] | None = None,
                 policies: PolicyResolver | None = None) -> None:
        if num_players < 2:
            raise ValueError(f"an opponent needs a game of 2 or more players, got num_players={num_players}")
        if seat != "alternate" and not (isinstance(seat, int) and 0 <= seat < num_players):
            raise ValueError(f"seat must be 'alternate' or a player id in 0..{num_players - 1}, got {seat!r}")
        self._make_opponent = (policies or _own_player)(opponent, dict(opponent_kwargs or {}))
        self.game = TextArenaGame(game, num_players, env_kwargs)
        self.opponent, self.seat_rule = opponent, seat
        self.seat = 0 if seat == "alternate" else seat
        self._players: dict[int, PolicyFn] = {}
        self._dialogs: dict[int, list[dict[str, Any]]] = {}

    @staticmethod
    def episode_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
        """Win / draw / loss and invalid-move rates, overall and per seat."""
        return textarena_metrics(rollouts)

    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        n = self.game.num_players
        self.seat = (seed or 0) % n if self.seat_rule == "alternate" else int(self.seat_rule)
        self.game.reset(seed)
        rng = random.Random(seed)
        self._players = {p: self._make_opponent(None if seed is None else rng.randrange(1 << 31))
                         for p in range(n) if p != self.seat}
        self._dialogs = {p: [] for p in self._players}
        info = {"game": self.game.game_id, "seat": self.seat, **self._play_opponents()}
        if self.game.done:  # the opponents ended the game before the agent's first move
            raise EnvError(f"TextArena {self.game.game_id!r} ended before seat {self.seat} moved")
        _, obs = self.game.observe()
        return {"agent_0": (obs, info)}

    def active_agents(self) -> list[str]:
        return [] if self.game.done else ["agent_0"]

    def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        if self.game.current_player != self.seat:
            raise EnvError(f"TextArena {self.game.game_id!r}: no game waiting for seat {self.seat}; call reset()")
        if "agent_0" not in actions:
            raise KeyError("TextArenaOpponentEnv.step needs an action for 'agent_0'")
        info = self.game.step(actions["agent_0"]) | {"seat": self.seat}
        if not self.game.done and self.game.current_player != self.seat:
            info |= self._play_opponents()
        if self.game.done:
            return {"agent_0": _final(self.game, self.seat, info)}
        _, obs = self.game.observe()
        return {"agent_0": StepOutcome(obs=obs, reward=0.0, info=info)}

    def _play_opponents(self) -> dict[str, Any]:
        """Scripted seats move until it is the agent's turn or the game ends."""
        moves: list[str] = []
        invalid = 0
        for _ in range(MAX_OPPONENT_MOVES):
            player = self.game.current_player
            if player is None or player == self.seat:
                return {"opponent_moves": moves, "opponent_invalid_moves": invalid}
            _, obs = self.game.observe()
            dialog = self._dialogs[player]
            dialog.append({"role": "user", "content": obs})
            try:
                reply = self._players[player](list(dialog))
            except Exception as exc:  # noqa: BLE001 - a scripted policy's failure, with its context
                raise EnvError(f"opponent {self.opponent!r} in seat {player} raised "
                               f"{type(exc).__name__}: {exc}") from exc
            dialog.append({"role": "assistant", "content": reply})
            invalid += bool(self.game.step(reply)["invalid_move"])
            moves.append(reply)
        raise EnvError(f"TextArena {self.game.game_id!r}: opponents made {MAX_OPPONENT_MOVES} moves in a row")
