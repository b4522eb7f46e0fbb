"""Scripted tic-tac-toe players: plain-Python policies that read the board from
the last user message and answer as the model is asked to ("<move>5</move>").
The demo's teacher (a good but imperfect heuristic), a perfect minimax player,
a random baseline, and opponents for tests and protocols.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Literal

from ludic_core.envs.tic_tac_toe.env import parse_observation
from ludic_core.envs.tic_tac_toe.rules import legal_moves, minimax_moves, move_regret, winning_moves
from ludic_core.types import Message

__all__ = ["scripted_tic_tac_toe_policy", "heuristic_teacher", "minimax_teacher", "random_player"]

_POLICY_KINDS = ("minimax", "heuristic", "random", "first_legal")
#: Teacher tie-break among optimal moves: centre, corners, then edges.
_PREFERENCE = (5, 1, 3, 7, 9, 2, 4, 6, 8)
#: The heuristic teacher's blind spot: with nothing to win or block it takes edges, then corners,
#: the centre last (the reverse of what a strong player values).
_EDGES_FIRST = (2, 4, 6, 8, 1, 3, 7, 9, 5)


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            raise ValueError(f"last user message has non-text content: {content!r}")
    raise ValueError("no user message to read a tic-tac-toe board from")


def scripted_tic_tac_toe_policy(
    kind: Literal["minimax", "heuristic", "random", "first_legal"],
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
    "heuristic" wins when it can, blocks when it must, and otherwise plays
    edges first, then corners, the centre last ("preference") or a random
    legal move ("random"): good, not perfect (it walks into forks).
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
        elif kind == "heuristic":
            urgent = winning_moves(board, mark) or winning_moves(board, "O" if mark == "X" else "X")
            fallback = rng.choice(moves) if tie_break == "random" else min(moves, key=_EDGES_FIRST.index)
            cell = urgent[0] if urgent else fallback
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


#: the lines a teacher can overlook (cells 1-9)
_LINES = {"rows": ((1, 2, 3), (4, 5, 6), (7, 8, 9)), "columns": ((1, 4, 7), (2, 5, 8), (3, 6, 9)),
          "diagonals": ((1, 5, 9), (3, 5, 7))}
_FALLBACKS = {"edges": _EDGES_FIRST, "centre": _PREFERENCE, "random": None}


def heuristic_teacher(seed: int = 0, fallback: Literal["edges", "centre", "random"] = "edges",
                      confidence: float | None = None,
                      overlooks: Literal["rows", "columns", "diagonals"] | None = None,
                      notice: float = 0.3, insight: float | None = None) -> Callable[..., str]:
    """The demo's teacher (registered policy `tic_tac_toe_heuristic`): wins when it can, blocks
    when it must, and otherwise plays edges first, corners next, the centre last (`fallback:
    centre`: centre, corners, edges; `random`: a random legal move). Good but imperfect, as a
    real teacher model is: a rule follower with a blind spot (vs a random opponent X 0.95, O 0.885
    win+draw over the demo's 400 evaluation games, against 1.0 and 1.0 for minimax). The student
    imitates the blind spot by SFT; RL on the game's reward has room to play past it.

    `confidence` makes it sample as a teacher model does: with nothing to win or block, its
    preferred move has logit `confidence` and every other legal move logit 0, sampled at the
    request's temperature (greedy, T = 0: always the preferred move, the play its row shows).
    None: the preferred move at every temperature.

    `overlooks` is a blind spot in blocking, where RL on the reward can see it: a threat only on
    those lines is blocked with probability sigmoid(logit(`notice`) / T) when sampled (`notice` at
    T = 1), never when greedy (if `notice` < 0.5); otherwise it plays its fallback. Its student
    then blocks there now and then, which gives RL the comparison to learn from.

    `insight` (with `confidence`) is a teacher model's sense of what each move is worth: with
    nothing to win or block, move m has logit `confidence` x [m preferred] - `insight` x [m gives
    game value away under best play], sampled at the request's temperature, greedy its argmax
    (ties to the preferred move). With `confidence` > `insight` it still plays its preferred move
    greedily wherever that gives value away (its blind spot: the greedy row is the plain
    heuristic's), yet its samples put real mass on the sound moves there, as a
    real teacher's pass@k exceeds its pass@1: its student meets the sound lines in its data, and
    RL has sound alternatives in its groups to sharpen into the greedy move."""
    for name, value in (("confidence", confidence), ("notice", notice), ("insight", insight)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{name} must be a number, got {value!r}")
    if fallback not in _FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}; expected one of {sorted(_FALLBACKS)}")
    if confidence is not None and not confidence >= 0.0:
        raise ValueError(f"confidence must be a logit >= 0 or None, got {confidence!r}")
    if overlooks is not None and overlooks not in _LINES:
        raise ValueError(f"unknown overlooks {overlooks!r}; expected one of {sorted(_LINES)} or None")
    if not 0.0 < notice < 1.0:
        raise ValueError(f"notice must be a probability in (0, 1), got {notice!r}")
    if insight is not None and (confidence is None or not 0.0 <= insight < math.inf or not math.isfinite(confidence)):
        raise ValueError(f"insight must be a finite logit scale >= 0, beside a finite confidence; got insight "
                         f"{insight!r}, confidence {confidence!r}")
    order, rng = _FALLBACKS[fallback], random.Random(seed)
    visible = [line for name, lines in _LINES.items() if name != overlooks for line in lines]
    notice_logit = math.log(notice / (1.0 - notice))

    def teacher(messages: list[Message], temperature: float = 0.0) -> str:
        board, mark = parse_observation(_last_user_text(messages))
        moves = legal_moves(board)
        if not moves:
            raise ValueError(f"the game on board {board!r} is over; there is no move to make")
        wins = winning_moves(board, mark)
        if wins:
            return f"<move>{wins[0]}</move>"
        other = "O" if mark == "X" else "X"
        blocks = winning_moves(board, other)
        seen = [c for c in blocks if any(c in line and all(board[i - 1] == other for i in line if i != c)
                                         for line in visible)]
        if seen:
            return f"<move>{seen[0]}</move>"
        preferred = rng.choice(moves) if order is None else min(moves, key=order.index)
        if blocks:  # only on overlooked lines
            noticed = (temperature > 0.0 and rng.random() < 1.0 / (1.0 + math.exp(
                -max(min(notice_logit / temperature, 50.0), -50.0)))) or (temperature <= 0.0 and notice > 0.5)
            return f"<move>{blocks[0] if noticed else preferred}</move>"
        if insight is not None and confidence is not None:  # checked together above
            return f"<move>{_weigh(board, mark, moves, order, preferred, confidence, insight, temperature, rng)}</move>"
        others = [m for m in moves if m != preferred]
        if confidence is None or temperature <= 0.0 or not others:
            return f"<move>{preferred}</move>"
        weight = math.exp(min(confidence / temperature, 50.0))  # exp(50): the others' share is 0
        return f"<move>{preferred if rng.random() * (weight + len(others)) < weight else rng.choice(others)}</move>"

    return teacher


def _weigh(board: str, mark: str, moves: list[int], order: tuple[int, ...] | None, preferred: int,
           confidence: float, insight: float, temperature: float, rng: random.Random) -> int:
    """`heuristic_teacher`'s move with `insight`: greedy the argmax (ties in the fallback's order,
    the preferred move first), else a softmax sample at T."""
    logits = [confidence * (m == preferred) - insight * (move_regret(board, m, mark) > 0) for m in moves]
    if temperature <= 0.0:
        rank = {m: (m == preferred, -(order.index(m) if order else 0)) for m in moves}
        return max(zip(logits, moves), key=lambda lm: (lm[0], *rank[lm[1]]))[1]
    top = max(logits)
    weights = [math.exp(max((z - top) / temperature, -50.0)) for z in logits]
    return rng.choices(moves, weights=weights)[0]


def random_player(seed: int | None = None) -> Callable[[list[Message]], str]:
    """A uniformly random legal move (registered policy `tic_tac_toe_random`): a baseline."""
    return scripted_tic_tac_toe_policy("random", seed=seed)
