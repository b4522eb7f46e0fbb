"""Inference clients: the `ChatClient` seam and its backends.

`LocalChatClient` (torch/transformers) is imported lazily, through this
package's attribute access (`ludic_core.lazy`), so configs and specs load
anywhere. The vLLM backend is `ludic_core.vllm`, a package above this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ludic_core.inference.client import ChatClient, WeightPusher
from ludic_core.inference.errors import ContextLengthError, InferenceServerError, UnknownServedModelError
from ludic_core.inference.sampling import (
    ChatCompletionRequest,
    InferenceSpec,
    ReturnSpec,
    SamplingConfig,
)
from ludic_core.inference.scripted import ScriptedChatClient, ScriptedPolicy
from ludic_core.lazy import lazy_exports, renamed_exports

if TYPE_CHECKING:
    from ludic_core.inference.local import LocalChatClient

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
]

_lazy, __dir__ = lazy_exports(__name__, {"LocalChatClient": "local"})
#: moved to `ludic_core.vllm` (issue 56); resolved dynamically, since that package sits above this one
_moved = renamed_exports(__name__, {"VLLMChatClient": "ludic_core.vllm:VLLMChatClient"})


def __getattr__(name: str) -> Any:
    return _moved(name) if name == "VLLMChatClient" else _lazy(name)
