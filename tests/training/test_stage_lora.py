"""A LoRA RL stage in-process: rollouts from base + pushed adapter, adapter checkpoints,
a second stage that resumes from one (and serves its adapter, not merged weights)."""

from pathlib import Path

from ludic_core.config import GRPOConfig, LoRAConfig, TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.stages.run import RolloutData, StageSpec, run_stage


def test_lora_rl_stage_checkpoints_adapters_and_resumes(tiny_model_dir, tmp_path):
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "ckpt"),
                     algorithm=GRPOConfig(group_size=4), trainer=TrainerConfig(lr=1e-3, lora=LoRAConfig(r=4)),
                     data=RolloutData(env=ENV, agent=AGENT, requests_per_step=2), until_step=1,
                     metrics_path=str(tmp_path / "m.jsonl"))
    first = run_stage(spec)
    assert first["step"] == 1 and first["metrics"]["rollouts"] == 8.0
    assert sorted(p.name for p in Path(first["model_path"]).glob("*.safetensors")) == ["adapter_model.safetensors"]
    second = run_stage(spec.model_copy(update={"until_step": 2}))
    assert second["resumed_from"] == 1 and second["steps_run"] == 1 and second["metrics"]["rollouts"] == 8.0
    assert second["metrics"]["policy_version"] == 2.0
    model, _ = load_model_and_tokenizer(second["model_path"])  # what evaluation or the next stage loads
    assert not hasattr(model, "peft_config")
