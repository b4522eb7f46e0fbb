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
    path = save_dataset(rollouts_to_dataset(kept, tokenizer=fingerprint), out / "dataset")
    return {"dataset_path": str(path), "rollouts_path": str(jsonl), "token_ids": fingerprint is not None, **stats}
