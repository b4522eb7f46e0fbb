"""Inference clients: the `ChatClient` seam and its backends.

`LocalChatClient` (torch/transformers) and `VLLMChatClient` (httpx) are
imported lazily, through this package's attribute access (`ludic_core.lazy`),
so configs and specs load anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.inference.client import ChatClient, WeightPusher
from ludic_core.inference.errors import ContextLengthError, InferenceServerError, UnknownServedModelError
from ludic_core.inference.sampling import (
    ChatCompletionRequest,
    InferenceSpec,
    ReturnSpec,
    SamplingConfig,
)
from ludic_core.inference.scripted import ScriptedChatClient, ScriptedPolicy
from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.inference.local import LocalChatClient
    from ludic_core.inference.vllm_client import VLLMChatClient

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

__getattr__, __dir__ = lazy_exports(__name__, {"LocalChatClient": "local", "VLLMChatClient": "vllm_client"})
