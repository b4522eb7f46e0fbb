"""Rollout requests: pure JSON-able data naming what to run, never objects.

A request names an env (`EnvConfig`, the one description of "which env, with
which kwargs": the same model every flow's config holds) and a protocol kind
with keyword arguments, so requests can be written to a file, sent through a
queue or typed into a Prefect form. The engine finds an env's name among the
factories it was given in code, else through `ludic_core.registry`.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from pydantic import Field, field_validator

from ludic_core.bounds import MAX_GROUP, bounded
from ludic_core.frozen import FrozenModel
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.registry import check_ref

__all__ = ["EnvConfig", "EnvSpec", "ProtocolSpec", "RolloutRequest"]


class EnvConfig(FrozenModel):
    """An env: a registered name (bundled, or an entry point in group `ludic.envs`)
    or an import path `package.module:ClassOrFactory`, plus JSON kwargs (which belong to
    its name: a mapping naming another env replaces a default one whole)."""

    merge_identity: ClassVar[tuple[str, ...]] = ("name",)

    name: str = Field(description="a registered env name (bundled, or a `ludic.envs` entry point), or "
                                  "'my_pkg.envs:MyEnv' (a LudicEnv subclass, or a factory annotated to return one)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the env factory")

    @field_validator("name")
    @classmethod
    def _ref(cls, v: str) -> str:
        return check_ref("env", v)


def EnvSpec(kind: str, kwargs: dict[str, Any] | None = None) -> EnvConfig:  # noqa: N802 - the old class's name
    """Deprecated: `EnvConfig`'s old name in requests, its `kind` now `name`. `EnvSpec(kind=k,
    kwargs=kw)` warns and returns `EnvConfig(name=k, kwargs=kw)`; it goes in the next release."""
    warnings.warn("ludic_core.rollout.EnvSpec(kind=...) is renamed EnvConfig(name=...) (the env description "
                  "every config holds): use that instead (EnvSpec goes in the next release)",
                  DeprecationWarning, stacklevel=2)
    return EnvConfig(name=kind, kwargs={} if kwargs is None else kwargs)


class ProtocolSpec(FrozenModel):
    kind: str = Field(min_length=1, description="key in the engine's protocol registry")
    kwargs: dict[str, Any] = Field(default_factory=dict)


class RolloutRequest(FrozenModel):
    env: EnvConfig
    protocol: ProtocolSpec
    num_episodes: int = bounded(1, ge=1, le=MAX_GROUP, description="episodes played from this request")
    env_seed: int | None = None
    sampling_seed: int | None = None
    inference: InferenceSpec | None = None
    group_id: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
