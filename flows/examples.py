"""`ludic run FLOW --example`: a complete config, every field with its description.

Only the required fields get example values (the arithmetic recipe on the
tiny model that `ludic model tiny` builds); every other value is what the
flow's config model itself produces when the field is left out, so the
example cannot drift from the defaults it claims to show (a test checks that
no optional field is given here).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

__all__ = ["EXAMPLES", "example_config", "render", "required_values"]

EXAMPLES = ("demo", "rejection_sampling", "sft", "rl_train", "pipeline_rl", "pipeline_trainer", "pipeline_actor",
            "evaluate", "train_node")
TINY, BASE = "runs/models/tiny-1m", "runs/pipeline"
SFT_MODEL = f"{BASE}/sft/checkpoints/step_00000400/model"


def required_values(flow: str) -> dict[str, Any]:
    """Example values for exactly the required fields of `flow`'s config."""
    from ludic_core.recipes.arithmetic import RECIPE

    env, eval_env = RECIPE.env.model_dump(), RECIPE.eval_env.model_dump()
    teacher = {"kind": "scripted", "policy": RECIPE.teacher, "kwargs": RECIPE.teacher_kwargs}
    return {
        "demo": {},
        "rejection_sampling": {"env": env, "teacher": teacher},
        "sft": {"model_path": TINY, "dataset_path": f"{BASE}/rejection/dataset"},
        "rl_train": {"model_path": SFT_MODEL, "env": env},
        "pipeline_rl": {"model_path": SFT_MODEL, "env": env},
        "pipeline_trainer": {"model_path": SFT_MODEL, "redis_block": "ludic-redis"},
        "pipeline_actor": {"redis_block": "ludic-redis", "env": env},
        "evaluate": {"policy": {"kind": "model", "model_path": f"{BASE}/rl/checkpoints/step_00000020/model"},
                     "env": eval_env},
        # a spec names its own required fields; these show a two-node SFT stage
        "train_node": {"spec": {
            "model_path": TINY, "checkpoint_dir": f"{BASE}/sft/checkpoints", "algorithm": {"type": "sft"},
            "until_step": 100, "data": {"kind": "dataset", "path": f"{BASE}/rejection/dataset"},
            "nodes": {"nnodes": 2, "rdzv_endpoint": "head-node:29400", "node_deployments": ["train_node/node-1"]}}},
    }[flow]


def _examples() -> dict[str, BaseModel]:
    from flows.cli import load_flow

    return {flow: load_flow(flow)[1].model_validate(required_values(flow)) for flow in EXAMPLES}


def _scalar(value: Any) -> str:
    return json.dumps(value, default=list)  # JSON is YAML: lists, dicts, strings, null


def render(model: BaseModel, indent: int = 0, required: frozenset[str] = frozenset(),
           follows: dict[str, str] | None = None) -> list[str]:
    """YAML lines for `model`, each field preceded by its description as a comment
    (`required:` before it when the field in `required` has no default). A derived
    value (`follows`, dotted paths from here) is written null, "follows SOURCE": a
    stated copy would go stale when its source is edited, and then be refused."""
    pad, lines = "  " * indent, []
    follows = type(model).follows if follows is None else follows
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        note = "required: " if name in required else ""
        if field.description or note:
            lines.append(f"{pad}# {note}{field.description or ''}".rstrip())
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            inner = {path.split(".", 1)[1]: src for path, src in follows.items() if path.startswith(f"{name}.")}
            lines += render(value, indent + 1, follows=inner)
        elif name in follows:
            lines.append(f"{pad}{name}: null  # follows {follows[name]} ({_scalar(value)} here)")
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")
    return lines


def example_config(flow: str) -> str:
    if flow not in EXAMPLES:
        raise ValueError(f"no example for flow {flow!r}; flows: {sorted(EXAMPLES)}")
    model = _examples()[flow]
    required = frozenset(n for n, f in type(model).model_fields.items() if f.is_required())
    head = [f"# ludic run {flow} --config THIS_FILE.yaml",
            "# Fields marked `required:` hold example values; every other value is the default a field takes",
            "# when left out. A nested mapping may be partial: it changes only the fields it names."]
    return "\n".join(head + render(model, required=required)) + "\n"
