"""Tic-tac-toe: the single-agent env against a scripted opponent, and the
observations both envs show, over the rules in `rules` (the two-agent duel:
`duel`; scripted players: `players`).

Boards are 9-char strings of 'X', 'O', '.' in row-major order. Models and
actions use cell numbers 1..9; the code uses indices 0..8 internally. The game
is tiny, so minimax is exact and memoised: it gives the opponent, the
`optimal_moves` diagnostics and the scripted players for free.
"""

from __future__ import annotations

import random
import re
from typing import Any, Iterable, Literal

from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.envs.tic_tac_toe.metrics import tic_tac_toe_metrics
from ludic_core.envs.tic_tac_toe.rules import (  # the rules live there; re-exported here
    EMPTY_BOARD,
    _as_board,
    _check_mark,
    _optimal,
    _other,
    _place,
    _result,
    legal_moves,
    minimax_moves,
    move_delay,
    move_regret,
    move_value,
    render_board,
    winner,
    winning_moves,
)
from ludic_core.types import StepOutcome

__all__ = [
    "EMPTY_BOARD",
    "RESULT_REWARDS",
    "ILLEGAL_MOVE_REWARD",
    "winner",
    "legal_moves",
    "minimax_moves",
    "move_regret",
    "render_board",
    "render_numbered",
    "parse_observation",
    "TicTacToeEnv",
]

RESULT_REWARDS = {"win": 1.0, "draw": 0.5, "loss": 0.0}
ILLEGAL_MOVE_REWARD = -1.0
_OPPONENTS = ("random", "minimax")
# No digits and no literal "<move>N</move>" example: a small model copies such
# an example by induction ("<move>" was followed by "5" before) and then plays
# that cell on every board.
_SYSPROMPT = "You play tic-tac-toe. Answer with the number of a free cell inside move tags."
_BOARD_RE = re.compile(
    r"^[ \t]*([XO.1-9]{3})[ \t]*\r?\n[ \t]*([XO.1-9]{3})[ \t]*\r?\n[ \t]*([XO.1-9]{3})[ \t]*$", re.M
)
_MARK_RE = re.compile(r"You are ([XO])\b")


# ------------------------------------------------------------- observations


def render_numbered(board: str | Iterable[str]) -> str:
    """The board with each empty cell shown as its number ("1X3\n4O6\n789").

    Observations use this: a legal move is then a digit the model can *copy*
    from the board, which small models learn far faster than mapping grid
    positions to cell numbers.
    """
    b = _as_board(board)
    cells = "".join(c if c != "." else str(i + 1) for i, c in enumerate(b))
    return f"{cells[0:3]}\n{cells[3:6]}\n{cells[6:9]}"


def _obs(b: str, mark: str, status: str) -> str:
    return f"Board:\n{render_numbered(b)}\nYou are {mark}. {status}"


def _prompt_obs(b: str, mark: str) -> str:
    return _obs(b, mark, "Your move.")


def _end_obs(b: str, mark: str, result: str) -> str:
    status = {
        "win": "You won.",
        "draw": "Draw.",
        "loss": "You lost.",
        "illegal": "Illegal move, you lose.",
        "opponent_illegal": "Opponent made an illegal move. Game over.",
        "cut": "Game stopped here.",
    }[result]
    return _obs(b, mark, status)


def _turn_info(b: str, mark: str) -> dict[str, Any]:
    return {"board": b, "legal_moves": legal_moves(b), "optimal_moves": list(_optimal(b, mark))}


def _parse_action(action: str, b: str) -> tuple[int | None, str | None]:
    """(index 0..8, None) for a legal move, else (None, why it is illegal)."""
    text = action.strip() if isinstance(action, str) else action
    if not isinstance(text, str) or len(text) != 1 or text not in "123456789":
        return None, f"{action!r} is not a cell number 1-9"
    if b[int(text) - 1] != ".":
        return None, f"cell {text} is already taken"
    return int(text) - 1, None


