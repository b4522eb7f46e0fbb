"""Tic-tac-toe between two agents ("X" and "O"), each with its own dialog: self-play and
multi-agent protocols. The observations and rules are the single-agent env's (`env`, `rules`)."""

from __future__ import annotations

from typing import Any

from ludic_core.envs.base import LudicEnv
from ludic_core.envs.tic_tac_toe.env import (
    ILLEGAL_MOVE_REWARD,
    RESULT_REWARDS,
    _SYSPROMPT,
    _end_obs,
    _obs,
    _parse_action,
    _prompt_obs,
    _turn_info,
)
from ludic_core.envs.tic_tac_toe.rules import EMPTY_BOARD, _other, _place, _result
from ludic_core.types import StepOutcome

__all__ = ["TicTacToeDuelEnv"]


class TicTacToeDuelEnv(LudicEnv):
    """Two agents, "X" and "O", take turns; X starts.

    Every step returns an outcome for both agents so each keeps its own
    dialog: the mover sees the board after its move (reward 0), the other
    sees it with "Your move". Terminal rewards: win 1, draw 0.5, loss 0. An
    illegal move ends the game with -1 for the mover and 0.0 (not a win) for
    the other agent: it did nothing to earn it, and a free win would reward
    an agent for its opponent's format errors in self-play.
    """

    agent_ids = ["X", "O"]

    def __init__(self) -> None:
        self._board = EMPTY_BOARD
        self._to_move: str | None = None

    @property
    def suggested_sysprompt(self) -> str:
        return _SYSPROMPT

    @property
    def board(self) -> str:
        return self._board

    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """`seed` is accepted for the interface; the duel itself has no randomness."""
        self._board = EMPTY_BOARD
        self._to_move = "X"
        return {
            "X": (_prompt_obs(self._board, "X"), _turn_info(self._board, "X")),
            "O": (_obs(self._board, "O", "Waiting for X."), {"board": self._board}),
        }

    def active_agents(self) -> list[str]:
        return [] if self._to_move is None else [self._to_move]

    def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        mover = self._to_move
        if mover is None:
            raise RuntimeError("TicTacToeDuelEnv: no game in progress; call reset() first")
        if mover not in actions:
            raise KeyError(f"TicTacToeDuelEnv.step needs an action for {mover!r} (its turn)")
        if extra := sorted(set(actions) - {mover}):
            raise ValueError(
                f"TicTacToeDuelEnv: got actions for {extra}, but only {mover!r} may move"
            )
        other = _other(mover)
        index, error = _parse_action(actions[mover], self._board)
        if index is None:
            self._to_move = None
            info = {"board": self._board}
            return {
                mover: self._end(mover, "illegal", info | {"illegal_move": True, "error": error}),
                other: self._end(other, "opponent_illegal", info),
            }
        self._board = _place(self._board, index, mover)
        result = _result(self._board, mover)
        if result is not None:
            self._to_move = None
            other_result = {"win": "loss", "loss": "win", "draw": "draw"}[result]
            info = {"board": self._board}
            return {
                mover: self._end(mover, result, info),
                other: self._end(other, other_result, info),
            }
        self._to_move = other
        return {
            # No observation for the mover until its next turn: the other's
            # outcome carries the board, and a "waiting" message would only
            # stack two user turns in the mover's dialog.
            mover: StepOutcome(
                obs=None,
                reward=0.0,
                info={"board": self._board},
            ),
            other: StepOutcome(
                obs=_prompt_obs(self._board, other), reward=0.0, info=_turn_info(self._board, other)
            ),
        }

    def _end(self, mark: str, result: str, info: dict[str, Any]) -> StepOutcome:
        reward = {"illegal": ILLEGAL_MOVE_REWARD, "opponent_illegal": 0.0}.get(result)
        return StepOutcome(
            obs=_end_obs(self._board, mark, result),
            reward=RESULT_REWARDS[result] if reward is None else reward,
            terminated=True,
            info=info | {"result": result},
        )
