"""LoRA through peft: train adapters, publish merged full weights.

Inference engines get plain HF-named full weights (W + B A * scale), so a
LoRA run publishes exactly like a full fine-tune and servers need no adapter
support.
"""

from __future__ import annotations

from typing import Any

import torch

from ludic_core.config import LoRAConfig

__all__ = ["apply_lora", "is_lora", "merged_state_dict"]


def apply_lora(model: Any, cfg: LoRAConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules), task_type="CAUSAL_LM",
    ))


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


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
