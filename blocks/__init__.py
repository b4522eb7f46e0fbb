"""Prefect Blocks: endpoints, credentials and storage settings, kept in the
Prefect server (secrets encrypted) and turned into plain dicts by
`.to_config()` for `ludic_core`, which never imports Prefect.

Register the types once with `prefect block register -m blocks`, or just
`.save()` one (saving registers its type)."""

from blocks.inference import InferenceEndpoint
from blocks.redis_queue import RedisQueue
from blocks.wandb import WandbSettings

__all__ = ["InferenceEndpoint", "RedisQueue", "WandbSettings"]
