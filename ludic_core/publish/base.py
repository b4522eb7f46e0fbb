"""`PolicyPublisher`: how new weights reach the inference engine.

Training and inference meet here and at the `ChatClient`. A publisher gets
the FULL (unsharded) state dict with HF parameter names and a monotonically
increasing version; every later completion reports that version. A LoRA run
may instead publish only its adapter (`AdapterPublisher`), which the engine
serves under a versioned name over its unchanged base: megabytes per push
instead of the whole model, and each completion still names its version.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Protocol, runtime_checkable

from ludic_core.inference.adapter_names import adapter_name

__all__ = ["AdapterPublisher", "InProcessPublisher", "PolicyPublisher", "adapter_name"]


@runtime_checkable
class PolicyPublisher(Protocol):
    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None: ...


@runtime_checkable
class AdapterPublisher(Protocol):
    """A publisher that can take a LoRA adapter instead of merged weights.

    `accepts_adapters` False (e.g. a merged-weights mode) makes the trainer
    send merged full weights through `publish` instead.
    """

    accepts_adapters: bool

    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None: ...


class InProcessPublisher:
    """Copies weights into a client living in this process (e.g. LocalChatClient).

    mode: "auto" publishes a LoRA run's adapter (`client.load_adapter`, served as
    `adapter_name(version)`) and a full fine-tune's weights; "merged" always
    publishes full weights (LoRA merged in), as before adapters were served;
    "adapter" insists on adapters (a full fine-tune's publish is refused).
    """

    def __init__(self, client: Any, *, mode: Literal["auto", "adapter", "merged"] = "auto") -> None:
        if not hasattr(client, "sync_weights"):
            raise TypeError(f"{type(client).__name__} has no sync_weights(params, version=...)")
        if mode not in ("auto", "adapter", "merged"):
            raise ValueError(f"mode must be 'auto', 'adapter' or 'merged', got {mode!r}")
        if mode == "adapter" and not hasattr(client, "load_adapter"):
            raise TypeError(f"mode='adapter': {type(client).__name__} cannot serve adapters (no load_adapter)")
        self.client, self.mode = client, mode
        self.published_version: int | None = None
        self.published_model: str | None = None  # the adapter name requests get, in adapter mode

    @property
    def accepts_adapters(self) -> bool:
        return self.mode != "merged" and hasattr(self.client, "load_adapter")

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None:
        if self.mode == "adapter":
            raise ValueError("InProcessPublisher(mode='adapter') was given full weights: adapters come from a "
                             "LoRA run (TrainerConfig.lora); use mode='auto' or 'merged' for a full fine-tune")
        self.client.sync_weights(state_dict, version=version)
        self.published_version, self.published_model = version, None

    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None:
        name = adapter_name(version)
        self.client.load_adapter(name, tensors, config, version=version)
        self.published_version, self.published_model = version, name
