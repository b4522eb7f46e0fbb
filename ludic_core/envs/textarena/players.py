"""Scripted TextArena players: fixed opponents for single-agent training, and a teacher.

Each is a policy factory (registered in `ludic.policies`) returning
`policy(messages) -> reply`, reading TextArena's own observation text from the
last user message and answering in the game's own format ("[4]"), exactly as a
model is asked to. They play through `ScriptedChatClient` as teachers too.

- `textarena_random`: a uniformly random move among those the observation lists
  (TextArena prints them for several games: TicTacToe's "Available Moves: '[0]',
  '[4]'", Othello's "Valid moves: ..."). Games that list no moves (ConnectFour,
  Nim) need a game-specific player.
- `textarena_tic_tac_toe_minimax`: our exact minimax (`tic_tac_toe.rules`) on
  TextArena's TicTacToe board (cells 0-8; Player 0 is 'O' and moves first).
"""

from __future__ import annotations

import random
import re
from typing import Callable, Literal

from ludic_core.envs.tic_tac_toe.rules import minimax_moves
from ludic_core.types import Message

__all__ = ["textarena_random", "textarena_tic_tac_toe_minimax", "listed_moves", "parse_tic_tac_toe_board"]

_MOVES_LIST = re.compile(r"\b(?:available|valid)\s+(?:moves|actions)\b(.*)$", re.I | re.M)
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")
_ROW = re.compile(r"^\s*(\S)\s*\|\s*(\S)\s*\|\s*(\S)\s*$", re.M)
#: Tie-break among optimal cells (TextArena numbering): centre, corners, edges.
_PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise ValueError("no user message with text to read a TextArena observation from")


def listed_moves(text: str) -> list[str]:
    """The bracketed moves after the last "Available/Valid moves|actions" in `text`, on
    its line ([] if none): a "[GAME]" sender tag before it is not a move."""
    lists = _MOVES_LIST.findall(text)
    return _BRACKETED.findall(lists[-1]) if lists else []


def textarena_random(seed: int | None = None) -> Callable[[list[Message]], str]:
    """A uniformly random listed move (registered policy `textarena_random`)."""
    rng = random.Random(seed)

    def policy(messages: list[Message]) -> str:
        text = _last_user_text(messages)
        moves = listed_moves(text)
        if not moves:
            raise ValueError(f"the observation lists no moves to choose from: {text[-300:]!r}")
        return rng.choice(moves)

    return policy


def parse_tic_tac_toe_board(text: str) -> tuple[str, str]:
    """(board, mark to play) from TextArena TicTacToe text: the last board in `text`
    as 9 cells of 'X', 'O', '.' (TextArena's cell k is index k), and the mark from
    the counts (Player 0 is 'O' and moves first, so equal counts mean O to play)."""
    rows = _ROW.findall(text)
    if len(rows) < 3:
        raise ValueError(f"no TextArena tic-tac-toe board in: {text[-300:]!r}")
    cells = [c for row in rows[-3:] for c in row]
    board = "".join(c if c in "XO" else "." for c in cells)
    return board, "O" if board.count("O") == board.count("X") else "X"


def textarena_tic_tac_toe_minimax(seed: int | None = 0, tie_break: Literal["random", "preference"] = "preference"
                                  ) -> Callable[[list[Message]], str]:
    """Never loses TextArena's TicTacToe (registered policy `textarena_tic_tac_toe_minimax`).

    It needs only the latest board (whose turn it is follows from the counts).
    `tie_break` "preference" makes the move a function of the board (a teacher
    a tiny model can imitate); "random" varies it.
    """
    if tie_break not in ("random", "preference"):
        raise ValueError(f"unknown tie_break {tie_break!r}; expected 'random' or 'preference'")
    rng = random.Random(seed)

    def policy(messages: list[Message]) -> str:
        board, mark = parse_tic_tac_toe_board(_last_user_text(messages))
        best = [c - 1 for c in minimax_moves(board, mark)]
        if not best:
            raise ValueError(f"the game on board {board!r} is over; there is no move to make")
        cell = min(best, key=_PREFERENCE.index) if tie_break == "preference" else rng.choice(best)
        return f"[{cell}]"

    return policy

