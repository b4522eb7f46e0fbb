"""Which vLLM server a training run starts: LoRA serving when it publishes adapters.

A LoRA run that publishes its adapter needs a server started with LoRA
serving at (at least) the adapter's rank; anything else publishes full
weights into a plain server. Decided here, from the run's configs, so the
flows and the stages agree on it.
"""

from __future__ import annotations

from ludic_core.config import AdapterPublishing, LoRAConfig
from ludic_core.inference.vllm_server import VLLMServerConfig

__all__ = ["server_for_run"]


def server_for_run(server: VLLMServerConfig, lora: LoRAConfig | None,
                   publishing: AdapterPublishing) -> VLLMServerConfig:
    """`server` with `max_lora_rank` set to the run's rank when the run publishes
    adapters and `server` states none; a stated rank below the run's is refused."""
    if not publishing.publishes_adapters(lora):
        return server
    assert lora is not None
    if server.max_lora_rank is None:
        return VLLMServerConfig.model_validate({**server.model_dump(), "max_lora_rank": lora.r})
    if server.max_lora_rank < lora.r:
        raise ValueError(f"the server's max_lora_rank ({server.max_lora_rank}) is below the run's LoRA rank "
                         f"(trainer.lora.r = {lora.r}): raise it, leave it unset (the run's rank is used), or "
                         "publish merged weights (lora.mode: merged)")
    return server
