"""`ludic run FLOW --example`: a complete config, every field with its description.

The examples are real values (the arithmetic recipe on the tiny model that
`ludic model tiny` builds), rendered from the config models themselves, so a
new field shows up here with its description and a test checks that each
example parses back to the same config.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

__all__ = ["EXAMPLES", "example_config", "render"]


def _examples() -> dict[str, BaseModel]:
    from flows.demo import DemoConfig
    from flows.evaluate import EvaluateConfig
    from flows.pipeline_parts import PipelineActorConfig, PipelineTrainerConfig
    from flows.pipeline_rl import PipelineRLConfig
    from flows.rejection_sampling import RejectionSamplingConfig
    from flows.rl_train import RLTrainConfig
    from flows.sft import SFTFlowConfig
    from flows.train_node import TrainNodeConfig
    from ludic_core.config import GRPOConfig, SFTConfig
    from ludic_core.recipes.arithmetic import RECIPE
    from ludic_core.recipes.policy import ModelPolicy, ScriptedPolicy
    from ludic_core.training.stage_spec import DatasetData, NodeSettings, StageSpec

    tiny, base = "runs/models/tiny-1m", "runs/pipeline"
    sft_model = f"{base}/sft/checkpoints/step_00000400/model"
    return {
        "demo": DemoConfig(),
        "rejection_sampling": RejectionSamplingConfig(
            env=RECIPE.env, agent=RECIPE.agent,
            teacher=ScriptedPolicy(policy=RECIPE.teacher, kwargs=RECIPE.teacher_kwargs),
            student_path=tiny, prompts=2048, out_dir=f"{base}/rejection"),
        "sft": SFTFlowConfig(model_path=tiny, dataset_path=f"{base}/rejection/dataset", out_dir=f"{base}/sft"),
        "rl_train": RLTrainConfig(model_path=sft_model, out_dir=f"{base}/rl", env=RECIPE.env, agent=RECIPE.agent,
                                  eval_env=RECIPE.eval_env, eval_seed=0, algorithm=GRPOConfig(group_size=8), steps=30),
        "pipeline_rl": PipelineRLConfig(model_path=sft_model, out_dir=f"{base}/pipeline_rl", env=RECIPE.env,
                                        agent=RECIPE.agent, algorithm=GRPOConfig(group_size=8), steps=30),
        "pipeline_trainer": PipelineTrainerConfig(model_path=sft_model, out_dir=f"{base}/pipeline_trainer",
                                                  redis_block="ludic-redis", policy_dir=f"{base}/policy", steps=30),
        "pipeline_actor": PipelineActorConfig(redis_block="ludic-redis", env=RECIPE.env, agent=RECIPE.agent,
                                              policy_dir=f"{base}/policy"),
        "evaluate": EvaluateConfig(policy=ModelPolicy(model_path=f"{base}/rl/checkpoints/step_00000030/model"),
                                   env=RECIPE.eval_env, agent=RECIPE.agent, episodes=300, seed=0),
        "train_node": TrainNodeConfig(spec=StageSpec(
            model_path=tiny, checkpoint_dir=f"{base}/sft/checkpoints", algorithm=SFTConfig(), until_step=100,
            data=DatasetData(path=f"{base}/rejection/dataset"),
            nodes=NodeSettings(nnodes=2, rdzv_endpoint="head-node:29400", node_deployments=["train_node/node-1"]))),
    }


EXAMPLES = ("demo", "rejection_sampling", "sft", "rl_train", "pipeline_rl", "pipeline_trainer", "pipeline_actor",
            "evaluate", "train_node")


def _scalar(value: Any) -> str:
    return json.dumps(value, default=list)  # JSON is YAML: lists, dicts, strings, null


def render(model: BaseModel, indent: int = 0) -> list[str]:
    """YAML lines for `model`, each field preceded by its description as a comment."""
    pad, lines = "  " * indent, []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.description:
            lines.append(f"{pad}# {field.description}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            lines += render(value, indent + 1)
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")
    return lines


def example_config(flow: str) -> str:
    examples = _examples()
    if flow not in examples:
        raise ValueError(f"no example for flow {flow!r}; flows: {sorted(examples)}")
    head = [f"# ludic run {flow} --config THIS_FILE.yaml", "# (every field is shown; omitted ones take these defaults)"]
    return "\n".join(head + render(examples[flow])) + "\n"
