"""Rollout requests: pure JSON-able data naming what to run, never objects.

A request names an env kind and a protocol kind (looked up in the engine's
registries) with keyword arguments, so requests can be written to a file, sent
through a queue or typed into a Prefect form.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ludic_core.inference.sampling import InferenceSpec

__all__ = ["EnvSpec", "ProtocolSpec", "RolloutRequest"]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EnvSpec(_Data):
    kind: str = Field(min_length=1, description="key in the engine's env registry")
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ProtocolSpec(_Data):
    kind: str = Field(min_length=1, description="key in the engine's protocol registry")
    kwargs: dict[str, Any] = Field(default_factory=dict)


class RolloutRequest(_Data):
    env: EnvSpec
    protocol: ProtocolSpec
    num_episodes: int = Field(1, ge=1)
    env_seed: int | None = None
    sampling_seed: int | None = None
    inference: InferenceSpec | None = None
    group_id: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
