"""The Redis Stream that carries SAW items from actors to the trainer (`pipeline_rl`)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, SecretStr, field_validator

from blocks._base import LudicBlock, reveal

__all__ = ["RedisQueue"]


class RedisQueue(LudicBlock):
    """The Redis Stream of SAW items (`pipeline_rl`'s `redis_block`). The
    password is kept apart from the URL so the URL can be shown and logged."""

    _block_type_name: ClassVar[str] = "Ludic Redis Queue"
    _block_type_slug: ClassVar[str] = "ludic-redis-queue"

    url: str = Field("redis://127.0.0.1:6379/0", description="redis://HOST:PORT/DB (no password here)")
    password: SecretStr | None = Field(None, description="Redis AUTH password")
    key: str = Field("ludic:saw", min_length=1, description="the stream actors append items to")
    max_len: int = Field(10_000, ge=1, description="actors wait while this many items are not yet read")

    @field_validator("url")
    @classmethod
    def _redis_url(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url must start with redis://, rediss:// or unix://, got {v!r}")
        return v

    def to_config(self) -> dict[str, Any]:
        """Plain settings for a Redis client and queue. `password` is REVEALED
        here (a str or None): use it in memory only."""
        return {"url": self.url, "password": reveal(self.password), "key": self.key, "max_len": self.max_len}
