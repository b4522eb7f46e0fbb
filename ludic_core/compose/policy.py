"""Who plays: a scripted policy, a model directory in-process, or a server.

Rejection sampling's teacher and evaluation's subject are any policy behind
the `ChatClient` seam. Each builder also says whose tokenizer the returned
token ids come from (a fingerprint), so a dataset stores exact ids only when
they are the student's.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Literal

from pydantic import Field

from ludic_core.config import LocalInferenceConfig
from ludic_core.frozen import FrozenModel
from ludic_core.inference import ScriptedChatClient
from ludic_core.models.fingerprint import tokenizer_fingerprint
from ludic_core.registry import call_with_kwargs, check_kwargs, check_ref, resolve

__all__ = ["ScriptedPolicy", "ModelPolicy", "check_policy", "seeded_policy", "scripted_client", "model_client",
           "http_client", "open_client"]


class ScriptedPolicy(FrozenModel):
    """A plain Python policy: a factory (registered in `ludic.policies`, or
    'pkg.mod:factory') called with `kwargs`, returning `policy(messages) -> reply text`."""

    kind: Literal["scripted"] = "scripted"
    policy: str = Field(description="e.g. tic_tac_toe_minimax, arithmetic_oracle, or 'my_pkg.teachers:make'")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, _: Any) -> None:
        check_ref("policy", self.policy)


class ModelPolicy(FrozenModel):
    """A Hugging Face model directory, decoded in this process."""

    kind: Literal["model"] = "model"
    model_path: str = Field(description="HF causal-LM directory (with a chat template)")
    local: LocalInferenceConfig = LocalInferenceConfig()


def check_policy(spec: Any) -> None:
    """A scripted policy's factory resolves, is a policy factory and takes its
    kwargs; nothing is called (a teacher may load data when built)."""
    if getattr(spec, "kind", None) == "scripted":
        check_kwargs(resolve("policy", spec.policy), spec.kwargs, f"policy {spec.policy!r}")


def seeded_policy(name: str, kwargs: dict[str, Any]) -> Callable[[int | None], Callable[[list[Any]], str]]:
    """seed -> a fresh scripted policy (registered name or import path), checked now:
    a bad name or keyword fails when the env that plays it is built, not mid-episode.
    The `PolicyResolver` (`ludic_core.envs.base`) compose gives envs with scripted seats."""
    factory = resolve("policy", name)
    seeded = "seed" in inspect.signature(factory).parameters and "seed" not in kwargs
    check_kwargs(factory, {**kwargs, "seed": 0} if seeded else kwargs, f"opponent policy {name!r}")
    return lambda seed: call_with_kwargs(factory, {**kwargs, "seed": seed} if seeded else kwargs,
                                         f"opponent policy {name!r}")


def scripted_client(spec: ScriptedPolicy, tokenizer: Any | None) -> tuple[Any, str | None]:
    """Replies rendered with `tokenizer` (the student's), so their ids are the student's."""
    policy = call_with_kwargs(resolve("policy", spec.policy), spec.kwargs, f"policy {spec.policy!r}")
    if not callable(policy):
        raise TypeError(f"policy factory {spec.policy!r} returned a {type(policy).__name__}, "
                        "not a function of the chat messages")
    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    return ScriptedChatClient(policy, tokenizer), fingerprint


def model_client(spec: ModelPolicy) -> tuple[Any, str]:
    from ludic_core.inference import LocalChatClient  # torch and transformers: loaded when a model plays

    client = LocalChatClient(spec.model_path, **spec.local.model_dump())
    return client, tokenizer_fingerprint(client.tokenizer)


def http_client(base_url: str, *, model: str, api_key: str | None,
                tokenizer_path: str | None = None) -> tuple[Any, str | None]:
    """An OpenAI-compatible server (vLLM); its ids are known to be the student's
    only when the served model's tokenizer directory is at hand."""
    from ludic_core.vllm.client import VLLMChatClient

    fingerprint = None
    if tokenizer_path:
        from transformers import AutoTokenizer

        fingerprint = tokenizer_fingerprint(AutoTokenizer.from_pretrained(tokenizer_path))
    return VLLMChatClient(base_url, model=model, api_key=api_key), fingerprint


def open_client(policy: Any, tokenizer: Any | None, endpoint: dict[str, Any] | None = None) -> tuple[Any, str | None]:
    """(client, fingerprint of its ids' tokenizer) for any policy config.

    `endpoint` (base_url, model, api_key, tokenizer_path) is where a served
    policy (`kind: vllm`) answers; the orchestrator that started or found the
    server passes it."""
    if policy.kind == "scripted":
        return scripted_client(policy, tokenizer)
    if policy.kind == "model":
        return model_client(policy)
    if endpoint is None:
        raise ValueError(f"a {policy.kind!r} policy needs a running server's endpoint")
    return http_client(endpoint["base_url"], model=endpoint["model"], api_key=endpoint.get("api_key"),
                       tokenizer_path=endpoint.get("tokenizer_path"))
