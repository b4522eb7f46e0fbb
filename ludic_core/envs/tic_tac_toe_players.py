"""Scripted tic-tac-toe players: plain-Python policies that read the board from
the last user message and answer as the model is asked to ("<move>5</move>").
The demo's teacher, a random baseline, and opponents for tests and protocols.
"""

from __future__ import annotations

import random
from typing import Callable, Literal

from ludic_core.envs.tic_tac_toe import parse_observation
from ludic_core.envs.tic_tac_toe_rules import legal_moves, minimax_moves
from ludic_core.types import Message

__all__ = ["scripted_tic_tac_toe_policy", "minimax_teacher", "random_player"]

_POLICY_KINDS = ("minimax", "random", "first_legal")
#: Teacher tie-break among optimal moves: centre, corners, then edges.
_PREFERENCE = (5, 1, 3, 7, 9, 2, 4, 6, 8)


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            raise ValueError(f"last user message has non-text content: {content!r}")
    raise ValueError("no user message to read a tic-tac-toe board from")


def scripted_tic_tac_toe_policy(
    kind: Literal["minimax", "random", "first_legal"],
    seed: int | None = None,
    tie_break: Literal["random", "preference"] = "random",
) -> Callable[[list[Message]], str]:
    """A plain-Python player: reads the board from the last user message and
    answers exactly as the model is asked to ("<move>5</move>"). Useful as an
    opponent, a baseline, or to test protocols without a model.

    `tie_break` chooses among equally good minimax moves: "random", or
    "preference" (centre, corners, edges), which makes the teacher a function
    of the board. A tiny model imitates that in minutes; with random ties the
    opening move alone is uniform over 9 cells and SFT sits at the marginal.
    """
    if kind not in _POLICY_KINDS:
        raise ValueError(f"unknown scripted policy kind {kind!r}; expected one of {_POLICY_KINDS}")
    if tie_break not in ("random", "preference"):
        raise ValueError(f"unknown tie_break {tie_break!r}; expected 'random' or 'preference'")
    rng = random.Random(seed)

    def policy(messages: list[Message]) -> str:
        board, mark = parse_observation(_last_user_text(messages))
        moves = legal_moves(board)
        if not moves:
            raise ValueError(f"the game on board {board!r} is over; there is no move to make")
        if kind == "minimax":
            best = minimax_moves(board, mark)
            cell = min(best, key=_PREFERENCE.index) if tie_break == "preference" else rng.choice(best)
        elif kind == "random":
            cell = rng.choice(moves)
        else:
            cell = moves[0]
        return f"<move>{cell}</move>"

    return policy


def minimax_teacher(seed: int = 0, tie_break: Literal["random", "preference"] = "preference") -> Callable[[list[Message]], str]:
    """The demo's teacher (registered policy `tic_tac_toe_minimax`): never loses, and
    with the default tie-break its move is a function of the board, which a tiny
    model can imitate."""
    return scripted_tic_tac_toe_policy("minimax", seed=seed, tie_break=tie_break)


def random_player(seed: int | None = None) -> Callable[[list[Message]], str]:
    """A uniformly random legal move (registered policy `tic_tac_toe_random`): a baseline."""
    return scripted_tic_tac_toe_policy("random", seed=seed)