def parse_observation(text: str) -> tuple[str, str]:
    """Recover (board, mark to play) from an observation, possibly with other
    text around it. The last 3x3 grid wins; the mark comes from "You are X"
    or, failing that, from the mark counts (X moves first)."""
    boards = _BOARD_RE.findall(text)
    if not boards:
        raise ValueError(f"no tic-tac-toe board (3 lines of 'X', 'O', '.') in message: {text!r}")
    b = "".join(boards[-1])
    b = "".join("." if c.isdigit() else c for c in b)  # numbered empty cells
    marks = _MARK_RE.findall(text)
    mark = marks[-1] if marks else _to_move(b)
    return b, mark


# ---------------------------------------------------------------------- envs


def _to_move(b: str) -> str:
    return "X" if b.count("X") == b.count("O") else "O"


def _check_start(board: Any) -> str:
    """`board` if a game can reach it and go on from it, else a ValueError naming why."""
    if not isinstance(board, str):
        raise ValueError(f"start_board must be a 9-char string of 'X', 'O', '.', got {board!r}")
    b = _as_board(board)
    if b.count("X") - b.count("O") not in (0, 1):
        raise ValueError(f"start_board {board!r} cannot occur in play: X moves first, so X has as many marks as O "
                         f"or one more")
    if _result(b, "X") is not None:
        raise ValueError(f"start_board {board!r} is a finished game: the agent would have no move")
    return b


def _seat(first_obs: str) -> str | None:
    """The agent's mark, read from its first observation (a step's info may be a parse failure's)."""
    try:
        return parse_observation(first_obs)[1]
    except ValueError:
        return None


