"""The model a Trainer trains, made ready once: the KL reference copied, LoRA applied,
activation checkpointing on, the model on its device (or sharded under torchrun) and
compiled. Apart from the loop because it runs once and decides where the model lives."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, NamedTuple

from ludic_core.config import TrainerConfig
from ludic_core.device import place_model
from ludic_core.lora.peft_model import apply_lora
from ludic_core.training import distributed as dist_utils
from ludic_core.training.compiled_layers import compile_layers

__all__ = ["PreparedModel", "pad_id", "prepare_model"]


class PreparedModel(NamedTuple):
    model: Any  # sharded under torchrun, in train mode
    ctx: dist_utils.DistContext  # with the device the model landed on
    reference: Any  # the frozen KL reference (not yet on the device), None without one


def prepare_model(model: Any, config: TrainerConfig, ctx: dist_utils.DistContext, *, caller_ctx: bool,
                  keep_reference: bool) -> PreparedModel:
    """`caller_ctx`: the caller resolved the device (run_stage), so its context is kept as built."""
    if config.compile and ctx.is_distributed:
        raise ValueError("trainer.compile runs in one process only: under torchrun (FSDP) leave it off")
    # KL-to-reference terms compare with the weights handed in (the run's starting
    # model: `resume` loads later weights into the policy only), frozen, before LoRA.
    reference = _frozen_copy(model) if keep_reference else None
    if config.lora is not None:
        model = apply_lora(model, config.lora)
    if config.grad_checkpointing:  # transformers >= 5.2x names it activation checkpointing
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if not ctx.is_distributed:  # one process: this is where the model meets its device
        if caller_ctx:
            model = model.to(ctx.device)
        else:  # `auto` keeps a model the caller already put on a GPU where it is
            model, device = place_model(model, config.device)
            ctx = dataclasses.replace(ctx, device=device)
    model = dist_utils.shard_model(model, ctx)
    model.train()
    if config.compile:
        compile_layers(model)
    return PreparedModel(model, ctx, reference)


def pad_id(model: Any, tokenizer: Any) -> int:
    """The id padding uses: the tokenizer's pad, the model's, the eos, else 0."""
    for cand in (getattr(tokenizer, "pad_token_id", None), getattr(model.config, "pad_token_id", None),
                 getattr(tokenizer, "eos_token_id", None)):
        if cand is not None:
            return int(cand)
    return 0


def _frozen_copy(model: Any) -> Any:
    """A gradient-free, eval-mode copy of `model` (the KL reference)."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref
