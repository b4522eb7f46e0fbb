"""`TextArenaGame`: one TextArena game behind a small surface the envs build on.

TextArena (`pip install textarena`) plays a game as `make(id)`, `reset(num_players,
seed)`, then, turn by turn, `get_observation()` -> (player id, observation) and
`step(action)` -> (done, info); `close()` gives every player's reward once the game
is over. This class adds what an RL rollout needs and the library leaves out:

- Its own random stream. TextArena seeds and draws from the *global* `random`
  module; concurrent episodes (the rollout engine interleaves them on one event
  loop) would otherwise draw from one stream, so a seed would not fix a game, and
  a game would move the caller's global state. Every call into the library runs
  with this game's state swapped in (`numpy.random` is not swapped: no game this
  adapter was tried on draws from it).
- Observations as text. Ids with TextArena's default wrappers ("TicTacToe-v0")
  already return text, which holds the whole history; "-raw" ids return the new
  messages since the player's last turn, rendered here the way TextArena's
  `LLMObservationWrapper` renders them ("[GAME] ...", "[Player 1] ...").
- Library errors with their context: anything the game raises becomes an
  `EnvError` naming the game, the player and the action; the protocols record it
  on the episode, which keeps the steps played so far.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Iterator

from ludic_core.envs.base import EnvError

__all__ = ["TextArenaGame", "GameOutcome", "render_messages", "make_textarena"]


def make_textarena(game: str, **kwargs: Any) -> Any:
    """`textarena.make(game, **kwargs)` with a clear error when the extra is missing."""
    try:
        import textarena as ta
    except ImportError as exc:  # an optional extra: the core does not need it
        raise ImportError("TextArena games need the `textarena` package: "
                          "pip install 'ludic-prefect[textarena]'") from exc
    return ta.make(game, **kwargs)


def render_messages(messages: Any, role_mapping: dict[int, str] | None = None) -> str:
    """A player's observation as text: wrapped games already give a string; raw ones a
    list of (sender id, message, type), rendered one "[sender] message" per line."""
    if isinstance(messages, str):
        return messages
    roles = role_mapping or {}
    lines = []
    for sender, message, *_ in messages:
        name = "GAME" if sender == -1 else roles.get(sender, f"Player {sender}")
        lines.append(f"[{name}] {message}")
    return "\n".join(lines)


@dataclass
class GameOutcome:
    """The game's verdict once it is over: each player's reward and TextArena's game info."""

    rewards: dict[int, float]
    info: dict[int, dict[str, Any]] = field(default_factory=dict)

    def result(self, player: int) -> str:
        """'win', 'loss' or 'draw' for `player`, from the rewards alone (any game)."""
        mine, values = self.rewards.get(player, 0.0), set(self.rewards.values())
        if len(values) <= 1:
            return "draw"
        return "win" if mine == max(values) else "loss"

    def reason(self, player: int) -> str:
        return str(self.info.get(player, {}).get("reason") or "Game over.")


class TextArenaGame:
    """A TextArena env with its own random stream, text observations and wrapped errors."""

    def __init__(self, game: str, num_players: int, env_kwargs: dict[str, Any] | None = None) -> None:
        if num_players < 1:
            raise ValueError(f"num_players must be >= 1, got {num_players}")
        self.game_id = game
        self.num_players = num_players
        self.env_kwargs = dict(env_kwargs or {})
        self._env: Any = None
        self._rng_state: Any = random.Random().getstate()
        self.done = False
        self.outcome: GameOutcome | None = None

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        outer = random.getstate()
        random.setstate(self._rng_state)
        try:
            yield
        finally:
            self._rng_state = random.getstate()
            random.setstate(outer)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self._own_random():
            try:
                return fn(*args, **kwargs)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - any library failure (a game's exit() too)
                raise EnvError(f"TextArena {self.game_id!r}: {what} raised {type(exc).__name__}: {exc}") from exc

    def reset(self, seed: int | None) -> None:
        """A fresh game (a new TextArena env: some keep state across resets)."""
        self._rng_state = random.Random(seed).getstate()
        self.done, self.outcome = False, None
        self._env = self._call("make", make_textarena, self.game_id, **self.env_kwargs)
        self._call(f"reset(num_players={self.num_players})", self._env.reset,
                   num_players=self.num_players, seed=seed)

    @property
    def current_player(self) -> int | None:
        """Whose turn it is; None once the game is over."""
        return None if self.done else int(self._env.state.current_player_id)

    def observe(self) -> tuple[int, str]:
        """(current player, its new observation text); its pending messages are consumed."""
        player, messages = self._call("get_observation", self._env.get_observation)
        return int(player), render_messages(messages, self._roles())

    def observe_waiting(self, player: int) -> str:
        """The pending observation of a player whose turn it is not (e.g. its prompt at
        reset), rendered by the game's observation wrappers as its own turn would be."""
        import textarena as ta

        state = self._env.state
        messages, state.observations[player] = state.observations[player], []
        wrappers, env = [], self._env
        while isinstance(env, ta.Wrapper):
            if isinstance(env, ta.ObservationWrapper):
                wrappers.append(env)
            env = env.env
        out: Any = messages
        for wrapper in reversed(wrappers):  # innermost first, as get_observation applies them
            out = self._call(f"observation for player {player}", wrapper.observation, player, out)
        return render_messages(out, self._roles())

    def _roles(self) -> dict[int, str] | None:
        return getattr(getattr(self._env, "state", None), "role_mapping", None)

    def step(self, action: str) -> dict[str, Any]:
        """Play the current player's `action`; returns the step's info (with
        `invalid_move` when TextArena rejected it and gave the player another try)."""
        player = self.current_player
        if player is None:
            raise EnvError(f"TextArena {self.game_id!r}: step after the game ended")
        done, info = self._call(f"step by player {player} with action {action[:200]!r}", self._env.step, action)
        state = self._env.state
        out = dict(info or {})
        out["invalid_move"] = bool(getattr(state, "error_count", 0)) and not done
        if done:
            self.done = True
            rewards, game_info = self._call("close", self._env.close)
            if rewards is None:
                raise EnvError(f"TextArena {self.game_id!r} ended without rewards (info {out})")
            self.outcome = GameOutcome({int(k): float(v) for k, v in rewards.items()},
                                       {int(k): dict(v) for k, v in (game_info or {}).items()})
            if self.outcome.info.get(player, {}).get("invalid_move"):
                out["invalid_move"] = True
        return out
