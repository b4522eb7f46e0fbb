"""The shared shape of Ludic's Prefect Blocks.

A Block is where a person keeps connection settings and secrets (in the Prefect
UI or with `Block.save`); `to_config()` turns it into a plain dict that
`ludic_core` code can take as keyword arguments. `ludic_core` never imports
Prefect, so the Block stays on this side of the boundary and only the dict
crosses it.

Secrets are `SecretStr` fields: hidden in `repr()`, `str()` and `model_dump()`
(they print as `**********`), stored encrypted by the Prefect server, and
revealed only by `to_config()`, in memory, when a client is being built. Never
log or persist what `to_config()` returns.
"""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import ConfigDict, SecretStr

__all__ = ["LudicBlock", "reveal"]


def reveal(secret: SecretStr | None) -> str | None:
    """The plain value of an optional secret (None stays None)."""
    return secret.get_secret_value() if secret is not None else None


class LudicBlock(Block):
    """Base of Ludic's blocks: unknown fields are rejected (a typo'd field fails,
    naming it, instead of being silently kept as Prefect's default `extra="allow"`
    would), and assignments are validated too."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", validate_assignment=True)
    _documentation_url: ClassVar[str | None] = None

    def to_config(self) -> dict[str, Any]:  # pragma: no cover - every block overrides it
        raise NotImplementedError
