"""Tic-tac-toe's rules: boards, results and exact (memoised) minimax.

Boards are 9-char strings of 'X', 'O', '.' in row-major order; cells are
1..9 outside, indices 0..8 inside. The envs, the eval table and the scripted
players in this package are built on these.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Literal

__all__ = ["Mark", "EMPTY_BOARD", "winner", "legal_moves", "winning_moves", "minimax_moves", "move_regret",
           "move_delay", "move_value", "render_board"]

Mark = Literal["X", "O"]
EMPTY_BOARD = "." * 9
_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _as_board(board: str | Iterable[str]) -> str:
    b = board if isinstance(board, str) else "".join(board)
    if len(b) != 9 or set(b) - set("XO."):
        raise ValueError(f"board must be 9 cells of 'X', 'O' or '.', got {board!r}")
    return b


def _check_mark(mark: str, what: str) -> None:
    if mark not in ("X", "O"):
        raise ValueError(f"{what} must be 'X' or 'O', got {mark!r}")


def _other(mark: str) -> str:
    return "O" if mark == "X" else "X"


def _winner(b: str) -> str | None:
    for i, j, k in _LINES:
        if b[i] != "." and b[i] == b[j] == b[k]:
            return b[i]
    return None


def _place(b: str, index: int, mark: str) -> str:
    return b[:index] + mark + b[index + 1 :]


def _result(b: str, mark: str) -> str | None:
    """'win' / 'loss' / 'draw' from `mark`'s side, or None while in play."""
    w = _winner(b)
    if w is not None:
        return "win" if w == mark else "loss"
    return "draw" if "." not in b else None


def winner(board: str | Iterable[str]) -> str | None:
    """'X' or 'O' if that mark has three in a line, else None."""
    return _winner(_as_board(board))


def legal_moves(board: str | Iterable[str]) -> list[int]:
    """Empty cells (1-based); [] once the game is won or the board is full."""
    b = _as_board(board)
    return [] if _winner(b) else [i + 1 for i, c in enumerate(b) if c == "."]


def winning_moves(board: str | Iterable[str], player: str) -> list[int]:
    """Cells (1-based) where `player` completes a line now."""
    b = _as_board(board)
    _check_mark(player, "player")
    return [c for c in legal_moves(b) if _winner(_place(b, c - 1, player)) == player]


def _move_score(b: str, index: int, player: str) -> int:
    """Score of `player` playing `index`: +(1 + empty cells left) for a win, so
    faster wins score higher (and slower losses lose less), 0 for a draw."""
    nb = _place(b, index, player)
    if _winner(nb) == player:
        return 1 + nb.count(".")
    if "." not in nb:
        return 0
    return -_best_score(nb, _other(player))


@lru_cache(maxsize=None)
def _best_score(b: str, player: str) -> int:
    return max(_move_score(b, i, player) for i, c in enumerate(b) if c == ".")


@lru_cache(maxsize=None)
def _optimal(b: str, player: str) -> tuple[int, ...]:
    if _winner(b) or "." not in b:
        return ()
    scores = {i: _move_score(b, i, player) for i, c in enumerate(b) if c == "."}
    best = max(scores.values())
    return tuple(i + 1 for i, s in scores.items() if s == best)


def _value(score: int) -> int:
    return (score > 0) - (score < 0)


def move_regret(board: str | Iterable[str], cell: int, player: str) -> int:
    """How much game value (win 1, draw 0, loss -1, under best play after it)
    `player` gives away by playing `cell` (1-based, legal): 0, 1 or 2."""
    b = _as_board(board)
    return _value(_best_score(b, player)) - _value(_move_score(b, cell - 1, player))


def move_delay(board: str | Iterable[str], cell: int, player: str) -> int:
    """How many of its own moves later `player` wins after playing `cell` (1-based,
    legal) than under its best play, in a position it wins: a forced win two moves
    on instead of a win now is 1. 0 when the position is not won, or when `cell`
    gives the win away (`move_regret` counts that). Regret counts value, not
    speed, so a policy rewarded by regret alone may drift off an immediate win."""
    b = _as_board(board)
    best, score = _best_score(b, player), _move_score(b, cell - 1, player)
    return (best - score) // 2 if score > 0 else 0


def move_value(board: str | Iterable[str], cell: int, player: str) -> int:
    """The game's value for `player` (win 1, draw 0, loss -1, under best play by both
    sides) after it plays `cell` (1-based, legal): what a game cut off there is worth."""
    return _value(_move_score(_as_board(board), cell - 1, player))


def minimax_moves(board: str | Iterable[str], player: str) -> list[int]:
    """All optimal cells (1-based) for `player` to move.

    Optimal = best game value (win > draw > loss), ties broken by speed (win
    sooner, lose later), so a move that wins now is the only optimal one.
    Returns [] for a finished game.
    """
    _check_mark(player, "player")
    return list(_optimal(_as_board(board), player))


def render_board(board: str | Iterable[str]) -> str:
    b = _as_board(board)
    return f"{b[0:3]}\n{b[3:6]}\n{b[6:9]}"
