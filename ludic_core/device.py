"""The one place that decides where tensors live and in which precision.

A CPU twin hides device bugs, so nothing else in the library picks a device:
the trainer, the in-process inference engine and the distributed helpers all
ask here. Specs are plain strings so configs stay torch-free:

- device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``. ``auto`` is CUDA when a
  GPU is visible, else the CPU; the environment variable ``LUDIC_DEVICE``
  overrides what ``auto`` picks (the test suite's ``--device`` sets it).
- dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``. ``auto`` is
  bfloat16 on a GPU that supports it (what people train and serve in), float32
  on the CPU (exact log-probs; the CPU twins compare numbers to 1e-6).

A model the caller already put on an accelerator is respected under ``auto``.
"""

from __future__ import annotations

import contextlib
import os
import re
import typing
from typing import Any, ContextManager

import torch

from ludic_core.specs import DEVICE_PATTERN, DType

__all__ = [
    "DEVICE_ENV",
    "DEVICE_PATTERN",
    "DTYPES",
    "FORWARD_COST_TOKENS",
    "attention_backends",
    "cuda_available",
    "forward_cost_tokens",
    "model_device",
    "place_model",
    "resolve_device",
    "resolve_dtype",
]

DEVICE_ENV = "LUDIC_DEVICE"
DTYPES = typing.get_args(DType)

#: A forward pass's fixed cost in token positions, by device type: what batching trades padding
#: (or a second, smaller pass) against. On an H200 (Qwen2.5-0.5B's shape, 64 items of 256-1536
#: tokens, 32k budget) 256 cut 12 training micro-batches and 8192 cut 3, 1.8x the tokens/s: a
#: GPU's pass is bound by its ~2000 kernel launches until a batch is large.
FORWARD_COST_TOKENS = {"cpu": 256, "cuda": 8192}


def cuda_available() -> bool:
    """`torch.cuda.is_available()`, False when a broken CUDA install raises."""
    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver must not stop CPU work
        return False


def resolve_device(spec: str = "auto") -> torch.device:
    """The torch device for `spec`; a clear error when CUDA is asked for but absent."""
    if not re.match(DEVICE_PATTERN, spec):
        raise ValueError(f"device {spec!r} is not one of auto, cpu, cuda, cuda:N")
    if spec == "auto":
        spec = os.environ.get(DEVICE_ENV) or ("cuda" if cuda_available() else "cpu")
        if not re.match(DEVICE_PATTERN, spec) or spec == "auto":
            raise ValueError(f"${DEVICE_ENV}={spec!r} is not one of cpu, cuda, cuda:N")
    if spec == "cpu":
        return torch.device("cpu")
    if not cuda_available():
        raise RuntimeError(f"device {spec!r} was asked for, but torch sees no CUDA GPU "
                           f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    index = int(spec.split(":")[1]) if ":" in spec else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device {spec!r} asked for GPU {index}, but only {count} GPU(s) are visible")
    return torch.device("cuda", index)


def resolve_dtype(spec: str, device: torch.device) -> torch.dtype:
    """The compute dtype for `spec` on `device` (see the module docstring for `auto`)."""
    if spec not in DTYPES:
        raise ValueError(f"dtype {spec!r} is not one of {', '.join(DTYPES)}")
    if spec == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, spec)


def model_device(model: Any) -> torch.device:
    """Where `model`'s first parameter lives (CPU for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def forward_cost_tokens(device: torch.device) -> int:
    """`FORWARD_COST_TOKENS` for `device`'s type (other accelerators take the CUDA value)."""
    return FORWARD_COST_TOKENS.get(device.type, FORWARD_COST_TOKENS["cuda"])


def place_model(model: Any, spec: str = "auto") -> tuple[Any, torch.device]:
    """Put `model` on the device `spec` names; return (model, device).

    Under ``auto`` a model already on an accelerator stays where it is (the
    caller chose), while a CPU model moves to the GPU when there is one.
    """
    current = model_device(model)
    if spec == "auto" and current.type not in ("cpu", "meta"):
        return model, current
    device = resolve_device(spec)
    if current != device:
        model = model.to(device)
    return model, device


def attention_backends(device: torch.device) -> ContextManager[Any]:
    """The attention kernels our forwards run under: on CUDA, SDPA without cuDNN.

    Our shapes change on every call (decode steps, length-sorted micro-batches),
    and cuDNN's SDPA plans each new shape on the host (~3 ms per layer call on
    an H100); flash / memory-efficient attention do not (measured on an H100:
    docs/results.md, "GPU"). The flags are process-wide while the context is
    open, so a thread that enters it too may briefly run with the defaults:
    speed only.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
