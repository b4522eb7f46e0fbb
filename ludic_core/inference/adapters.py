"""Named LoRA adapters over one served base model, the way vLLM serves them.

A request's `model` field picks what answers it: a loaded adapter's name, the
base's served name, or None for the default (the newest adapter loaded as
default, else the base). An unknown name is refused, naming what is served.
Adapters are injected into the served model in place (PEFT), so the decoder
keeps calling the same module; one adapter is active per decode batch
(`activate`). Only the newest `keep_last` stay loaded: a publisher pushes one
per version, and rows still decoding on an old one finish before a load.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import torch

from ludic_core.inference.errors import UnknownServedModelError

__all__ = ["ServedAdapters", "UnknownModelError"]


class UnknownModelError(UnknownServedModelError):
    """A request named a model (adapter) that is not served."""


class ServedAdapters:
    """The adapters a `LocalChatClient` serves, with their policy versions.

    PEFT holds them in slots (`slot0`, `slot1`, ...): a new version is copied
    into a free slot of the same shape (the evicted oldest's), so a publish
    costs a copy of the adapter's tensors, not new modules in every layer.
    """

    def __init__(self, model: Any, *, base_name: str = "policy", keep_last: int = 2) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.model = model  # the module the decoder calls; adapters live inside it
        self.base_name, self.keep_last = base_name, keep_last
        self.peft: Any = None  # the PeftModel managing the injected layers, once one is loaded
        self.versions: dict[str, int] = {}  # load order: oldest first
        self.slot_of: dict[str, str] = {}  # adapter name -> PEFT slot
        self.free: list[str] = []  # slots of unloaded adapters, reusable
        self._shape: dict[str, Any] = {}  # slot -> its config's signature
        self._params: dict[str, dict[str, torch.Tensor]] = {}  # slot -> {PEFT key: parameter}
        self.default: str | None = None  # None = the base
        self.active: Any = None

    @property
    def names(self) -> list[str]:
        return list(self.versions)

    def resolve(self, name: str | None) -> str | None:
        """The adapter a request's `model` selects (None = the base)."""
        if name is None:
            return self.default
        if name == self.base_name:
            return None
        if name in self.versions:
            return name
        raise UnknownModelError(f"model {name!r} is not served here: the base is {self.base_name!r}, "
                                f"adapters loaded are {self.names or 'none'} (the newest {self.keep_last} are kept)")

    def version(self, name: str | None, base_version: int) -> int:
        return base_version if name is None else self.versions[name]

    def load(self, name: str, tensors: Mapping[str, torch.Tensor], config: Any, *, version: int,
             make_default: bool = True) -> list[str]:
        """Load (or replace) adapter `name`: `tensors` keyed as PEFT saves them, `config` a
        `peft.LoraConfig` or its dict. Returns the names unloaded to keep `keep_last`."""
        from peft import LoraConfig

        if name == self.base_name:
            raise ValueError(f"adapter name {name!r} is the base model's served name")
        cfg = config if isinstance(config, LoraConfig) else LoraConfig(**dict(config))
        shape = _signature(cfg)
        probe = next((s for s, sh in self._shape.items() if sh == shape), None) or self._new_slot(cfg)
        self._check(self._params[probe], name, tensors)  # before anything served changes
        gone: list[str] = []
        if name in self.versions:  # a reload replaces it
            self.versions.pop(name)
            self.free.append(self.slot_of.pop(name))
        else:
            gone = self._make_room()
        slot = next((s for s in self.free if self._shape[s] == shape), None) or self._new_slot(cfg)
        self.free.remove(slot)
        with torch.no_grad():
            for k, v in tensors.items():
                self._params[slot][k].copy_(v)  # a copy: never alias the trainer's live tensors
        self.slot_of[name], self.versions[name] = slot, int(version)
        if make_default:
            self.default = name
        self.active = object()  # force the next activate() to set the layers
        return gone

    def _make_room(self) -> list[str]:
        """Unload the oldest adapters (never the default) until one more fits."""
        gone = [n for n in self.names if n != self.default][: max(len(self.versions) + 1 - self.keep_last, 0)]
        for n in gone:
            self.unload(n)
        return gone

    def _new_slot(self, cfg: Any) -> str:
        """A new free slot shaped for `cfg` (PEFT injects its layers into every target)."""
        from peft import get_peft_model

        slot = f"slot{len(self._shape)}"
        cfg = copy.deepcopy(cfg)
        cfg.inference_mode = True
        if self.peft is None:
            self.peft = get_peft_model(self.model, cfg, adapter_name=slot)
        else:
            self.peft.add_adapter(slot, cfg)
        self.model.eval()
        self._shape[slot] = _signature(cfg)
        self._params[slot] = {_strip(n, slot): p for n, p in self.peft.named_parameters()
                              if slot in n.split(".")}
        for p in self._params[slot].values():
            p.requires_grad_(False)
        self.free.append(slot)
        return slot

    @staticmethod
    def _check(params: Mapping[str, torch.Tensor], name: str, tensors: Mapping[str, torch.Tensor]) -> None:
        missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
        bad = [f"{k}: {tuple(v.shape)} vs {tuple(params[k].shape)}" for k, v in tensors.items()
               if k in params and v.shape != params[k].shape]
        if missing or extra or bad:
            raise ValueError(f"adapter {name!r} does not fit its config's layers: missing {missing[:3]}, "
                             f"unexpected {extra[:3]}, shapes {bad[:3]}; nothing served changed")

    def unload(self, name: str) -> None:
        if name not in self.versions:
            raise UnknownModelError(f"no adapter {name!r} is loaded (loaded: {self.names or 'none'})")
        self.versions.pop(name)
        self.free.append(self.slot_of.pop(name))
        if self.default == name:
            self.default = self.names[-1] if self.names else None
        self.active = object()

    def activate(self, name: str | None) -> None:
        """Make the served model compute with adapter `name` (None: the bare base)."""
        if self.peft is None or name == self.active:
            return
        lora = self.peft.base_model
        if name is None:
            lora.disable_adapter_layers()
        else:
            lora.enable_adapter_layers()
            self.peft.set_adapter(self.slot_of[name], inference_mode=True)
        self.active = name

    def base_state(self) -> dict[str, torch.Tensor]:
        """The base weights under their plain HF names (for a full-weights sync)."""
        state = self.model.state_dict()
        if self.peft is None:
            return state
        return {k.replace(".base_layer", ""): v for k, v in state.items() if "lora_" not in k}


def _strip(name: str, slot: str) -> str:
    """A slot's parameter name as PEFT saves adapters: no slot name, `base_model.model.` first."""
    key = ".".join(part for part in name.split(".") if part != slot)
    return key if key.startswith("base_model.model.") else f"base_model.model.{key}"


def _signature(cfg: Any) -> tuple:
    """What decides a slot's layers and scaling (r, alpha, targets, ...)."""
    targets = cfg.target_modules if isinstance(cfg.target_modules, str) else tuple(sorted(cfg.target_modules or ()))
    return (cfg.r, cfg.lora_alpha, targets, cfg.use_rslora, cfg.use_dora, bool(cfg.bias != "none"),
            tuple(sorted((cfg.rank_pattern or {}).items())), tuple(sorted((cfg.alpha_pattern or {}).items())))
