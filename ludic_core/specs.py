"""String specs that configs and the runtime share: which device, which dtype.

Configs validate them without torch (`ludic_core.config`); `ludic_core.device`
turns them into torch devices and dtypes. One statement of each, here.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["DEVICE_PATTERN", "DEVICE_DOC", "DType"]

#: a device spec: auto | cpu | cuda | cuda:N
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"
DEVICE_DOC = "auto (CUDA when present, else CPU) | cpu | cuda | cuda:N"
DType = Literal["auto", "float32", "bfloat16", "float16"]
