"""Arithmetic recipe: offline GSM8K-style word problems, graded numerically.

The teacher is an oracle that solves the generated questions; evaluation uses
a held-out problem set (another generator seed), one episode per problem.

Two choices, each measured on the demo (the numbers:
docs/experiments/2026-11-25-demo-recipes.md; the current table:
docs/results.md):
- The teacher shows its work ("5 + 3 = 8" on a line before the answer tag),
  and there is no system message. With the bare answer after the env's
  instruction, SFT could only guess. Writing the operands out first leaves the
  model one addition of two numbers it has just written; a fixed instruction
  tells a model trained from scratch nothing and was a third of every
  sequence's tokens.
- 800 SFT steps, not 400: the 400-step model was undertrained, not at the
  tiny model's capacity.
"""

from __future__ import annotations

from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.recipes.recipe import Recipe

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="arithmetic",
    env=EnvConfig(name="arithmetic", kwargs={"n": 4000, "seed": 0, "difficulty": "easy"}),
    eval_env=EnvConfig(name="arithmetic", kwargs={"n": 300, "seed": 1, "difficulty": "easy"}),
    # "20 + 20 = 40\n<answer>40</answer>" is 30 bytes + eos; slack lets a confused model fail visibly.
    # failure_penalty -1: the shaping the demo's arithmetic results were measured with (the parsers' default is 0)
    agent=AgentConfig(system_prompt="", parser=ComponentConfig(name="xml_tag", kwargs={"tag": "answer",
                                                                                       "failure_penalty": -1.0}),
                      sampling=SamplingConfig(max_tokens=40), max_turns=1),
    teacher="arithmetic_oracle",
    teacher_kwargs={"show_work": True},
    sft_steps=800,
    rl_temperature=1.0,
    rl_lr=1e-5,  # from the 400-step start, 1e-4 took greedy accuracy 0.617 -> 0.327 in 30 steps (docs/experiments)
    eval_seed=0,  # seeds 0..299 walk the held-out problems once each
    eval_episodes=300,
    table={"accuracy": "success_rate", "parse errors": "parse_error_rate"},
)
