"""Sampling and request specs: torch-free, validated, JSON-able.

These are pydantic models (frozen, `extra="forbid"`) because they arrive from
configs, CLI flags and HTTP: a typo'd field or a negative temperature must fail
loudly, naming the field, before any generation starts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from ludic_core.bounds import MAX_SEED, MAX_SEQ_LEN, bounded
from ludic_core.frozen import FrozenModel
from ludic_core.types import Message

__all__ = ["SamplingConfig", "ReturnSpec", "InferenceSpec", "ChatCompletionRequest"]


class SamplingConfig(FrozenModel):
    """How to sample one completion.

    temperature == 0 means greedy decoding; its reported log-probs are then those
    of the unscaled (temperature 1) distribution, as vLLM does, since the point
    mass actually sampled from carries no information for a ratio.
    """

    temperature: float = Field(1.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus mass kept")
    max_tokens: int = bounded(64, ge=1, le=MAX_SEQ_LEN, description="completion token limit")
    stop: tuple[str, ...] = Field((), description="stop strings (excluded from text)")
    seed: int | None = bounded(None, ge=0, le=MAX_SEED, description="per-request sampling seed")

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_tuple(cls, v: Any) -> Any:
        if isinstance(v, str):
            return (v,)
        return tuple(v) if v is not None else ()

    @field_validator("stop")
    @classmethod
    def _stop_nonempty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(s == "" for s in v):
            raise ValueError("stop strings must be non-empty")
        return v


class ReturnSpec(FrozenModel):
    """What the backend must return besides text."""

    return_token_ids: bool = True
    return_logprobs: bool = True


class InferenceSpec(FrozenModel):
    """Sampling + return settings an agent uses for every call of an episode."""

    sampling: SamplingConfig = SamplingConfig()
    returns: ReturnSpec = ReturnSpec()


class ChatCompletionRequest(FrozenModel):
    """One chat completion call, backend-agnostic."""

    messages: tuple[dict[str, Any], ...]
    model: str | None = None
    sampling: SamplingConfig = SamplingConfig()
    returns: ReturnSpec = ReturnSpec()
    tools: tuple[dict[str, Any], ...] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, v: Any) -> Any:
        if not isinstance(v, (list, tuple)) or not v:
            raise ValueError("messages must be a non-empty list of chat messages")
        for i, m in enumerate(v):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"messages[{i}] must be a dict with a 'role'")
        return tuple(v)

    def message_list(self) -> list[Message]:
        return [dict(m) for m in self.messages]
