"""Weights & Biases settings for the training loggers."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr

from blocks._base import LudicBlock, reveal

__all__ = ["WandbSettings"]


class WandbSettings(LudicBlock):
    """wandb logging. `offline` (the default) writes runs locally and needs no
    key or network; `disabled` turns wandb off."""

    _block_type_name: ClassVar[str] = "Ludic Wandb Settings"
    _block_type_slug: ClassVar[str] = "ludic-wandb-settings"

    api_key: SecretStr | None = Field(None, description="needed for mode=online only")
    project: str = Field("ludic", min_length=1)
    mode: Literal["online", "offline", "disabled"] = "offline"
    entity: str | None = Field(None, description="team or user; None = the key's default")

    def to_config(self) -> dict[str, Any]:
        """Keyword arguments in the shape of `ludic_core.logging.WandbLogger`
        (plus `entity`). `api_key` is REVEALED here: use it in memory only."""
        return {"project": self.project, "mode": self.mode, "entity": self.entity,
                "api_key": reveal(self.api_key)}
