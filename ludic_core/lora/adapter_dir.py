"""LoRA adapter directories: PEFT's files plus a pointer to the base they belong to.

A LoRA run checkpoints and exports only its adapter (megabytes, not the model's
gigabytes). The directory is PEFT's own format (`adapter_config.json` +
`adapter_model.safetensors`, loadable by `PeftModel.from_pretrained(base, dir)`),
plus `ludic_base.json`: the base model's path and a fingerprint of its weights.
An adapter applied to any other base is silently wrong (every delta lands on
the wrong weights), so loading checks the fingerprint and refuses a mismatch,
naming both models. (Loading a base with its adapter merged is a model load:
`ludic_core.models.loading.load_adapter_model`.)

The fingerprint hashes every base tensor's name, shape and dtype and a few
evenly spaced values of each: cheap (no pass over the weights) yet different
for a fine-tuned copy of the same architecture, whose weights all moved.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import torch

from ludic_core.lazy import renamed_exports

__all__ = ["BASE_FILE", "base_fingerprint", "check_base", "is_adapter_dir", "read_adapter", "read_base_ref",
           "write_adapter_dir"]

BASE_FILE = "ludic_base.json"
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_SAMPLES = 8  # values per tensor in the fingerprint


def _base_items(model: Any) -> list[tuple[str, torch.Tensor]]:
    """The base weights under their plain HF names, whether or not LoRA wraps them."""
    out = []
    for name, t in model.state_dict().items():
        if "lora_" in name:
            continue
        out.append((name.removeprefix("base_model.model.").replace(".base_layer", ""), t))
    return sorted(out, key=lambda kv: kv[0])


def base_fingerprint(model: Any) -> dict[str, Any]:
    """{"sha256", "tensors", "params", "dtype"} of the base weights of `model` (a plain or PEFT model).

    Needs whole tensors: call it before FSDP shards the model (`apply_lora` does).
    """
    h, samples, params = hashlib.sha256(), [], 0
    dtypes: dict[str, int] = {}
    items = _base_items(model)
    for name, t in items:
        if hasattr(t, "full_tensor"):
            raise ValueError(f"cannot fingerprint sharded tensor {name!r}: fingerprint the base before sharding")
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}\n".encode())
        flat = t.detach().reshape(-1)
        if flat.numel():
            idx = torch.linspace(0, flat.numel() - 1, min(_SAMPLES, flat.numel()), device=flat.device).long()
            samples.append(flat[idx].float())
        params += flat.numel()
        dtypes[str(t.dtype).removeprefix("torch.")] = dtypes.get(str(t.dtype).removeprefix("torch."), 0) + 1
    if samples:
        h.update(torch.cat(samples).cpu().numpy().tobytes())  # one host transfer
    return {"sha256": h.hexdigest()[:32], "tensors": len(items), "params": params,
            "dtype": max(dtypes, key=dtypes.__getitem__) if dtypes else None}


def _describe(path: Any, fp: Mapping[str, Any]) -> str:
    return f"{path or '<in-memory model>'} (fingerprint {fp.get('sha256')}, {fp.get('tensors')} tensors, " \
           f"{fp.get('params')} values, {fp.get('dtype')})"


def check_base(saved: Mapping[str, Any], model_fp: Mapping[str, Any], model_path: Any, where: Any) -> None:
    """Refuse an adapter whose recorded base is not `model_fp`, naming both models."""
    if saved["fingerprint"]["sha256"] != model_fp["sha256"]:
        raise ValueError(
            f"adapter {where} was trained on base model {_describe(saved.get('path'), saved['fingerprint'])}, "
            f"but the base model given is {_describe(model_path, model_fp)}: an adapter only fits its own base")


def is_adapter_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / CONFIG_FILE).is_file() and (p / WEIGHTS_FILE).is_file()


def read_base_ref(path: str | Path) -> dict[str, Any]:
    """{"path", "fingerprint"} of the base an adapter directory belongs to."""
    f = Path(path) / BASE_FILE
    if not f.is_file():
        raise FileNotFoundError(f"{path} has no {BASE_FILE}: not an adapter ludic wrote, so its base is unknown")
    return json.loads(f.read_text())


def write_adapter_dir(
    out: str | Path, tensors: Mapping[str, torch.Tensor], peft_config: Any, base_ref: Mapping[str, Any] | None,
    tokenizer: Any = None,
) -> None:
    """PEFT's adapter files (tensors keyed as PEFT saves them), the base pointer, the tokenizer.

    `base_ref` None writes PEFT's files alone (a copy for a server to load,
    whose base is the served model): nothing ludic checks a base against.
    """
    import copy

    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(peft_config)
    if base_ref is not None:
        cfg.base_model_name_or_path = base_ref.get("path")
    cfg.inference_mode = True
    cfg.save_pretrained(str(out))
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, str(out / WEIGHTS_FILE),
              metadata={"format": "pt"})
    if base_ref is not None:
        (out / BASE_FILE).write_text(json.dumps(dict(base_ref), indent=1))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def read_adapter(path: str | Path) -> tuple[dict[str, torch.Tensor], Any, dict[str, Any] | None]:
    """(tensors keyed as PEFT saves them, `peft.LoraConfig`, base pointer or None) of an adapter directory."""
    from peft import LoraConfig
    from safetensors.torch import load_file

    if not is_adapter_dir(path):
        raise FileNotFoundError(f"{path} is not an adapter directory ({CONFIG_FILE} + {WEIGHTS_FILE})")
    ref = read_base_ref(path) if (Path(path) / BASE_FILE).is_file() else None
    return load_file(str(Path(path) / WEIGHTS_FILE)), LoraConfig.from_pretrained(str(path)), ref


#: `load_adapter_model` was here when this module was `ludic_core.models.adapter_dir`: a model load,
#: it moved beside `load_model_and_tokenizer` (models sit above lora). Kept for one release.
__getattr__ = renamed_exports(__name__, {"load_adapter_model": "ludic_core.models.loading:load_adapter_model"})
