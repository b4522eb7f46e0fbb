"""vLLM as ludic's inference server, in one place: launching it (`server`, `setup`,
`preflight`), talking to it (`client`, `http`), pushing weights and LoRA adapters into it
(`publisher`, `transports`, `adapters`) and the code that runs inside it (`plugin`).

One package because these parts change together, with vLLM's API: `inference` and `publish`
keep the backend-neutral seams (`ChatClient`, `PolicyPublisher`) that this package implements,
and sit below it. Exports load on first use (`ludic_core.lazy`): the publisher needs torch,
while `server.VLLMServerConfig` is part of the torch-free configs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.vllm.adapters import AdapterLoadError, read_published
    from ludic_core.vllm.client import VLLMChatClient
    from ludic_core.vllm.http import ControlClient, RetryPolicy
    from ludic_core.vllm.preflight import VLLMEnvironmentError, preflight
    from ludic_core.vllm.publisher import VLLMPolicyPublisher, WeightPushError
    from ludic_core.vllm.server import VLLMServer, VLLMServerConfig, start_vllm_server, stop_server_pid
    from ludic_core.vllm.setup import setup_vllm_env

_SOURCE = {
    "AdapterLoadError": "adapters",
    "ControlClient": "http",
    "RetryPolicy": "http",
    "VLLMChatClient": "client",
    "VLLMEnvironmentError": "preflight",
    "VLLMPolicyPublisher": "publisher",
    "VLLMServer": "server",
    "VLLMServerConfig": "server",
    "WeightPushError": "publisher",
    "preflight": "preflight",
    "read_published": "adapters",
    "setup_vllm_env": "setup",
    "start_vllm_server": "server",
    "stop_server_pid": "server",
}

__all__ = [
    "AdapterLoadError",
    "ControlClient",
    "RetryPolicy",
    "VLLMChatClient",
    "VLLMEnvironmentError",
    "VLLMPolicyPublisher",
    "VLLMServer",
    "VLLMServerConfig",
    "WeightPushError",
    "preflight",
    "read_published",
    "setup_vllm_env",
    "start_vllm_server",
    "stop_server_pid",
]

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
