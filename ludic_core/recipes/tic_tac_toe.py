"""Tic-tac-toe recipe: the demo's settings, and the library calls built on them.

The board is the whole state, so the agent sees only the latest observation
(`sliding_window`, keep_last 1): short prompts, fast rollouts and training. A
malformed or cut-off reply costs the game (`max_parse_failures: 1`, like an
illegal move) rather than buying a retry: with a one-observation context the
retry would not even show the board again. The teacher is good but imperfect,
and samples as a teacher model does (`tic_tac_toe_heuristic` with `confidence`
2.5 and `insight` 2: it wins when it can, blocks when it must, and otherwise
prefers edges, then corners, the centre last; greedy it plays X 0.95, O 0.885
win+draw, the table's teacher row, while its samples put a third to a half
of their mass on the sound moves where its preference gives value away, as a
teacher model's samples hold answers its greedy decoding misses). Its student
copies that distribution, so RL finds alternatives in its groups where the
teacher is wrong (a deterministic teacher's student put 1.000 on the
teacher's move there, and no RL setting moved it). The perfect minimax
teacher stays available as `tic_tac_toe_minimax`.

Four choices, each measured on the demo (the numbers, and the runs behind
them: docs/experiments/2026-11-25-demo-recipes.md; the current table:
docs/results.md):
- No system message (`system_prompt: ""`). The model is trained from scratch,
  so a fixed instruction tells it nothing, yet it was half of every sequence's
  tokens. A pretrained model would want the env's prompt: leave
  `system_prompt` None for one.
- Keep wins and draws (`min_return: 0.5`). Wins only throws away most of O's
  games (its wins are rarer) and every board where the game heads to a draw.
- 800 SFT steps, not 400 (the cosine schedule stretched to match): 400 steps
  left the model undertrained and at the mercy of the data order.
- 16384 teacher games, not 4096, and SFT batches of 128 (35 s more rejection
  sampling, twice the SFT compute): the student sees four times the games,
  and ends RL higher in every seed; at batches of 64 it is undertrained on
  that much data (docs/experiments/2026-11-30-more-teacher-games.md).

RL trains on each move's own worth: the env's minimax-regret shaping (-0.4 x
regret, 0 for a move that keeps the game's value) with the game's result
weighted 0 (`outcome_weight`), per-turn credit with gamma 0, so each move is
compared with its siblings' moves at the same turn, and the one sibling whose
game ended there does not pull the others' quiet moves down. A malformed reply
(-1) and an illegal move (-1.8) cost more than the worst legal move (-0.8),
so no reply dodges the cost of a move that gives value away. A won game's win
that comes later costs too (`win_speed` 0.5: -0.2 a move of delay): regret
alone counts value, and RL drifted off immediate wins onto forks. 150 steps of
64 prompts x 2 at lr 1.5e-4: at 4e-4 RL broke the O play of good starts (a
minimax student's O fell from 0.95 to 0.86), at 1.5e-4 it improved both seats
from every start tried. Pairs, not groups of 8, for the same 128 games a step:
from the same three SFT students RL ended 0.013-0.025 higher than at 16 x 8
(the student's mistakes sit on rare boards, and games from 64 env seeds a step
reach more of them than from 16: our reading, not measured;
docs/experiments/2026-12-07-pairs-not-groups.md). The
runs that chose the rest, and the ones that did not work (whole-game outcomes,
one-move episodes from random boards): docs/experiments/2026-11-30-rl-per-move.md
and docs/experiments/2026-11-30-a-gentler-rl-step.md.
RL's env only: the teacher's data and the evaluations play whole games and
score outcomes.

The helpers below are thin wrappers over the generic seam
(`ludic_core.compose.build`), kept for benchmarks and tests that run the
chain without Prefect.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ludic_core.compose.build import PROTOCOL, build_engine
from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.config import GRPOConfig
from ludic_core.envs.tic_tac_toe.players import minimax_teacher
from ludic_core.eval import evaluate_policy
from ludic_core.inference import ScriptedChatClient
from ludic_core.inference.sampling import InferenceSpec, SamplingConfig
from ludic_core.recipes.recipe import Recipe
from ludic_core.rejection import KeepRule, keep_episodes
from ludic_core.rollout import ProtocolSpec, RolloutEngine, RolloutRequest
from ludic_core.types import Rollout

__all__ = [
    "MAX_TOKENS",
    "RECIPE",
    "tic_tac_toe_engine",
    "tic_tac_toe_requests",
    "teacher_rollouts",
    "keep_by_reward",
    "evaluate_tic_tac_toe",
]

#: "<move>5</move>" is 14 bytes + eos; a little slack lets a confused model fail visibly.
MAX_TOKENS = 24
ENV = EnvConfig(name="tic_tac_toe", kwargs={"opponent": "random", "agent_mark": "alternate"})
# A malformed move costs what an illegal one does (-1; the parsers' default penalty is 0).
AGENT = AgentConfig(system_prompt="", parser=ComponentConfig(name="xml_tag", kwargs={"tag": "move",
                                                                                    "failure_penalty": -1.0}),
                    context=ComponentConfig(name="sliding_window", kwargs={"keep_last": 1}),
                    sampling=SamplingConfig(max_tokens=MAX_TOKENS), max_turns=9, max_parse_failures=1)

RECIPE = Recipe(
    name="tic_tac_toe",
    env=ENV,
    eval_env=ENV,
    agent=AGENT,
    teacher="tic_tac_toe_heuristic",
    teacher_kwargs={"fallback": "edges", "confidence": 2.5, "insight": 2.0},
    keep=KeepRule(min_return=0.5),
    teacher_episodes=16_384,
    sft_steps=800,
    sft_batch_size=128,
    rl_temperature=1.0,
    rl_lr=1.5e-4,
    rl_steps=150,
    rl_requests_per_step=64,
    rl_algorithm=GRPOConfig(group_size=2, credit="turn", gamma=0.0),
    rl_env_kwargs={"move_shaping": 0.4, "outcome_weight": 0.0, "win_speed": 0.5},
    eval_seed=100_000,
    table={"X legal": "X/legal_move_rate", "X win+draw": "X/win_draw_rate",
           "O legal": "O/legal_move_rate", "O win+draw": "O/win_draw_rate"},
)


def tic_tac_toe_engine(client: Any, *, jsonl_path: str | None = None, max_concurrency: int = 256) -> RolloutEngine:
    """The recipe's engine over `client` (env kind `tic_tac_toe`, protocol `agent`)."""
    return build_engine(ENV, AGENT, client, jsonl_path=jsonl_path, max_concurrency=max_concurrency)


