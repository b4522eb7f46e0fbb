"""Which server a training run starts and how it publishes: a LoRA run serves
adapters at its rank unless told to publish merged weights; a policy's adapter
directory is named and served at its rank."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ludic_core.compose.serving import adapter_label, adapter_rank, server_for_adapter, server_for_run
from ludic_core.config import AdapterPublishing, LoRAConfig, SFTConfig, TrainerConfig, VLLMEndpoint
from ludic_core.stages.spec import DatasetData, StageSpec
from ludic_core.vllm.server import VLLMServerConfig

LORA = LoRAConfig(r=12)


def test_a_lora_run_starts_a_server_serving_its_rank():
    server = server_for_run(VLLMServerConfig(port=8011), LORA, AdapterPublishing())
    assert server.max_lora_rank == 12 and server.port == 8011  # vLLM's flag rounds it up to 16
    assert server_for_run(VLLMServerConfig(max_lora_rank=64), LORA, AdapterPublishing()).max_lora_rank == 64


def test_full_fine_tunes_and_merged_publishing_start_a_plain_server():
    plain = VLLMServerConfig()
    assert server_for_run(plain, None, AdapterPublishing()) is plain
    assert server_for_run(plain, LORA, AdapterPublishing(mode="merged")) is plain


def test_contradictions_are_refused_naming_both_sides():
    with pytest.raises(ValueError, match=r"max_lora_rank \(8\) is below the run's LoRA rank.*r = 12"):
        server_for_run(VLLMServerConfig(max_lora_rank=8), LORA, AdapterPublishing())
    with pytest.raises(ValueError, match="mode 'adapter' publishes LoRA adapters, but the trainer has no lora"):
        AdapterPublishing(mode="adapter").publishes_adapters(None)


def test_adapters_go_beside_the_checkpoints_unless_told_otherwise():
    assert AdapterPublishing().directory("runs/rl/checkpoints") == "runs/rl/adapters"
    assert AdapterPublishing(adapter_dir="/shared/a").directory("runs/rl/checkpoints") == "/shared/a"


def test_a_stage_spec_refuses_adapter_publishing_without_lora():
    endpoint = VLLMEndpoint(base_url="http://127.0.0.1:1/v1", lora=AdapterPublishing(mode="adapter"))
    common = dict(model_path="m", checkpoint_dir="c", algorithm=SFTConfig(), data=DatasetData(path="d"),
                  until_step=1, vllm=endpoint)
    with pytest.raises(ValidationError, match="the trainer has no lora config"):
        StageSpec(**common)
    assert StageSpec(**common, trainer=TrainerConfig(lora=LORA)).vllm.lora.mode == "adapter"


def _adapter_dir(path, r=4, rank_pattern=None):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": r, "rank_pattern": rank_pattern or {}}))
    (path / "adapter_model.safetensors").write_bytes(b"")
    return path


def test_an_adapter_directory_is_named_after_its_checkpoint_and_its_path(tmp_path):
    one = _adapter_dir(tmp_path / "a" / "step_00000010" / "model")
    two = _adapter_dir(tmp_path / "b" / "step_00000010" / "model")
    assert adapter_label(one).startswith("step_00000010-") and adapter_label(one) != adapter_label(two)
    assert adapter_label(one) == adapter_label(str(one) + "/")  # the same directory, the same name
    assert adapter_label(_adapter_dir(tmp_path / "my-adapter")).startswith("my-adapter-")


def test_a_server_started_for_an_adapter_directory_serves_its_rank(tmp_path):
    wide = _adapter_dir(tmp_path / "wide", r=4, rank_pattern={"q_proj": 24})
    assert adapter_rank(wide) == 24
    assert server_for_adapter(VLLMServerConfig(), str(wide)).max_lora_rank == 24
    assert server_for_adapter(VLLMServerConfig(max_lora_rank=64), str(wide)).max_lora_rank == 64
    assert server_for_adapter(VLLMServerConfig(), None).max_lora_rank is None
    with pytest.raises(FileNotFoundError, match="'policy-v3' is not an adapter directory.*a name only names one"):
        server_for_adapter(VLLMServerConfig(), "policy-v3")
