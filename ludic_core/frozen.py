"""The one base for every config and spec model: frozen and `extra="forbid"`.

Configs arrive from YAML files, CLI flags, HTTP bodies and Prefect forms, so
  * `extra="forbid"`: a typo'd field fails validation, naming it, instead of
    being silently ignored (and its default silently used);
  * `frozen=True`: no config is mutated after parsing; what was validated is
    what runs (derive a changed copy with `model_copy(update=...)`);
  * `allow_inf_nan=False`: no float field takes NaN or infinity (`lr: .inf`
    passes `gt=0`, an unconstrained float takes `.nan`; either poisons a run).

Upper bounds of sizes live in `ludic_core.bounds`.

Imports only pydantic, so configs load without torch or the pipeline layer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["FrozenModel"]


class FrozenModel(BaseModel):
    """Base of every config/spec model: frozen, strict (`extra="forbid"`), finite floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
