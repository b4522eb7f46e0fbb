"""Weight publishing from the trainer to inference: the `PolicyPublisher` seam and
the in-process publisher. The vLLM publisher (`VLLMPolicyPublisher`) is
`ludic_core.vllm`'s, a package above this one."""

from __future__ import annotations

from ludic_core.lazy import renamed_exports
from ludic_core.publish.base import AdapterPublisher, InProcessPublisher, PolicyPublisher, adapter_name

__all__ = ["AdapterPublisher", "InProcessPublisher", "PolicyPublisher", "adapter_name"]

#: moved to `ludic_core.vllm` (issue 56); resolved dynamically, since that package sits above this one
__getattr__ = renamed_exports(__name__, {"VLLMPolicyPublisher": "ludic_core.vllm:VLLMPolicyPublisher",
                                         "WeightPushError": "ludic_core.vllm:WeightPushError"})
