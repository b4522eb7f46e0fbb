"""Model preparation tasks."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from ludic_core.models import build_tiny_model
from tasks.retries import retry_unless_stopping


@task(name="build-tiny-model", cache_policy=NO_CACHE, retries=1,
      retry_condition_fn=retry_unless_stopping)
def build_model(out_dir: str, preset: str = "tiny-1m", seed: int = 0) -> str:
    """Idempotent: an existing build with the same preset and seed is reused."""
    return str(build_tiny_model(out_dir, preset, seed=seed))
