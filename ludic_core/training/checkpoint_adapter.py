"""The `model/` part of a LoRA run's checkpoint: its adapter, not the model.

`checkpoint.py` gathers the trainable tensors only (`ignore_frozen_params`) and
hands them here: they are written as PEFT's adapter files with the base's path
and fingerprint (`lora.adapter_dir`), and read back keyed as the live model's
state dict. Optimizer, scheduler and RNG state are stored as for any run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ludic_core.lora.adapter_dir import WEIGHTS_FILE, check_base, is_adapter_dir, read_base_ref
from ludic_core.lora.peft_model import adapter_config, base_ref, peft_key, unwrapped
from ludic_core.training.checkpoint_integrity import corrupt

__all__ = ["adapter_state_for", "require_adapter", "write_adapter"]


def write_adapter(model: Any, state: dict[str, torch.Tensor], out: Path, tokenizer: Any) -> None:
    """`state`: the gathered trainable tensors under model FQNs (rank 0)."""
    from ludic_core.lora.adapter_dir import write_adapter_dir

    tensors = {peft_key(unwrapped(k)): v for k, v in state.items() if "lora_" in k}
    if not tensors:
        raise ValueError("LoRA checkpoint: no adapter tensors were gathered (is any lora_ parameter trainable?)")
    write_adapter_dir(out, tensors, adapter_config(model), base_ref(model), tokenizer)


def require_adapter(adapter_dir: Path) -> None:
    if not is_adapter_dir(adapter_dir):
        raise ValueError(f"checkpoint {adapter_dir.parent} holds full model weights, not a LoRA adapter: "
                         f"a LoRA run resumes from its own adapter checkpoints")


def adapter_state_for(model: Any, adapter_dir: Path, keys: list[str]) -> dict[str, torch.Tensor]:
    """The adapter's tensors keyed as `model`'s state dict, after checking the base.

    Refuses a full-weights checkpoint (a LoRA run resumes only from an adapter)
    and an adapter of another base (fingerprints differ; both are named).
    """
    require_adapter(adapter_dir)
    mine = base_ref(model)
    saved = read_base_ref(adapter_dir)
    check_base(saved, mine["fingerprint"], mine.get("path"), adapter_dir.parent)
    try:
        weights = load_file(adapter_dir / WEIGHTS_FILE)
    except (SafetensorError, OSError) as exc:  # an unverified (pre-manifest) checkpoint's damage, named
        raise corrupt(adapter_dir.parent, f"{adapter_dir.name}/{WEIGHTS_FILE}", f"unreadable ({exc})") from exc
    wanted = {peft_key(k): k for k in keys if "lora_" in k}
    missing = sorted(set(wanted) - set(weights))
    extra = sorted(set(weights) - set(wanted))
    if missing or extra:
        raise ValueError(f"adapter {adapter_dir} does not fit the model's LoRA layers: missing {missing[:3]}, "
                         f"unexpected {extra[:3]} (another rank or target_modules?)")
    return {wanted[k]: v for k, v in weights.items()}

