"""Rollout requests: pure JSON-able data naming what to run, never objects.

A request names an env kind and a protocol kind (looked up in the engine's
registries) with keyword arguments, so requests can be written to a file, sent
through a queue or typed into a Prefect form.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ludic_core.bounds import MAX_GROUP, bounded
from ludic_core.frozen import FrozenModel
from ludic_core.inference.sampling import InferenceSpec

__all__ = ["EnvSpec", "ProtocolSpec", "RolloutRequest"]


class EnvSpec(FrozenModel):
    kind: str = Field(min_length=1, description="key in the engine's env registry")
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ProtocolSpec(FrozenModel):
    kind: str = Field(min_length=1, description="key in the engine's protocol registry")
    kwargs: dict[str, Any] = Field(default_factory=dict)


class RolloutRequest(FrozenModel):
    env: EnvSpec
    protocol: ProtocolSpec
    num_episodes: int = bounded(1, ge=1, le=MAX_GROUP, description="episodes played from this request")
    env_seed: int | None = None
    sampling_seed: int | None = None
    inference: InferenceSpec | None = None
    group_id: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
