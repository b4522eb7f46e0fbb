"""What a checkpoint stores besides weights, as JSON + tensors: the codec and the RNG snapshot.

Optimizer and scheduler states are nested dicts/lists/tuples with tensors inside;
`encode` moves each tensor out under its dotted path (saved with safetensors) and
leaves a JSON-able skeleton, so a checkpoint holds data, never pickled code.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

import torch

__all__ = ["decode", "encode", "jsonable_entries", "map_device_states", "restore_rng", "rng_snapshot", "to_tensor"]


def encode(obj: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON-able form of `obj`; tensors move to `tensors` under their dotted path."""
    if isinstance(obj, torch.Tensor):
        if path in tensors:
            raise ValueError(f"two tensors share the checkpoint key {path!r}")
        tensors[path] = obj.detach().to("cpu").contiguous()
        return {"__tensor__": path}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: encode(v, f"{path}.{k}", tensors) for k, v in obj.items()}
        return {"__items__": [[k, encode(v, f"{path}.{k}", tensors)] for k, v in obj.items()]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store {type(obj).__name__} at {path!r} in a checkpoint (JSON + tensors only)")


def decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {"__tensor__"}:
        return tensors[obj["__tensor__"]]
    if set(obj) == {"__tuple__"}:
        return tuple(decode(v, tensors) for v in obj["__tuple__"])
    if set(obj) == {"__items__"}:
        return {k: decode(v, tensors) for k, v in obj["__items__"]}
    return {k: decode(v, tensors) for k, v in obj.items()}


def jsonable_entries(state: dict[str, Any], what: str) -> dict[str, Any]:
    """Keep entries that survive a JSON round trip (LambdaLR keeps callables' state; most is plain)."""
    kept, dropped = {}, []
    for k, v in state.items():
        try:
            json.dumps(v, allow_nan=True)
            kept[k] = v
        except TypeError:
            dropped.append(k)
    if dropped:
        warnings.warn(f"{what}: not saving non-JSON entries {dropped}", stacklevel=3)
    return kept


# A snapshot is JSON (it crosses ranks that way); on disk the torch/CUDA states go to
# rng.safetensors as uint8 tensors and the rest to trainer_state.json.
def rng_snapshot() -> dict[str, Any]:
    version, mt, gauss = random.getstate()
    snap: dict[str, Any] = {"torch_cpu": torch.get_rng_state().tolist(), "python": [version, list(mt), gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        snap["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    try:
        import numpy as np

        state: Any = np.random.get_state()  # the legacy tuple form (typed as tuple | dict)
        name, keys, pos, has_gauss, cached = state
        snap["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    return snap


def restore_rng(snap: dict[str, Any]) -> None:
    torch.set_rng_state(to_tensor(snap["torch_cpu"]))
    version, mt, gauss = snap["python"]
    random.setstate((version, tuple(mt), gauss))
    if "cuda" in snap and torch.cuda.is_available() and len(snap["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([to_tensor(s) for s in snap["cuda"]])
    if "numpy" in snap:
        import numpy as np

        name, keys, pos, has_gauss, cached = snap["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def map_device_states(snap: dict[str, Any], fn) -> dict[str, Any]:
    """Apply `fn` to the torch CPU and CUDA states (lists <-> uint8 tensors)."""
    out = dict(snap, torch_cpu=fn(snap["torch_cpu"]))
    if "cuda" in snap:
        out["cuda"] = [fn(s) for s in snap["cuda"]]
    return out


def to_tensor(state: list[int]) -> torch.Tensor:
    return torch.tensor(state, dtype=torch.uint8)
