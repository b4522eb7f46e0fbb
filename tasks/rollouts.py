"""Rollout collection and rejection-sampling tasks (idempotent, so retried)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ludic_core.models import load_model_and_tokenizer
from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
from ludic_core.rejection import rollouts_to_dataset, save_dataset


@task(name="rejection-sample-teacher", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1)
def rejection_sample(model_path: str, out_dir: str, *, games: int, seed: int, min_reward: float,
                     opponent: str = "random", tie_break: str = "preference") -> dict:
    """Teacher games through the LLM stack -> keep by reward -> `datasets` dataset on disk.

    Rewrites its outputs from scratch, so a retry after a transient failure is safe.
    """
    _, tok = load_model_and_tokenizer(model_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "rollouts.jsonl"
    jsonl.unlink(missing_ok=True)
    rollouts = teacher_rollouts(tok, games=games, seed=seed, opponent=opponent, tie_break=tie_break,
                                jsonl_path=str(jsonl))
    kept, stats = keep_by_reward(rollouts, min_reward=min_reward)
    path = save_dataset(rollouts_to_dataset(kept), out / "dataset")
    get_run_logger().info("kept %d/%d episodes -> %s", len(kept), len(rollouts), path)
    return {"dataset_path": str(path), "rollouts_path": str(jsonl), **stats}
