"""LoRA adapters, from training to serving: the PEFT-wrapped model and its adapter's tensors
(`peft_model`), the adapter directory on disk with its base's fingerprint (`adapter_dir`), and
the versioned names adapters are served under (`names`).

One low package, so training, checkpoints, the in-process client and the vLLM publisher share
one definition of an adapter without importing each other. Its config, `LoRAConfig`, stays in
the torch-free `ludic_core.config`. Exports needing torch load on first use (`ludic_core.lazy`):
clients and configs use `names` without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports
from ludic_core.lora.names import adapter_name, adapter_version

if TYPE_CHECKING:
    from ludic_core.lora.adapter_dir import is_adapter_dir, read_adapter, write_adapter_dir
    from ludic_core.lora.peft_model import adapter_config, adapter_state_dict, apply_lora, is_lora, merged_state_dict

_SOURCE = {
    "adapter_config": "peft_model",
    "adapter_state_dict": "peft_model",
    "apply_lora": "peft_model",
    "is_adapter_dir": "adapter_dir",
    "is_lora": "peft_model",
    "merged_state_dict": "peft_model",
    "read_adapter": "adapter_dir",
    "write_adapter_dir": "adapter_dir",
}

__all__ = ["adapter_config", "adapter_name", "adapter_state_dict", "adapter_version", "apply_lora", "is_adapter_dir",
           "is_lora", "merged_state_dict", "read_adapter", "write_adapter_dir"]

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
