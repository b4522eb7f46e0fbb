"""TextArena games (`pip install 'ludic-prefect[textarena]'`) as ludic envs.

Importing this package does not import `textarena`; building a game does.
"""

from ludic_core.envs.textarena.env import TextArenaEnv, TextArenaOpponentEnv, player_id
from ludic_core.envs.textarena.game import GameOutcome, TextArenaGame, render_messages
from ludic_core.envs.textarena.metrics import episode_result, textarena_metrics
from ludic_core.envs.textarena.players import (
    listed_moves,
    parse_tic_tac_toe_board,
    textarena_random,
    textarena_tic_tac_toe_minimax,
)

__all__ = [
    "TextArenaEnv",
    "TextArenaOpponentEnv",
    "TextArenaGame",
    "GameOutcome",
    "player_id",
    "render_messages",
    "episode_result",
    "textarena_metrics",
    "listed_moves",
    "parse_tic_tac_toe_board",
    "textarena_random",
    "textarena_tic_tac_toe_minimax",
]
