"""reasoning-gym recipe: a few of its tasks that a tiny model learns, in one mix.

The teacher answers with each entry's own answer (`reasoning_gym_answer`);
evaluation plays the same tasks from another dataset seed, and reports
accuracy per task. The tasks and their settings are the env's kwargs, so a
user's own mix is a config, not code (docs/envs/reasoning-gym.md).

Why these three: on a wider mix the tiny model learned the format and each
task's commonest answer before anything else; tasks whose questions come from
a small space (two one-digit numbers, numbers below 64, three-letter words)
are the ones the demo's SFT budget takes further (docs/envs/reasoning-gym.md).
Bare answers and no system message, as in the arithmetic recipe: a fixed
instruction tells a model trained from scratch nothing and costs tokens.
"""

from __future__ import annotations

from typing import Any

from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.recipes.recipe import Recipe

__all__ = ["RECIPE", "TASKS", "CONFIG"]

TASKS: dict[str, float] = {"basic_arithmetic": 1.0, "count_bits": 1.0, "spell_backward": 1.0}
CONFIG: dict[str, dict[str, Any]] = {
    "basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
                         "allow_parentheses": False, "allow_negation": False},
    "count_bits": {"max_n": 63},
    "spell_backward": {"min_word_len": 3, "max_word_len": 3},
}
_MIX = {"tasks": TASKS, "config": CONFIG, "size": 100_000}

RECIPE = Recipe(
    name="reasoning_gym",
    env=EnvConfig(name="reasoning_gym", kwargs={**_MIX, "seed": 0}),
    eval_env=EnvConfig(name="reasoning_gym", kwargs={**_MIX, "seed": 1}),
    # the longest teacher reply, "<answer>abc</answer>", is 21 tokens with eos; slack lets a confused model fail visibly
    agent=AgentConfig(system_prompt="", parser=ComponentConfig(name="xml_tag", kwargs={"tag": "answer"}),
                      sampling=SamplingConfig(max_tokens=40), max_turns=1),
    teacher="reasoning_gym_answer",
    teacher_kwargs={**_MIX, "seed": 0},
    sft_steps=800,
    rl_temperature=1.0,
    rl_lr=1e-5,  # from this SFT start 3e-5 lowered accuracy in 30 GRPO steps; 1e-5 held it (docs/results.md)
    eval_seed=0,
    eval_episodes=600,
    table={**{task: f"{task}/accuracy" for task in TASKS}, "parse errors": "parse_error_rate"},
)
