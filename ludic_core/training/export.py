"""Merging is an explicit step: an adapter checkpoint becomes a plain model directory.

A LoRA run checkpoints only its adapter (`training.checkpoint_adapter`); whatever
needs one self-contained model (another framework, a server without LoRA, a
model hub) gets it here, once, from the adapter and its fingerprint-checked base.
"""

from __future__ import annotations

from pathlib import Path

from ludic_core.lora.adapter_dir import is_adapter_dir, read_base_ref
from ludic_core.models.loading import load_adapter_model
from ludic_core.training.checkpoint import latest_checkpoint

__all__ = ["export_merged"]


def export_merged(checkpoint: str | Path, out_dir: str | Path, *, base: str | Path | None = None) -> Path:
    """Write a plain HF model directory (config, tokenizer, safetensors) from an
    adapter checkpoint (`ROOT/step_N`, its `model/` dir, or a checkpoint root: its
    latest) merged into its base (`base`, else the path the adapter records).

    The base's fingerprint is checked first: a wrong base is refused, naming both.
    """
    from transformers import AutoTokenizer

    src = _adapter_source(Path(checkpoint))
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"export target {out} exists and is not empty")
    if not is_adapter_dir(src):
        raise ValueError(f"{src} holds no LoRA adapter (adapter_config.json + adapter_model.safetensors): "
                         f"a full fine-tune's checkpoint model directory is already a plain model")
    model = load_adapter_model(src, base=base)
    model.save_pretrained(out)
    tok_dir = src if (src / "tokenizer_config.json").is_file() else (base or read_base_ref(src)["path"])
    AutoTokenizer.from_pretrained(str(tok_dir)).save_pretrained(out)
    return out


def _adapter_source(p: Path) -> Path:
    """The adapter directory a checkpoint argument names (step dir, its model/, or a root's latest)."""
    if (p / "model").is_dir():
        return p / "model"
    if (p / "latest").is_file() or any(p.glob("step_*")):
        found = latest_checkpoint(p)
        if found is None:
            raise FileNotFoundError(f"no complete checkpoint in {p}")
        return found / "model"
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    return p
