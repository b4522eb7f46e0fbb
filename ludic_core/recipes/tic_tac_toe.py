"""Tic-tac-toe recipe: the pieces the demo chain is built from.

Rejection sampling from a scripted minimax teacher -> SFT -> GRPO against a
random opponent, with evaluation as X and as O. Each function is a plain
library call so Prefect tasks stay thin and benchmarks can run the same chain
without Prefect.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ludic_core.agents import Agent
from ludic_core.context import SlidingWindowContext
from ludic_core.envs import TicTacToeEnv, scripted_tic_tac_toe_policy
from ludic_core.eval.tic_tac_toe import tic_tac_toe_metrics
from ludic_core.inference import InferenceSpec, SamplingConfig, ScriptedChatClient
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.parsers import xml_tag_parser
from ludic_core.rollout import EnvSpec, ProtocolSpec, RolloutEngine, RolloutRequest
from ludic_core.types import Rollout

__all__ = [
    "MAX_TOKENS",
    "tic_tac_toe_engine",
    "tic_tac_toe_requests",
    "teacher_rollouts",
    "keep_by_reward",
    "evaluate_tic_tac_toe",
]

#: "<move>5</move>" is 14 bytes + eos; a little slack lets a confused model fail visibly.
MAX_TOKENS = 24


def tic_tac_toe_engine(client: Any, *, jsonl_path: str | None = None, max_concurrency: int = 256) -> RolloutEngine:
    """Engine with the tic-tac-toe env and a single-agent protocol over `client`.

    The board is the whole state, so the agent sees only the latest observation
    (SlidingWindowContext(1)): short prompts, fast rollouts and training. A
    malformed or cut-off reply costs the game (-1, like an illegal move) rather
    than buying a retry: with a one-observation context the retry would not even
    show the board again.
    """
    def protocol() -> SingleAgentSyncProtocol:
        agent = Agent(client, parser=xml_tag_parser("move"), context=SlidingWindowContext(1))
        return SingleAgentSyncProtocol(agent, max_parse_failures=1)

    return RolloutEngine({"tic_tac_toe": TicTacToeEnv}, {"single_agent": protocol},
                         jsonl_path=jsonl_path, max_concurrency=max_concurrency)


def tic_tac_toe_requests(n: int, *, marks: Sequence[str] = ("X", "O"), opponent: str = "random",
                         seed: int = 0, temperature: float = 1.0) -> list[RolloutRequest]:
    """`n` requests, cycling through `marks`, with env seeds seed, seed+1, ..."""
    spec = InferenceSpec(sampling=SamplingConfig(temperature=temperature, max_tokens=MAX_TOKENS))
    return [
        RolloutRequest(
            env=EnvSpec(kind="tic_tac_toe", kwargs={"opponent": opponent, "agent_mark": marks[i % len(marks)]}),
            protocol=ProtocolSpec(kind="single_agent"),
            env_seed=seed + i, sampling_seed=seed + i, inference=spec,
        )
        for i in range(n)
    ]


def teacher_rollouts(tokenizer: Any, *, games: int, seed: int = 0, opponent: str = "random",
                     tie_break: str = "preference", jsonl_path: str | None = None) -> list[Rollout]:
    """Games played by the minimax teacher through the LLM stack (real token traces).

    The default "preference" tie-break makes the teacher deterministic given the
    board, which is what lets a tiny model imitate it within the demo's budget.
    """
    policy = scripted_tic_tac_toe_policy("minimax", seed=seed, tie_break=tie_break)  # type: ignore[arg-type]
    teacher = ScriptedChatClient(policy, tokenizer)
    engine = tic_tac_toe_engine(teacher, jsonl_path=jsonl_path)
    return asyncio.run(engine.generate_rollouts(tic_tac_toe_requests(games, seed=seed, opponent=opponent),
                                                max_steps=9))


def keep_by_reward(rollouts: Sequence[Rollout], *, min_reward: float) -> tuple[list[Rollout], dict[str, float]]:
    """Rejection sampling's filter: keep finished episodes with return >= min_reward."""
    kept = [r for r in rollouts if not r.failed and r.total_reward >= min_reward]
    return kept, {"sampled": float(len(rollouts)), "kept": float(len(kept)),
                  "keep_rate": len(kept) / max(len(rollouts), 1)}


def evaluate_tic_tac_toe(client: Any, *, games_per_mark: int = 200, opponent: str = "random",
                         temperature: float = 0.0, seed: int = 100_000) -> dict[str, float]:
    """Legal-move and win/draw rates as X and as O (greedy by default)."""
    engine = tic_tac_toe_engine(client)
    out: dict[str, float] = {}
    for mark in ("X", "O"):
        reqs = tic_tac_toe_requests(games_per_mark, marks=(mark,), opponent=opponent,
                                    seed=seed, temperature=temperature)
        rollouts = asyncio.run(engine.generate_rollouts(reqs, max_steps=9))
        for k, v in tic_tac_toe_metrics(rollouts).items():
            out[f"{mark}/{k}"] = v
    return out
