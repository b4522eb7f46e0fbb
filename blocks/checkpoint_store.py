"""Where training stages write checkpoints, and how many they keep."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from blocks._base import LudicBlock

__all__ = ["CheckpointStore"]


class CheckpointStore(LudicBlock):
    """A local (or mounted) checkpoint directory. Checkpoints are written
    atomically as `step_XXXXXXXX/` under it; the newest `keep_last` are kept."""

    _block_type_name: ClassVar[str] = "Ludic Checkpoint Store"
    _block_type_slug: ClassVar[str] = "ludic-checkpoint-store"

    directory: str = Field("runs/checkpoints", min_length=1, description="relative paths are from the flow's cwd")
    keep_last: int = Field(3, ge=1, description="checkpoints kept; older ones are pruned")

    def to_config(self) -> dict[str, Any]:
        """`directory` and `keep_last`, as `ludic_core.training.checkpoint.save_checkpoint` takes them."""
        return {"directory": self.directory, "keep_last": self.keep_last}
