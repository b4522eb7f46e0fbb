"""Shared pieces of flow configs and flow plumbing."""

from __future__ import annotations

from pathlib import Path

from ludic_core.frozen import FrozenModel

__all__ = ["FlowConfig", "require_model_dir", "require_path"]


class FlowConfig(FrozenModel):
    """Base of every flow config: frozen (no mutation after parsing) and strict
    (`extra="forbid"`: a typo'd field fails at trigger time, naming it).

    `preflight()` checks what validation cannot (paths exist, env names
    resolve): the CLI calls it before Prefect starts, every flow at its start."""

    def preflight(self) -> None:
        """Nothing to check by default."""


def require_path(field: str, path: str, what: str = "file or directory") -> None:
    if not Path(path).exists():
        raise FileNotFoundError(f"{field}: no {what} at {path!r} (relative paths are from {Path.cwd()})")


def require_model_dir(field: str, path: str) -> None:
    """A Hugging Face model directory: `config.json` at least (else transformers
    would take the path for a hub repo id and fail far from the cause)."""
    require_path(field, path, "model directory")
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{field}: {path!r} is not a model directory (no config.json in it)")
