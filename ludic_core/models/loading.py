"""Load any causal LM directory or hub id (a tiny offline build included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_model_and_tokenizer"]


def load_model_and_tokenizer(
    path: str | Path, *, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Return (model in eval mode, tokenizer) for `path`.

    `device` and `dtype` are `ludic_core.device` specs ("auto" included); the
    CPU in float32 by default, since the trainer moves the model itself.
    A tokenizer without a pad token gets its eos token as pad, since batched
    generation needs one.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ludic_core.device import resolve_device, resolve_dtype

    target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"tokenizer at {path} has no chat template; agents need one")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype).to(target)
    model.eval()
    return model, tok
