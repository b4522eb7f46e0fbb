"""Weight publishing from the trainer to inference: in-process, or into a
vLLM server through its native weight-transfer API (`VLLMPolicyPublisher`,
imported lazily: it needs torch and httpx)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports
from ludic_core.publish.base import AdapterPublisher, InProcessPublisher, PolicyPublisher, adapter_name

__all__ = ["AdapterPublisher", "InProcessPublisher", "PolicyPublisher", "VLLMPolicyPublisher", "WeightPushError",
           "adapter_name"]

if TYPE_CHECKING:
    from ludic_core.publish.vllm import VLLMPolicyPublisher, WeightPushError

__getattr__, __dir__ = lazy_exports(__name__, {"VLLMPolicyPublisher": "vllm", "WeightPushError": "vllm"})
