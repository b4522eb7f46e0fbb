"""Inference clients: the `ChatClient` seam and its backends.

`LocalChatClient` (torch/transformers) and `VLLMChatClient` (httpx) are
imported lazily, through this package's attribute access, so configs and
specs load anywhere.
"""

from typing import Any

from ludic_core.inference.client import ChatClient, WeightPusher
from ludic_core.inference.errors import ContextLengthError, InferenceServerError, UnknownServedModelError
from ludic_core.inference.sampling import (
    ChatCompletionRequest,
    InferenceSpec,
    ReturnSpec,
    SamplingConfig,
)
from ludic_core.inference.scripted import ScriptedChatClient, ScriptedPolicy

__all__ = [
    "ChatClient",
    "ChatCompletionRequest",
    "ContextLengthError",
    "InferenceServerError",
    "InferenceSpec",
    "LocalChatClient",
    "ReturnSpec",
    "SamplingConfig",
    "ScriptedChatClient",
    "ScriptedPolicy",
    "UnknownServedModelError",
    "WeightPusher",
    "VLLMChatClient",
]


def __getattr__(name: str) -> Any:
    if name == "LocalChatClient":
        from ludic_core.inference.local import LocalChatClient

        return LocalChatClient
    if name == "VLLMChatClient":
        from ludic_core.inference.vllm_client import VLLMChatClient

        return VLLMChatClient
    raise AttributeError(name)
