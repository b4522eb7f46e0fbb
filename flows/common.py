"""Shared pieces of flow configs and flow plumbing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["FlowConfig"]


class FlowConfig(BaseModel):
    """Base of every flow config: frozen (no mutation after parsing) and strict
    (`extra="forbid"`: a typo'd field fails at trigger time, naming it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
