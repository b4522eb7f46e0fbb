"""The one base for every config and spec model: frozen and `extra="forbid"`.

Configs arrive from YAML files, CLI flags, HTTP bodies and Prefect forms, so
  * `extra="forbid"`: a typo'd field fails validation, naming it, instead of
    being silently ignored (and its default silently used);
  * `frozen=True`: no config is mutated after parsing; what was validated is
    what runs (derive a changed copy with `model_copy(update=...)`).

Imports only pydantic, so configs load without torch or the pipeline layer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["FrozenModel"]


class FrozenModel(BaseModel):
    """Base of every config/spec model: frozen, strict (`extra="forbid"`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
