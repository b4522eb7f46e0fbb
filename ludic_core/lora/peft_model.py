"""LoRA through peft: train adapters, checkpoint and publish adapters, merge on export.

A LoRA run's state is its adapter: checkpoints hold only the adapter (PEFT's
files, `ludic_core.lora.adapter_dir`) with a pointer to the base, and an
in-process engine is sent only the adapter's tensors each publish, as vLLM's
runtime LoRA would be. Full HF-named weights (W + B A * scale) are still what
`merged_state_dict` gives, for publishers and servers without adapter support;
`training.export.export_merged` turns an adapter checkpoint into a plain model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, Sequence

import torch

__all__ = ["ADAPTER", "adapter_config", "adapter_state_dict", "apply_lora", "base_ref", "is_lora",
           "merged_state_dict", "peft_key", "unwrapped"]

ADAPTER = "default"  # the trained adapter's name inside the PeftModel (PEFT's default)


class LoRAShape(Protocol):
    """What `apply_lora` reads of a `ludic_core.config.LoRAConfig`, named here because the
    torch-free configs sit above this package (they import the layers below them)."""

    @property
    def r(self) -> int: ...
    @property
    def alpha(self) -> int: ...
    @property
    def dropout(self) -> float: ...
    @property
    def target_modules(self) -> Sequence[str]: ...


def apply_lora(model: Any, cfg: LoRAShape) -> Any:
    """Wrap `model` in trainable adapters; remember which base they belong to.

    The base's path and fingerprint are taken here, while the model is whole
    (before FSDP shards it) and before any training step: checkpoints record
    them, and resuming or exporting checks them.
    """
    from peft import LoraConfig, get_peft_model

    from ludic_core.lora.adapter_dir import base_fingerprint

    ref = {"path": _source_path(model), "fingerprint": base_fingerprint(model)}
    peft_model = get_peft_model(model, LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules), task_type="CAUSAL_LM",
    ))
    vars(peft_model)["ludic_base"] = ref  # a plain attribute, where nn.Module's __setattr__ puts it too
    return peft_model


def _source_path(model: Any) -> str | None:
    name = getattr(model, "name_or_path", None) or ""
    return str(Path(name).resolve()) if name and Path(name).exists() else (name or None)


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def base_ref(model: Any) -> dict[str, Any]:
    """{"path", "fingerprint"} of a LoRA model's base (computed now if `apply_lora` did not)."""
    ref = getattr(model, "ludic_base", None)
    if ref is None:
        from ludic_core.lora.adapter_dir import base_fingerprint

        base = model.get_base_model()
        ref = model.ludic_base = {"path": _source_path(base), "fingerprint": base_fingerprint(model)}
    return ref


def peft_key(name: str, adapter: str = ADAPTER) -> str:
    """A model state-dict key as PEFT saves it: without the adapter's name
    (`...q_proj.lora_A.default.weight` -> `...q_proj.lora_A.weight`)."""
    return ".".join(part for part in name.split(".") if part != adapter)


def adapter_config(model: Any) -> Any:
    """The trained adapter's `peft.LoraConfig`."""
    return model.peft_config[ADAPTER]


def adapter_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors, keyed as PEFT saves them; whole tensors on every rank.

    Under FSDP every rank must call it (each sharded tensor is gathered); in
    one process these are detached views of the live weights: copy to keep.
    """
    out = {}
    for name, p in model.named_parameters():
        if "lora_" not in name:
            continue
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[peft_key(unwrapped(name))] = t.detach()
    return out


def unwrapped(name: str) -> str:
    """A parameter name without the infixes torch.compile / DDP / activation checkpointing add."""
    for infix in ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module."):
        name = name.replace(infix, "")
    return name.removeprefix("module.")


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Full weights with adapters merged, under the base model's HF names."""
    model.merge_adapter()
    try:
        base = model.get_base_model()
        out = {}
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            out[name.replace(".base_layer", "")] = tensor.detach().clone()
        return out
    finally:
        model.unmerge_adapter()
