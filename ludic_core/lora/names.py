"""The names versioned LoRA adapters are served under, and back.

A publisher loads the adapter of policy version N as `policy-vN`; a request
names it in its `model` field. The name is the only thing an OpenAI-style
response echoes about the weights, so a client recovers the version that
produced a completion from it (an adapter is never changed under its name).
Torch-free: clients and configs use it.
"""

from __future__ import annotations

import re

__all__ = ["adapter_name", "adapter_version"]

_PATTERN = re.compile(r"policy-v(\d{1,19})")


def adapter_name(version: int) -> str:
    """The name an adapter published at `version` is served under (requests name it)."""
    if int(version) < 0:
        raise ValueError(f"an adapter version is a trainer step (>= 0), got {version}")
    return f"policy-v{int(version)}"


def adapter_version(name: str | None) -> int | None:
    """The policy version in an adapter name (`policy-v12` -> 12); None for any other name."""
    match = _PATTERN.fullmatch(name or "")
    return int(match.group(1)) if match else None
