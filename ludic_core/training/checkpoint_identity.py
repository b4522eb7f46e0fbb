"""Which model a checkpoint belongs to: canonical parameter names, shapes, tied groups.

Why apart from `checkpoint.py`: a checkpoint is keyed by canonical FQN (wrapper
infixes of torch.compile / DDP / FSDP / activation checkpointing removed), so a
run saved under one wrapping and world size resumes under another; and a
checkpoint of another model is refused, naming the first differing parameter,
before anything is loaded into the live one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

__all__ = ["canonical", "check_fingerprint", "fingerprint", "state_keys", "tied_groups"]

# Wrapper infixes that torch.compile / DDP / activation checkpointing add to names.
_WRAPPER_INFIXES = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def canonical(name: str) -> str:
    for infix in _WRAPPER_INFIXES:
        name = name.replace(infix, "")
    return name.removeprefix("module.")


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Parameter names + global shapes (DTensor shapes are global) and config model_type."""
    params = sorted([canonical(n), list(p.shape)] for n, p in model.named_parameters())
    config = getattr(model, "config", None)
    return {"model_type": getattr(config, "model_type", None), "params": params}


def check_fingerprint(model: nn.Module, saved: dict[str, Any], where: Path) -> None:
    """Refuse a checkpoint of another model, naming the first differing parameter."""
    mine = fingerprint(model)
    if saved.get("model_type") != mine["model_type"]:
        raise ValueError(
            f"checkpoint {where} holds a {saved.get('model_type')!r} model, not {mine['model_type']!r}"
        )
    ours = {n: s for n, s in mine["params"]}
    theirs = {n: s for n, s in saved["params"]}
    for name in sorted(ours.keys() | theirs.keys()):
        if ours.get(name) != theirs.get(name):
            raise ValueError(
                f"checkpoint {where} does not match the model: parameter {name!r} has shape "
                f"{theirs.get(name, 'absent')} in the checkpoint but {ours.get(name, 'absent')} in the model"
            )


def state_keys(model: nn.Module) -> list[str]:
    """Canonical state-dict keys (tied names included) without touching FSDP collectives."""
    keys = [canonical(n) for n, _ in model.named_parameters(remove_duplicate=False)]
    for mod_name, mod in model.named_modules(remove_duplicate=False):
        for b_name, buf in mod._buffers.items():
            if buf is not None and b_name not in mod._non_persistent_buffers_set:
                keys.append(canonical(f"{mod_name}.{b_name}" if mod_name else b_name))
    return list(dict.fromkeys(keys))


def tied_groups(model: nn.Module) -> list[list[str]]:
    """Names that share one parameter (e.g. tied embeddings), which save_pretrained stores once."""
    by_id: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(canonical(n))
    return [names for names in by_id.values() if len(names) > 1]
