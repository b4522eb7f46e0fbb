"""Rejection sampling for any env and any teacher: sample, keep, store.

The teacher plays through the same env and agent stack the student will,
`samples` times per prompt (env seed); the keep rule picks the episodes worth
imitating; the dataset (`ludic_core.rejection`) stores their chats, and the
exact ids when `fingerprint` says they are the student's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

from ludic_core.compose.build import build_engine, episode_requests
from ludic_core.compose.configs import AgentConfig, EnvConfig
from ludic_core.rejection import KeepRule, keep_episodes, rollouts_to_dataset, save_dataset
from ludic_core.rollout import GRPORequestStrategy

__all__ = ["rejection_sample"]


def rejection_sample(client: Any, env: EnvConfig, agent: AgentConfig, *, seeds: Sequence[int], samples: int,
                     keep: KeepRule, out_dir: str | Path, fingerprint: str | None) -> dict[str, Any]:
    """Rewrites `out_dir` from scratch (rollouts.jsonl, dataset/), so a retry is safe."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "rollouts.jsonl"
    jsonl.unlink(missing_ok=True)
    engine = build_engine(env, agent, client, jsonl_path=str(jsonl))
    strategy = GRPORequestStrategy(samples, seed=0) if samples > 1 else None
    rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, list(seeds)),
                                                    max_steps=agent.max_turns, strategy=strategy))
    kept, stats = keep_episodes(rollouts, keep)
    if not kept:
        raise ValueError(_why_nothing_kept(rollouts, keep, stats, agent))
    path = save_dataset(rollouts_to_dataset(kept, tokenizer=fingerprint), out / "dataset")
    return {"dataset_path": str(path), "rollouts_path": str(jsonl), "token_ids": fingerprint is not None, **stats}


def _why_nothing_kept(rollouts: Sequence[Any], keep: KeepRule, stats: dict[str, float], agent: AgentConfig) -> str:
    """What the sampled episodes looked like, and the likeliest cause: a teacher answering in a
    format the agent's parser does not read (refused, or passed on whole) scores nothing."""
    steps = [s for r in rollouts if not r.failed for s in r.steps]
    parse_errors = sum(bool(s.info.get("parse_error")) for s in steps) / max(len(steps), 1)
    return (f"rejection sampling kept nothing: {stats['sampled']:.0f} episodes sampled, {stats['failed']:.0f} "
            f"failed, mean return {stats['mean_return']:.3g}, keep rule {keep.model_dump()}; the agent's parser "
            f"({agent.parser.name}) refused {parse_errors:.0%} of the replies. A teacher that scores nothing "
            "usually answers in a format the agent's parser does not read (a recipe's agent, e.g. "
            "ludic_core.recipes.arithmetic.RECIPE.agent, pairs with its teacher); else loosen the keep rule or "
            "sample more episodes")
