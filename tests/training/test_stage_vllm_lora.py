"""A LoRA RL stage rolling out through the session's vLLM server: it publishes
adapters (beside its checkpoints), never full weights, and trains on rollouts
of the adapter version it just published."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from ludic_core.config import GRPOConfig, LoRAConfig, TrainerConfig, VLLMEndpoint
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.stages.run import RolloutData, StageSpec, run_stage

pytestmark = pytest.mark.vllm


def test_a_lora_stage_publishes_adapters_into_vllm_and_trains_on_their_rollouts(vllm_server, tiny_model_dir,
                                                                                 tmp_path, monkeypatch):
    monkeypatch.setenv("LUDIC_VLLM_TEST_KEY", vllm_server.api_key)
    headers = {"Authorization": f"Bearer {vllm_server.api_key}"}
    version = httpx.get(f"{vllm_server.root_url}/weight_info", headers=headers).json()["weight_version"]
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "run" / "checkpoints"),
                     algorithm=GRPOConfig(group_size=4), until_step=2,
                     trainer=TrainerConfig(lr=1e-3, lora=LoRAConfig(r=4), max_lag=0),  # older rollouts: dropped
                     data=RolloutData(env=ENV, agent=AGENT, requests_per_step=2),
                     vllm=VLLMEndpoint(base_url=vllm_server.base_url, api_key_env="LUDIC_VLLM_TEST_KEY"))
    try:
        result = run_stage(spec)
        served = httpx.get(f"{vllm_server.base_url}/models", headers=headers).json()["data"]
    finally:
        for m in httpx.get(f"{vllm_server.base_url}/models", headers=headers).json()["data"]:
            if m.get("parent"):  # leave the session's server serving its base alone
                httpx.post(f"{vllm_server.root_url}/v1/unload_lora_adapter", json={"lora_name": m["id"]},
                           headers=headers)
    assert result["step"] == 2 and result["metrics"]["rollouts"] == 8.0
    assert result["metrics"]["stale_dropped"] == 0.0  # step 2 trained on rollouts of policy-v1
    adapters = {m["id"]: m["root"] for m in served if m.get("parent")}
    assert sorted(adapters) == ["policy-v1", "policy-v2"]  # v0 (published at the start) was unloaded
    assert all(Path(p).parent == tmp_path / "run" / "adapters" for p in adapters.values())
    assert httpx.get(f"{vllm_server.root_url}/weight_info", headers=headers).json()["weight_version"] == version
