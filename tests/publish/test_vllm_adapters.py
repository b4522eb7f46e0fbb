"""The adapter publisher's pure parts: names and versions, which adapters are
unloaded first, and the shape check that runs before anything is sent (the
live server is exercised in test_vllm_adapters_live)."""

from __future__ import annotations

import pytest
import torch

from ludic_core.lora.names import adapter_name, adapter_version
from ludic_core.vllm.adapters import adapter_problems, to_unload
from ludic_core.vllm.client import newest_adapter


class _Cfg:  # the two fields of a peft.LoraConfig the check reads
    def __init__(self, r, rank_pattern=None):
        self.r, self.rank_pattern = r, rank_pattern or {}


SCHEMA = {"model.layers.0.self_attn.q_proj.weight": ("float32", (64, 32)),
          "model.layers.0.self_attn.k_proj.weight": ("float32", (16, 32))}
Q, K = "base_model.model.model.layers.0.self_attn.q_proj", "base_model.model.model.layers.0.self_attn.k_proj"


def test_adapter_names_carry_their_version_and_nothing_else_parses():
    assert adapter_name(7) == "policy-v7" and adapter_version("policy-v7") == 7
    for name in ("policy", "policy-v", "policy-v7-extra", "other-v7", None, "policy-v-1"):
        assert adapter_version(name) is None
    with pytest.raises(ValueError, match="trainer step"):
        adapter_name(-1)
    assert newest_adapter(["policy", "policy-v9", "policy-v10", "policy-v2"]) == "policy-v10"  # by version, not text
    assert newest_adapter(["policy", "my-adapter"]) is None


def test_the_oldest_adapters_are_unloaded_first():
    loaded = ["policy-v3", "policy-v4", "policy-v5"]  # load order, oldest first
    assert to_unload(loaded, keep_last=2) == ["policy-v3"]
    assert to_unload(loaded, keep_last=1) == ["policy-v3", "policy-v4"]
    assert to_unload(loaded, keep_last=3) == [] and to_unload([], keep_last=2) == []
    # a resumed run republished v2 after v5: it is the newest now, v3 and v4 go first
    assert to_unload(["policy-v3", "policy-v4", "policy-v5", "policy-v2"], keep_last=2) == ["policy-v3", "policy-v4"]
    with pytest.raises(ValueError, match="keep_last must be >= 1"):
        to_unload(loaded, keep_last=0)


def test_an_adapter_that_fits_its_config_and_the_served_model_passes():
    good = {f"{Q}.lora_A.weight": torch.zeros(8, 32), f"{Q}.lora_B.weight": torch.zeros(64, 8),
            f"{K}.lora_A.weight": torch.zeros(4, 32), f"{K}.lora_B.weight": torch.zeros(16, 4)}
    assert adapter_problems(good, _Cfg(8, {"k_proj": 4}), SCHEMA) == []


def test_wrong_shapes_unknown_modules_and_foreign_keys_are_named():
    # vLLM pads a too-small lora_A into its rank slots and serves it silently with the wrong
    # scaling: only this check catches it
    bad = {f"{Q}.lora_A.weight": torch.zeros(4, 32), f"{Q}.lora_B.weight": torch.zeros(64, 8),
           "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight": torch.zeros(8, 32),
           "base_model.model.lm_head.modules_to_save.weight": torch.zeros(1)}
    problems = adapter_problems(bad, _Cfg(8), SCHEMA)
    assert problems == [
        f"{Q}.lora_A.weight: shape [4, 32] != [8, 32] (rank 8, base [64, 32])",
        "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight: the served model has no "
        "model.layers.0.mlp.up_proj.weight",
        "base_model.model.lm_head.modules_to_save.weight: not a PEFT lora_A / lora_B weight"]
    assert adapter_problems({}, _Cfg(8), SCHEMA) == ["no adapter tensors"]
