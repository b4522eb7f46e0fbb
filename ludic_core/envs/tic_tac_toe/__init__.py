"""Tic-tac-toe: the demo's game, as a single-agent env and a two-agent duel env.

One package like the other bundled envs: the rules (exact minimax), the envs, the
metrics the demo reports, and the scripted players (teachers, baselines).
"""

from ludic_core.envs.tic_tac_toe.env import (
    ILLEGAL_MOVE_REWARD,
    RESULT_REWARDS,
    TicTacToeEnv,
    parse_observation,
    render_numbered,
)
from ludic_core.envs.tic_tac_toe.duel import TicTacToeDuelEnv
from ludic_core.envs.tic_tac_toe.metrics import tic_tac_toe_metrics
from ludic_core.envs.tic_tac_toe.players import (
    heuristic_teacher,
    minimax_teacher,
    random_player,
    scripted_tic_tac_toe_policy,
)
from ludic_core.envs.tic_tac_toe.rules import (
    EMPTY_BOARD,
    Mark,
    legal_moves,
    minimax_moves,
    move_delay,
    move_regret,
    move_value,
    render_board,
    winner,
    winning_moves,
)

__all__ = [
    "TicTacToeEnv",
    "TicTacToeDuelEnv",
    "RESULT_REWARDS",
    "ILLEGAL_MOVE_REWARD",
    "parse_observation",
    "render_numbered",
    "tic_tac_toe_metrics",
    "scripted_tic_tac_toe_policy",
    "heuristic_teacher",
    "minimax_teacher",
    "random_player",
    "Mark",
    "EMPTY_BOARD",
    "winner",
    "legal_moves",
    "winning_moves",
    "minimax_moves",
    "move_delay",
    "move_regret",
    "move_value",
    "render_board",
]
