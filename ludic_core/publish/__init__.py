"""Weight publishing from the trainer to inference: in-process, or into a
vLLM server through its native weight-transfer API (`VLLMPolicyPublisher`,
imported lazily: it needs torch and httpx)."""

from typing import Any

from ludic_core.publish.base import AdapterPublisher, InProcessPublisher, PolicyPublisher, adapter_name

__all__ = ["AdapterPublisher", "InProcessPublisher", "PolicyPublisher", "VLLMPolicyPublisher", "WeightPushError",
           "adapter_name"]


def __getattr__(name: str) -> Any:
    if name in ("VLLMPolicyPublisher", "WeightPushError"):
        from ludic_core.publish import vllm

        return getattr(vllm, name)
    raise AttributeError(name)
