"""TextArena TicTacToe recipe: the settings `benchmarks/learning_textarena.py` trains with.

The same game as our own `tic_tac_toe` recipe, in TextArena's words: its prompt,
its board ("Current Board: ... Available Moves: '[0]', ..."), its cell numbers
0-8 and its action format "[4]". The agent plays one seat (alternating with the
seed) against `textarena_random`; the reward is the game's (+1 / 0 / -1), so
keeping wins and draws is `min_return: 0`.

Choices, for a model trained from scratch with a 1024-token context:
- The "-raw" id: each turn the agent sees the messages new since its last turn.
  TextArena's default wrapper repeats the whole history in every observation,
  which outgrows 1024 tokens within three moves.
- Only the latest observation (`sliding_window`, keep_last 1) and no system
  message, as in `tic_tac_toe`: the board is the state. The first observation
  still carries TextArena's prompt (~430 bytes), so items run to ~800 tokens:
  the recipe trains at `max_seq_len` 1024, the tiny models' whole context
  (the other recipes' 512 would refuse them).
- The reply goes to the game unparsed (`identity`): the game's own parser
  judges it, and its invalid-move rule (one retry, then the game is lost)
  applies; a cut-off reply costs the game (`max_parse_failures: 1`).
"""

from __future__ import annotations

from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.recipes.recipe import Recipe
from ludic_core.rejection import KeepRule

__all__ = ["RECIPE", "MAX_SEQ_LEN"]

#: tokens of one training item: the first observation and the reply fit (the demo's 512 does not)
MAX_SEQ_LEN = 1024
ENV = EnvConfig(name="textarena_vs_opponent",
                kwargs={"game": "TicTacToe-v0-raw", "opponent": "textarena_random", "seat": "alternate"})
# "[4]" is 3 bytes + eos; a little slack lets a confused model fail visibly.
AGENT = AgentConfig(system_prompt="", context=ComponentConfig(name="sliding_window", kwargs={"keep_last": 1}),
                    sampling=SamplingConfig(max_tokens=8), max_turns=9, max_parse_failures=1)

RECIPE = Recipe(
    name="textarena_tic_tac_toe",
    env=ENV,
    eval_env=ENV,
    agent=AGENT,
    teacher="textarena_tic_tac_toe_minimax",
    teacher_kwargs={"tie_break": "preference"},
    keep=KeepRule(min_return=0.0),
    max_seq_len=MAX_SEQ_LEN,
    sft_steps=800,
    rl_temperature=0.7,
    rl_lr=3e-5,
    eval_seed=100_000,
    table={"P0 win+draw": "P0/win_draw_rate", "P1 win+draw": "P1/win_draw_rate",
           "invalid": "invalid_move_rate"},
)
