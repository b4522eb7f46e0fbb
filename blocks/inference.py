"""Where rollouts get their completions: in-process, an embedded server, or vLLM."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from blocks._base import LudicBlock, reveal

__all__ = ["InferenceEndpoint"]


class InferenceEndpoint(LudicBlock):
    """An inference backend for rollouts. `local` runs the model in the flow's
    process (no server); `embedded_server` and `vllm` talk HTTP (OpenAI API with
    token ids and log-probs) to `base_url`."""

    _block_type_name: ClassVar[str] = "Ludic Inference Endpoint"
    _block_type_slug: ClassVar[str] = "ludic-inference-endpoint"

    kind: Literal["local", "embedded_server", "vllm"] = Field(
        "local", description="local = in-process transformers; the others are HTTP servers")
    model_path: str = Field("", description="HF model dir (local) or the served model name")
    base_url: str | None = Field(None, description="server URL, e.g. http://127.0.0.1:8000/v1")
    api_key: SecretStr | None = Field(None, description="bearer token for the server, if it wants one")
    timeout_s: float = Field(60.0, gt=0, description="per-request timeout in seconds")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v

    def to_config(self) -> dict[str, Any]:
        """Plain settings for building a ChatClient. `api_key` is REVEALED here
        (a str or None): use the dict in memory to build the client, never log
        or save it."""
        return {"kind": self.kind, "model_path": self.model_path, "base_url": self.base_url,
                "api_key": reveal(self.api_key), "timeout_s": self.timeout_s}
