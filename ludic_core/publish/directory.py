"""`DirectoryPublisher`: weights to actors in other processes, through a directory.

The embedded twin of pushing weights into a vLLM server: each publish writes a
complete model directory (the starting model's config and tokenizer files plus
the new weights) under `root/vNNNNNNNN`, renamed into place only when complete,
then repoints `root/latest.json` (also atomically). An actor reads
`latest.json` before each round and loads that directory, so it never sees a
half-written model; the last `keep` versions stay for actors still loading one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from ludic_core.publish.base import PolicyPublisher

__all__ = ["DirectoryPublisher", "read_latest", "point_latest"]

_WEIGHTS = (".safetensors", ".bin", ".pt", ".safetensors.index.json", ".bin.index.json")


def read_latest(root: str | Path) -> tuple[int, str] | None:
    """(version, model dir) of the newest published policy, None before the first."""
    path = Path(root) / "latest.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return int(data["version"]), str(data["path"])


def point_latest(root: str | Path, model_dir: str | Path, version: int) -> None:
    """Make `model_dir` the published policy at `version` (atomic rename)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".latest.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"version": int(version), "path": str(Path(model_dir).resolve())}))
    os.replace(tmp, root / "latest.json")


class DirectoryPublisher(PolicyPublisher):
    """`PolicyPublisher` writing model directories for out-of-process actors."""

    def __init__(self, root: str | Path, model_path: str | Path, *, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.root = Path(root)
        self.model_path = Path(model_path)
        self.keep = keep
        self.published_version: int | None = None

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None:
        from safetensors.torch import save_file

        final = self.root / f"v{version:08d}"
        if not final.exists():
            tmp = self.root / f".v{version:08d}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for f in self.model_path.iterdir():
                if f.is_file() and not f.name.endswith(_WEIGHTS):
                    shutil.copy2(f, tmp / f.name)
            tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
            save_file(_untied(tensors), str(tmp / "model.safetensors"), metadata={"format": "pt"})
            os.replace(tmp, final)
        point_latest(self.root, final, version)
        self.published_version = version
        self._prune()

    def _prune(self) -> None:
        versions = sorted(p for p in self.root.glob("v*") if p.is_dir())
        for old in versions[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _untied(tensors: dict[str, Any]) -> dict[str, Any]:
    """safetensors refuses tensors sharing memory (tied embeddings): store copies."""
    seen: dict[int, str] = {}
    out = {}
    for k, v in tensors.items():
        ptr = v.data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.setdefault(ptr, k)
    return out
