"""Loggers a flow takes by block name (the wandb key stays in the block)."""

from __future__ import annotations

import os

from ludic_core.stages.spec import WandbSpec

__all__ = ["wandb_spec"]


def wandb_spec(block_name: str | None, *, run_name: str, directory: str | None = None) -> WandbSpec | None:
    """The stage's wandb settings from a `WandbSettings` block; its key and entity go
    to this process's environment (inherited by torchrun ranks), never into a spec file."""
    if not block_name:
        return None
    from blocks import WandbSettings

    conf = WandbSettings.load(block_name).to_config()
    if conf["api_key"]:
        os.environ["WANDB_API_KEY"] = conf["api_key"]
    if conf["entity"]:
        os.environ["WANDB_ENTITY"] = conf["entity"]
    return WandbSpec(project=conf["project"], mode=conf["mode"], run_name=run_name, directory=directory)
