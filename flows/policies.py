"""Policy configs a flow takes (teacher, evaluated policy), and serving them.

A policy is a scripted function, a model directory decoded in-process, or a
vLLM server: one the flow starts from a model directory for the run (and
stops), or a running one named by an `InferenceEndpoint` block. A vLLM policy
may play a LoRA adapter over the served base: one the server serves by name,
or an adapter directory loaded for the run (`compose.serving.served_adapter`),
so several adapters compare on one running server.
"""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import Field, SecretStr, model_validator

from flows.common import FlowConfig
from ludic_core.compose.policy import ModelPolicy, ScriptedPolicy
from ludic_core.compose.serving import served_adapter, server_for_adapter
from ludic_core.config import VLLMServing

__all__ = ["VLLMPolicy", "PolicyConfig", "served", "endpoint_from_block"]


class VLLMPolicy(VLLMServing, FlowConfig):
    """A policy behind vLLM's OpenAI API: the server (`VLLMServing`: a running one named by
    `endpoint_block`, or one started from `model_path` with `server`) and the adapter it plays."""

    kind: Literal["vllm"] = "vllm"
    model_path: str | None = Field(None, description="HF model dir the flow serves for this run (its tokenizer "
                                                     "decides whether exact token ids are stored)")
    adapter: str | None = Field(None, description="play a LoRA adapter over the served model: a name the server "
                                                  "serves (e.g. policy-v12), or an adapter directory (a LoRA "
                                                  "checkpoint's model/) loaded for this run; None = the base")

    @model_validator(mode="after")
    def _one_source(self) -> VLLMPolicy:
        if (self.model_path is None) == (self.endpoint_block is None):
            raise ValueError("a vllm policy needs exactly one of model_path (start a server) or endpoint_block")
        return self


PolicyConfig = Annotated[Union[ScriptedPolicy, ModelPolicy, VLLMPolicy], Field(discriminator="kind")]


def endpoint_from_block(name: str) -> dict[str, Any]:
    from blocks import InferenceEndpoint

    conf = InferenceEndpoint.load(name).to_config()
    if conf["kind"] != "vllm" or not conf["base_url"]:
        raise ValueError(f"InferenceEndpoint block {name!r} must have kind 'vllm' and a base_url")
    return {"base_url": conf["base_url"], "model": conf["model_path"] or "policy", "api_key": conf["api_key"],
            "tokenizer_path": None}


@contextmanager
def served(policy: Any, *, load_adapter: bool = True) -> Iterator[tuple[dict[str, Any] | None, SecretStr | None]]:
    """(endpoint without its key, key) for a vllm policy while the block runs; (None, None) otherwise.

    load_adapter False: a server the flow starts is sized for `policy.adapter` (its LoRA
    rank), but requests go to the base and the caller loads adapters itself."""
    from tasks.inference import start_server, stop_server, watch_server

    if getattr(policy, "kind", None) != "vllm":
        yield None, None
        return
    if policy.endpoint_block:
        endpoint = endpoint_from_block(policy.endpoint_block)
        key = endpoint.pop("api_key")
        with served_adapter(endpoint["base_url"].removesuffix("/v1"), key,
                            policy.adapter if load_adapter else None) as adapter:
            yield {**endpoint, "model": adapter or endpoint["model"]}, SecretStr(key) if key else None
        return
    key = SecretStr(secrets.token_urlsafe(24))
    server = start_server(policy.model_path, server_for_adapter(policy.server, policy.adapter), key)
    try:
        with watch_server(server), served_adapter(server["root_url"], key.get_secret_value(),
                                                  policy.adapter if load_adapter else None) as adapter:
            yield {"base_url": server["base_url"], "model": adapter or server["model"],
                   "tokenizer_path": policy.model_path}, key
    finally:
        stop_server(server["pid"])
