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

from ludic_core.lora.names import adapter_name

__all__ = ["AdapterPublisher", "InProcessPublisher", "PolicyPublisher", "adapter_name", "as_policy_publisher"]


@runtime_checkable
class PolicyPublisher(Protocol):
    """How the trainer hands weights to inference.

    Required: `publish(state_dict, version=)`. Hooks with defaults:
    `accepts_adapters` (False: a LoRA run publishes merged full weights),
    `publish_adapter` (refuses: only called when `accepts_adapters` is True) and
    `close()` (nothing to release). Subclass `PolicyPublisher` to inherit the
    defaults; a plain object with `publish` runs too: the Trainer adopts it with
    `as_policy_publisher`, which supplies the hooks it lacks.
    """

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None: ...

    @property
    def accepts_adapters(self) -> bool:
        """Whether a LoRA trainer sends its adapter (`publish_adapter`) instead of merged weights."""
        return False

    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None:
        """Serve a LoRA adapter as policy `version` (default: refused, see `accepts_adapters`)."""
        raise TypeError(f"{type(self).__name__} does not accept adapters (accepts_adapters is False): "
                        "publish merged weights with publish()")

    def close(self) -> None:
        """Release connections and groups (default: nothing held)."""
        return None


@runtime_checkable
class AdapterPublisher(Protocol):
    """A publisher that can take a LoRA adapter instead of merged weights.

    `accepts_adapters` False (e.g. a merged-weights mode) makes the trainer
    send merged full weights through `publish` instead.
    """

    accepts_adapters: bool

    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None: ...


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> None: ...


class _Adopted(PolicyPublisher):
    """A plain publisher with `publish`, given the hooks it lacks (its own `accepts_adapters`,
    `publish_adapter` and `close`, where it has them, are still used). `inner` is the object handed in."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None:
        self.inner.publish(state_dict, version=version)

    @property
    def accepts_adapters(self) -> bool:  # read at every publish: a publisher may change its mode
        return isinstance(self.inner, AdapterPublisher) and bool(self.inner.accepts_adapters)

    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None:
        if not isinstance(self.inner, AdapterPublisher):
            super().publish_adapter(tensors, config, version=version)
            return
        self.inner.publish_adapter(tensors, config, version=version)

    def close(self) -> None:
        if isinstance(self.inner, _Closes):
            self.inner.close()


def as_policy_publisher(publisher: object) -> PolicyPublisher:
    """`publisher` as a full `PolicyPublisher`: itself when it has every member (hooks
    included), else wrapped so the missing hooks take their defaults. A TypeError
    names `publish` when it lacks that."""
    if isinstance(publisher, PolicyPublisher):
        return publisher
    if not callable(getattr(publisher, "publish", None)):
        raise TypeError(f"{type(publisher).__name__} is not a PolicyPublisher: it has no publish "
                        "(see ludic_core.publish.base.PolicyPublisher)")
    return _Adopted(publisher)


class InProcessPublisher(PolicyPublisher):
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