def tic_tac_toe_requests(n: int, *, marks: Sequence[str] = ("X", "O"), opponent: str = "random",
                         seed: int = 0, temperature: float = 1.0) -> list[RolloutRequest]:
    """`n` requests, cycling through `marks`, with env seeds seed, seed+1, ..."""
    spec = InferenceSpec(sampling=SamplingConfig(temperature=temperature, max_tokens=MAX_TOKENS))
    return [
        RolloutRequest(
            env=EnvConfig(name=ENV.name, kwargs={"opponent": opponent, "agent_mark": marks[i % len(marks)]}),
            protocol=ProtocolSpec(kind=PROTOCOL), env_seed=seed + i, sampling_seed=seed + i, inference=spec,
        )
        for i in range(n)
    ]


def teacher_rollouts(tokenizer: Any, *, games: int, seed: int = 0, opponent: str = "random",
                     tie_break: str = "preference", jsonl_path: str | None = None) -> list[Rollout]:
    """Games played by the minimax teacher through the LLM stack (real token traces)."""
    teacher = ScriptedChatClient(minimax_teacher(seed=seed, tie_break=tie_break), tokenizer)  # type: ignore[arg-type]
    engine = tic_tac_toe_engine(teacher, jsonl_path=jsonl_path)
    return asyncio.run(engine.generate_rollouts(tic_tac_toe_requests(games, seed=seed, opponent=opponent),
                                                max_steps=AGENT.max_turns))


def keep_by_reward(rollouts: Sequence[Rollout], *, min_reward: float) -> tuple[list[Rollout], dict[str, float]]:
    """Rejection sampling's filter: keep finished episodes with return >= min_reward."""
    return keep_episodes(rollouts, KeepRule(min_return=min_reward))


def evaluate_tic_tac_toe(client: Any, *, games_per_mark: int = 200, opponent: str = "random",
                         temperature: float = 0.0, seed: int = 100_000) -> dict[str, float]:
    """Legal-move and win/draw rates as X and as O (greedy by default): the demo's
    evaluation (seats alternate by seed, so `2 * games_per_mark` games from `seed`)."""
    env = ENV.model_copy(update={"kwargs": {**ENV.kwargs, "opponent": opponent}})
    metrics = evaluate_policy(client, env, AGENT, seeds=range(seed, seed + 2 * games_per_mark),
                              temperature=temperature)
    return {k: v for k, v in metrics.items() if k.startswith(("X/", "O/"))}
