"""Load any causal LM directory or hub id (a tiny offline build included)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

__all__ = ["load_adapter_model", "load_model_and_tokenizer", "MODEL_INIT_LOCK"]

#: transformers' `from_pretrained` disables weight init and tying by patching
#: class methods and torch functions for the whole process, then restores what
#: it saw. Two threads loading at once (pipeline actors and a trainer stage)
#: can restore each other's no-ops, leaving every later model untied and
#: uninitialised. Every model load or build in this process holds this lock.
MODEL_INIT_LOCK = threading.RLock()


def load_model_and_tokenizer(
    path: str | Path, *, dtype: str = "float32", device: str = "cpu", chat: bool = True
) -> tuple[Any, Any]:
    """Return (model in eval mode, tokenizer) for `path`.

    `device` and `dtype` are `ludic_core.device` specs ("auto" included); the
    CPU in float32 by default, since the trainer moves the model itself.
    A tokenizer without a pad token gets its eos token as pad, since batched
    generation needs one. A LoRA adapter directory (`adapter_dir`) loads as its
    base with the adapter merged in, after checking it is the adapter's base.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ludic_core.device import resolve_device, resolve_dtype
    from ludic_core.lora.adapter_dir import is_adapter_dir

    _check_local(path)
    target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if chat and tok.chat_template is None:  # a scorer (a distillation teacher) renders no chat: chat=False
        raise ValueError(f"tokenizer at {path} has no chat template; agents need one")
    if is_adapter_dir(path):
        model = load_adapter_model(path).to(torch_dtype)
    else:
        with MODEL_INIT_LOCK:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    model = model.to(target)
    model.eval()
    return model, tok


def load_adapter_model(path: str | Path, *, base: str | Path | None = None) -> Any:
    """The base (from `base`, else the recorded path) with the adapter merged in: a plain HF model.

    Merged in float32 on the CPU, the way the trainer's base was fingerprinted,
    so the same files always give the same weights (a base that is itself an
    adapter directory is loaded the same way, recursively).
    """
    from peft import PeftModel

    from ludic_core.lora.adapter_dir import base_fingerprint, check_base, read_base_ref

    ref = read_base_ref(path)
    base_path = base if base is not None else ref.get("path")
    if not base_path:
        raise ValueError(f"adapter {path} records no base model path (trained on an in-memory model): pass base=")
    model, _ = load_model_and_tokenizer(base_path, dtype="float32", device="cpu")
    check_base(ref, base_fingerprint(model), base_path, path)
    with MODEL_INIT_LOCK:
        merged = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    merged.name_or_path = str(Path(path).resolve())  # a LoRA on top records this directory as its base
    return merged.eval()


def _check_local(path: str | Path) -> None:
    """A path that cannot be a hub id (`org/name`) must exist: otherwise
    transformers answers a mistyped checkpoint directory with a hub-id
    validation traceback that never says the directory is missing."""
    text = str(path)
    if Path(text).exists():
        return
    if isinstance(path, Path) or Path(text).is_absolute() or text.startswith(".") or text.count("/") > 1:
        raise FileNotFoundError(f"model directory {text} does not exist")