class TicTacToeEnv(SingleAgentEnv):
    """The agent plays one game against a scripted opponent.

    Rewards: win 1.0, draw 0.5, loss 0.0, illegal move -1.0 (ends the game; -1 - 2c under shaping c);
    0.0 for moves that do not end it. Seeding `reset` fixes the opponent.

    `move_shaping` c > 0 adds a per-move process reward from the minimax
    oracle: each legal move also earns -c x its regret, the drop in the game's
    minimax value (win 1, draw 0, loss -1) that the move causes (0 for an
    optimal move; `info["regret"]`). A random opponent rarely punishes a bad
    move, so the outcome alone says little about which move lost a game; the
    regret says it at the move. It pulls toward minimax-safe play (never
    losing), the goal of win+draw, not toward exploiting a random opponent.
    What it buys, by start: docs/experiments (2026-11-25 to 2026-11-27).
    With shaping an illegal move costs -1 - 2c, below the worst legal move
    (-2c and a loss): otherwise a policy that would give value away on a
    board learns to end the game by an illegal move instead of paying that regret
    (measured: 2026-11-30 on the experiments page).

    `random_start` n > 0 gives exploring starts: before the agent's first
    move, 0 to n random moves by each side (drawn from the seed, as is the
    rest) are played, so the game starts from a mid-game board. A GRPO
    group shares its seed, hence its start: the siblings' first moves are
    compared on one board, a clean per-state signal that from the empty board
    only the opening gets. For training; evaluations start from the empty board.

    `agent_moves` n cuts the game after the agent's n-th move (before the
    opponent replies) and scores it by its minimax value from there (win 1,
    draw 0.5, loss 0, under best play by both sides; `info["result"]` "cut"),
    plus the move's shaping as usual. With exploring starts and n = 1 each
    GRPO group compares one move on one board by what it is worth: the
    per-board signal a whole game's outcome (one noisy number for nine moves
    against a random opponent) does not give. For training only.

    `start_board` b starts every game from board b (9 cells of 'X', 'O', '.',
    a position reachable in play and not yet over); the agent is the side to
    move there (X when the marks are level), overriding `agent_mark`. With
    `agent_moves` 1 a group compares moves on one board the caller chose, for
    example a board the policy itself reached in its own games (branching:
    `branch_kwargs`, `ludic_core.batching.branching`). For training only.

    `outcome_weight` w scales a finished (or cut) game's result (win w,
    draw w/2); an illegal move still costs -1 - 2c. With w = 0 and move shaping each move's
    reward is -c x its regret, which is 0 at best on every board: per-turn
    credit with gamma 0 can then compare the siblings' moves at one turn
    index across different boards without the outcome of the one sibling
    whose game ended there pulling the others' quiet moves down.

    `win_speed` s in [0, 1] makes the shaping count speed too: a move that
    keeps a won game won but wins d of the agent's moves later than its best
    move costs c x s x d (`info["delay"]`). Regret alone counts value, and
    with the outcome weighted 0 RL drifted off immediate wins onto forks of
    equal value (docs/experiments/2026-11-30-more-teacher-games.md). s <= 1
    keeps every legal move's cost at most 2c, below an illegal move's.
    """

    def __init__(
        self, opponent: Literal["random", "minimax"] = "random",
        agent_mark: Literal["X", "O", "alternate"] = "X", move_shaping: float = 0.0,
        random_start: int = 0, agent_moves: int | None = None, outcome_weight: float = 1.0,
        start_board: str | None = None, win_speed: float = 0.0,
    ) -> None:
        super().__init__()
        if opponent not in _OPPONENTS:
            raise ValueError(f"unknown opponent kind {opponent!r}; expected one of {_OPPONENTS}")
        if agent_mark != "alternate":
            _check_mark(agent_mark, "agent_mark")
        if not move_shaping >= 0.0:
            raise ValueError(f"move_shaping must be >= 0, got {move_shaping!r}")
        self.move_shaping = float(move_shaping)
        if not 0.0 <= outcome_weight <= 1.0:
            raise ValueError(f"outcome_weight must be in [0, 1] (the weight of a finished game's result), "
                             f"got {outcome_weight!r}")
        self.outcome_weight = float(outcome_weight)
        if not 0.0 <= win_speed <= 1.0:
            raise ValueError(f"win_speed must be in [0, 1] (the cost of each move by which a win comes later, "
                             f"in regret units), got {win_speed!r}")
        self.win_speed = float(win_speed)
        if isinstance(random_start, bool) or not (isinstance(random_start, int) and 0 <= random_start <= 3):
            raise ValueError(f"random_start must be an int in 0..3 (random moves per side before the agent's first), "
                             f"got {random_start!r}")
        self.random_start = random_start
        if agent_moves is not None and (isinstance(agent_moves, bool) or not isinstance(agent_moves, int)
                                        or not 1 <= agent_moves <= 5):
            raise ValueError(f"agent_moves must be None (whole games) or an int in 1..5 (the agent's moves "
                             f"before the game is cut and scored by its minimax value), got {agent_moves!r}")
        self.agent_moves = agent_moves
        self.start_board = None if start_board is None else _check_start(start_board)
        if self.start_board is not None and random_start:
            raise ValueError("start_board and random_start exclude each other: a game starts from one or the other")
        self._moves = 0
        self.opponent = opponent
        #: "alternate" plays X on even seeds and O on odd ones: one config trains and scores both seats
        self.mark_rule = agent_mark
        self.agent_mark: str = "X" if agent_mark == "alternate" else agent_mark
        self.opponent_mark = _other(self.agent_mark)
        self._rng = random.Random()
        self._board = EMPTY_BOARD
        self._in_play = False

    @property
    def suggested_sysprompt(self) -> str:
        return _SYSPROMPT

    @staticmethod
    def episode_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
        """The outcome table, overall and per seat (`X/win_draw_rate`, ...);
        `ludic_core.metrics.env_metrics` finds it on the class."""
        rollouts = list(rollouts)
        out = tic_tac_toe_metrics(rollouts)
        for mark in ("X", "O"):
            mine = [r for r in rollouts if r.steps and _seat(r.steps[0].prev_obs) == mark]
            if mine:
                out.update({f"{mark}/{k}": v for k, v in tic_tac_toe_metrics(mine).items()})
        return out

    @staticmethod
    def branch_kwargs(obs: str) -> dict[str, Any] | None:
        """Branching (`ludic_core.batching.branching`): the kwargs that restart a
        one-move game at the board `obs` shows, for the side to move there (exploring
        starts off: the board is the start); None when `obs` holds no board in play."""
        try:
            b = _check_start(parse_observation(obs)[0])
        except ValueError:  # no board, or none a game goes on from
            return None
        return {"start_board": b, "agent_moves": 1, "random_start": 0}

    @property
    def board(self) -> str:
        return self._board

    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if self.start_board is not None:
            self.agent_mark = _to_move(self.start_board)
            self.opponent_mark = _other(self.agent_mark)
        elif self.mark_rule == "alternate":
            self.agent_mark = "O" if (seed or 0) % 2 else "X"
            self.opponent_mark = _other(self.agent_mark)
        self._rng = random.Random(seed)
        self._board = self.start_board or EMPTY_BOARD
        self._in_play = True
        self._moves = 0
        info: dict[str, Any] = {}
        if self.start_board is not None:
            info.update(_turn_info(self._board, self.agent_mark))
            return _prompt_obs(self._board, self.agent_mark), info
        if self.random_start:
            self._random_plies(self._rng.randint(0, self.random_start))
        if self.agent_mark == "O":
            info["opponent_move"] = self._opponent_move()
        info.update(_turn_info(self._board, self.agent_mark))
        return _prompt_obs(self._board, self.agent_mark), info

    def env_step(self, action: str) -> StepOutcome:
        if not self._in_play:
            raise RuntimeError("TicTacToeEnv: no game in progress; call reset() first")
        index, error = _parse_action(action, self._board)
        if index is None:
            return self._finish("illegal", {"illegal_move": True, "error": error})
        regret = move_regret(self._board, index + 1, self.agent_mark)
        delay = move_delay(self._board, index + 1, self.agent_mark)
        scored = {"regret": regret, "delay": delay}
        shaping = -self.move_shaping * (regret + self.win_speed * delay)
        before, self._board = self._board, _place(self._board, index, self.agent_mark)
        self._moves += 1
        result = _result(self._board, self.agent_mark)
        if result is not None:
            return self._finish(result, scored, shaping)
        if self.agent_moves is not None and self._moves >= self.agent_moves:
            value = move_value(before, index + 1, self.agent_mark)
            return self._finish("cut", scored | {"value": value},
                                shaping + self.outcome_weight * (value + 1) / 2)
        extra = scored | {"opponent_move": self._opponent_move()}
        result = _result(self._board, self.agent_mark)
        if result is not None:
            return self._finish(result, extra, shaping)
        info = extra | _turn_info(self._board, self.agent_mark) | {"agent_mark": self.agent_mark}
        return StepOutcome(obs=_prompt_obs(self._board, self.agent_mark), reward=shaping, info=info)

    def _random_plies(self, pairs: int) -> None:
        """`pairs` random moves by X then O (so the same seat is to move as on an empty
        board), stopping before a pair that would end the game, leave the agent
        fewer than 2 moves of its own, or let an opponent X win before the agent moves."""
        for _ in range(pairs):
            board = self._board
            for mark in ("X", "O"):
                board = _place(board, self._rng.choice(legal_moves(board)) - 1, mark)
                if _result(board, mark) is not None:
                    return
            if len(legal_moves(board)) < 4 or (self.agent_mark == "O" and winning_moves(board, "X")):
                return
            self._board = board

    def _opponent_move(self) -> int:
        """Play the opponent's move; return its cell (1-based)."""
        if self.opponent == "minimax":
            choices = list(_optimal(self._board, self.opponent_mark))
        else:
            choices = legal_moves(self._board)
        cell = self._rng.choice(choices)
        self._board = _place(self._board, cell - 1, self.opponent_mark)
        return cell

    def _finish(self, result: str, info: dict[str, Any], shaping: float = 0.0) -> StepOutcome:
        self._in_play = False
        if result == "illegal":  # below the worst legal move's shaping: no cheaper way out
            reward = ILLEGAL_MOVE_REWARD - 2 * self.move_shaping
        else:  # a cut game's value arrives as its shaping
            reward = self.outcome_weight * RESULT_REWARDS.get(result, 0.0) + shaping
        return StepOutcome(
            obs=_end_obs(self._board, self.agent_mark, result),
            reward=reward,
            terminated=True,
            info=info | {"result": result, "board": self._board, "agent_mark": self.agent_mark},
        )
